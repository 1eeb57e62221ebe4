package gcefake_test

import (
	"context"
	"net/http"
	"testing"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

func firewallsClient(t *testing.T, f *gcefake.Fake) *compute.FirewallsClient {
	t.Helper()
	c, err := compute.NewFirewallsRESTClient(context.Background(), option.WithEndpoint(f.URL()), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func udpRule(name string, port string) *computepb.Firewall {
	return &computepb.Firewall{Name: proto.String(name), Description: proto.String("test"),
		Allowed:    []*computepb.Allowed{{IPProtocol: proto.String("udp"), Ports: []string{port}}},
		SourceTags: []string{"wg"}, TargetTags: []string{"wg"}}
}

// TestFirewalls drives firewalls get, insert, update and delete through the real client:
// the defaults the API fills in, 404 notFound and 409 alreadyExists in the API's error
// shape, PUT replacing the whole rule, validation, and injected faults (an HTTP error, and
// an insert whose operation fails and leaves no rule).
func TestFirewalls(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	fw := firewallsClient(t, c.f)
	ctx := context.Background()
	p := c.f.Project()

	_, err := fw.Get(ctx, &computepb.GetFirewallRequest{Project: p, Firewall: "wg"})
	if code, why := httpCode(err); code != http.StatusNotFound || why != "notFound" {
		t.Errorf("get of a missing rule: %v, want 404 notFound", err)
	}
	op, err := fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: p, FirewallResource: udpRule("wg", "51871")})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(ctx); err != nil || !op.Done() {
		t.Fatalf("insert operation: %v (done %v)", err, op.Done())
	}
	got, err := fw.Get(ctx, &computepb.GetFirewallRequest{Project: p, Firewall: "wg"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetDirection() != "INGRESS" || got.GetPriority() != 1000 || got.GetId() == 0 || got.GetKind() != "compute#firewall" ||
		got.GetNetwork() != "https://www.googleapis.com/compute/v1/projects/"+p+"/global/networks/default" ||
		got.GetSelfLink() != "https://www.googleapis.com/compute/v1/projects/"+p+"/global/firewalls/wg" {
		t.Errorf("stored rule %v: want the API's defaults (INGRESS, 1000, the default network) and its links", got)
	}
	_, err = fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: p, FirewallResource: udpRule("wg", "51871")})
	if code, why := httpCode(err); code != http.StatusConflict || why != "alreadyExists" {
		t.Errorf("second insert: %v, want 409 alreadyExists", err)
	}

	// PUT replaces the rule: ports, tags and description are the body's, the id stays.
	upd := udpRule("wg", "51872")
	upd.SourceTags, upd.Description = nil, nil
	upd.SourceRanges = []string{"10.0.0.0/8"}
	if _, err := fw.Update(ctx, &computepb.UpdateFirewallRequest{Project: p, Firewall: "wg", FirewallResource: upd}); err != nil {
		t.Fatal(err)
	}
	after := c.f.Firewalls()[0]
	if after.GetId() != got.GetId() || after.GetAllowed()[0].GetPorts()[0] != "51872" || len(after.GetSourceTags()) != 0 ||
		after.GetDescription() != "" || len(after.GetSourceRanges()) != 1 {
		t.Errorf("after update: %v", after)
	}
	_, err = fw.Update(ctx, &computepb.UpdateFirewallRequest{Project: p, Firewall: "nope", FirewallResource: udpRule("nope", "1")})
	if code, _ := httpCode(err); code != http.StatusNotFound {
		t.Errorf("update of a missing rule: %v, want 404", err)
	}

	for name, bad := range map[string]*computepb.Firewall{
		"bad name":          udpRule("Bad_Name", "51871"),
		"bad port":          udpRule("p", "51871/udp"),
		"ports on icmp":     {Name: proto.String("i"), Allowed: []*computepb.Allowed{{IPProtocol: proto.String("icmp"), Ports: []string{"1"}}}},
		"bad tag":           {Name: proto.String("t"), SourceTags: []string{"WG"}, Allowed: []*computepb.Allowed{{IPProtocol: proto.String("udp")}}},
		"bad network":       {Name: proto.String("n"), Network: proto.String("my-net"), Allowed: []*computepb.Allowed{{IPProtocol: proto.String("udp")}}},
		"egress source tag": {Name: proto.String("e"), Direction: proto.String("EGRESS"), SourceTags: []string{"wg"}, Allowed: []*computepb.Allowed{{IPProtocol: proto.String("udp")}}},
	} {
		_, err := fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: p, FirewallResource: bad})
		if code, why := httpCode(err); code != http.StatusBadRequest || why != "invalid" {
			t.Errorf("%s: %v, want 400 invalid", name, err)
		}
	}
	if _, err := fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: "other", FirewallResource: udpRule("x", "1")}); err == nil {
		t.Error("insert into another project was accepted")
	}

	// An HTTP fault answers once; an operation fault fails the insert's operation and
	// leaves no rule behind.
	c.f.Fail(http.MethodGet, "global/firewalls/wg", 1, gcefake.ErrBackend)
	if _, err := fw.Get(ctx, &computepb.GetFirewallRequest{Project: p, Firewall: "wg"}); err == nil {
		t.Error("the injected 500 did not answer")
	}
	c.f.Fail(http.MethodPost, "global/firewalls", 1, gcefake.Fault{OpCode: "QUOTA_EXCEEDED", OpHTTPStatus: http.StatusForbidden, Message: "Quota 'FIREWALLS' exceeded.  Limit: 100.0 globally."})
	op, err = fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: p, FirewallResource: udpRule("q", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(ctx); err == nil || !op.Done() {
		t.Errorf("the faulted insert's operation ended without an error (done %v)", op.Done())
	}
	if codes := op.Proto().GetError().GetErrors(); len(codes) != 1 || codes[0].GetCode() != "QUOTA_EXCEEDED" {
		t.Errorf("faulted insert operation: %v", op.Proto())
	}
	if _, err := fw.Get(ctx, &computepb.GetFirewallRequest{Project: p, Firewall: "q"}); err == nil {
		t.Error("a failed insert left its rule")
	}

	if _, err := fw.Delete(ctx, &computepb.DeleteFirewallRequest{Project: p, Firewall: "wg"}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.f.Firewalls()); n != 0 {
		t.Errorf("%d rules after delete, want 0", n)
	}
	_, err = fw.Delete(ctx, &computepb.DeleteFirewallRequest{Project: p, Firewall: "wg"})
	if code, why := httpCode(err); code != http.StatusNotFound || why != "notFound" {
		t.Errorf("delete of a missing rule: %v, want 404 notFound", err)
	}
}
