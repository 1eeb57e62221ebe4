package gce

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

func wireGuardProvider(t *testing.T, f *gcefake.Fake, cluster, network string) *Provider {
	t.Helper()
	p, err := New(context.Background(), Options{
		Project: f.Project(), Endpoint: f.URL(), Cluster: cluster, Network: network, Rate: 1000, Burst: 1000,
		WireGuardFirewall: true, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// checkWireGuardRule fails unless fw is the cluster's rule: UDP 51871 in, from the tag to
// the tag, on network, described as prebake's.
func checkWireGuardRule(t *testing.T, fw *computepb.Firewall, cluster, tag, network string) {
	t.Helper()
	a := fw.GetAllowed()
	if fw.GetName() != tag || fw.GetDirection() != "INGRESS" || fw.GetDisabled() || len(a) != 1 || a[0].GetIPProtocol() != "udp" ||
		!slices.Equal(a[0].GetPorts(), []string{"51871"}) || !slices.Equal(fw.GetSourceTags(), []string{tag}) ||
		!slices.Equal(fw.GetTargetTags(), []string{tag}) || len(fw.GetSourceRanges()) != 0 || !strings.HasSuffix(fw.GetNetwork(), "/global/networks/"+network) ||
		!strings.HasPrefix(fw.GetDescription(), "prebake cluster "+cluster+":") {
		t.Errorf("rule %v: want %s, UDP 51871 from and to tag %s on network %s, described as cluster %s's", fw, tag, tag, network, cluster)
	}
}

// TestWireGuardFirewall: the provider keeps one VPC firewall rule that opens UDP 51871
// between the instances carrying the cluster's tag, and tags every instance it creates;
// created once, found again by a restarted provider, corrected when someone changed it,
// recreated when deleted, and never taken over when a rule of that name is not prebake's.
func TestWireGuardFirewall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(t, gcefake.Options{})
	p := wireGuardProvider(t, f, "c", "")
	tag := p.WireGuardTag()
	if tag != "prebake-c-cilium-wireguard" {
		t.Errorf("tag %q", tag)
	}

	res, err := p.EnsureWireGuardFirewall(ctx)
	if err != nil || !res.Created || res.Name != tag {
		t.Fatalf("first call: %+v, %v; want the rule created", res, err)
	}
	fws := f.Firewalls()
	if len(fws) != 1 {
		t.Fatalf("%d rules, want 1", len(fws))
	}
	checkWireGuardRule(t, fws[0], "c", tag, "default")

	// Every instance the provider creates carries the tag; another cluster's does not.
	if _, err := p.Create(ctx, request("g-1", "g", "e2-standard-2", testZone)); err != nil {
		t.Fatal(err)
	}
	other := newTestProvider(t, f)
	other.o.Cluster = "d"
	if _, err := other.Create(ctx, request("h-1", "h", "e2-standard-2", testZone)); err != nil {
		t.Fatal(err)
	}
	for _, in := range f.Instances() {
		var want []string
		if in.Name == "g-1" {
			want = []string{tag}
		}
		if !slices.Equal(in.Tags, want) {
			t.Errorf("instance %s has tags %v, want %v", in.Name, in.Tags, want)
		}
	}

	// Idempotent, and restart-safe: a new provider finds the rule by name, changes nothing.
	restarted := wireGuardProvider(t, f, "c", "")
	f.ResetRequests()
	again, err := restarted.EnsureWireGuardFirewall(ctx)
	if err != nil || again.Created || again.Updated {
		t.Errorf("after a restart: %+v, %v; want the rule found unchanged", again, err)
	}
	if n := f.Calls(http.MethodPost, "/global/firewalls") + f.Calls(http.MethodPut, "/global/firewalls/"+tag); n != 0 {
		t.Errorf("%d writes for a rule that was right", n)
	}

	// Someone opened it to the world and moved the port: corrected with one PUT.
	changed := proto.CloneOf(fws[0])
	changed.SourceRanges = []string{"0.0.0.0/0"}
	changed.Allowed[0].Ports = []string{"51820"}
	if _, err := p.firewalls.Update(ctx, &computepb.UpdateFirewallRequest{Project: f.Project(), Firewall: tag, FirewallResource: changed}); err != nil {
		t.Fatal(err)
	}
	fixed, err := p.EnsureWireGuardFirewall(ctx)
	if err != nil || !fixed.Updated || fixed.Created {
		t.Fatalf("after a change: %+v, %v; want the rule updated", fixed, err)
	}
	checkWireGuardRule(t, f.Firewalls()[0], "c", tag, "default")

	// Deleted: recreated.
	if _, err := p.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: f.Project(), Firewall: tag}); err != nil {
		t.Fatal(err)
	}
	if back, err := p.EnsureWireGuardFirewall(ctx); err != nil || !back.Created {
		t.Errorf("after a delete: %+v, %v; want it created again", back, err)
	}

	// A rule of that name prebake did not make is left alone.
	foreign := proto.CloneOf(f.Firewalls()[0])
	foreign.Description = proto.String("the network team's rule")
	foreign.Allowed[0].Ports = []string{"1-65535"}
	if _, err := p.firewalls.Update(ctx, &computepb.UpdateFirewallRequest{Project: f.Project(), Firewall: tag, FirewallResource: foreign}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnsureWireGuardFirewall(ctx); err == nil || !strings.Contains(err.Error(), "prebake did not make it") || !strings.Contains(err.Error(), tag) {
		t.Errorf("a foreign rule of the same name: %v, want a refusal naming it", err)
	}
	if got := f.Firewalls()[0].GetAllowed()[0].GetPorts(); !slices.Equal(got, []string{"1-65535"}) {
		t.Errorf("the foreign rule was changed: ports %v", got)
	}
}

// TestWireGuardFirewallRaceAndFaults: an insert that loses a race (409 after a get that
// found nothing) takes the rule that won; a failed insert operation is an error that names
// the rule and leaves none; the rule goes on the configured network; Run retries until the
// rule is in place.
func TestWireGuardFirewallRaceAndFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(t, gcefake.Options{})
	p := wireGuardProvider(t, f, "c", "projects/"+gcefake.DefaultProject+"/global/networks/prod")
	tag := p.WireGuardTag()

	f.Fail(http.MethodPost, "global/firewalls", 1, gcefake.Fault{OpCode: "QUOTA_EXCEEDED", OpHTTPStatus: http.StatusForbidden, Message: "Quota 'FIREWALLS' exceeded.  Limit: 100.0 globally."})
	if _, err := p.EnsureWireGuardFirewall(ctx); err == nil || !strings.Contains(err.Error(), "create firewall rule "+tag) || !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Errorf("failed insert operation: %v", err)
	}
	if n := len(f.Firewalls()); n != 0 {
		t.Fatalf("%d rules after a failed insert", n)
	}

	// Another prebake of the cluster inserts it between our get and our insert.
	other := wireGuardProvider(t, f, "c", "projects/"+gcefake.DefaultProject+"/global/networks/prod")
	if _, err := other.EnsureWireGuardFirewall(ctx); err != nil {
		t.Fatal(err)
	}
	f.Fail(http.MethodGet, "global/firewalls/"+tag, 1, gcefake.Fault{HTTPStatus: http.StatusNotFound, Reason: "notFound", Message: "The resource 'projects/prebake-test/global/firewalls/" + tag + "' was not found"})
	res, err := p.EnsureWireGuardFirewall(ctx)
	if err != nil || res.Created || res.Updated {
		t.Errorf("lost the insert race: %+v, %v; want the winner's rule taken as it is", res, err)
	}
	checkWireGuardRule(t, f.Firewalls()[0], "c", tag, "prod")

	// Run: the first attempt fails (the get is forbidden), Run logs and waits to retry;
	// ending its context ends it. Run again, it puts the rule in place and returns.
	if _, err := p.firewalls.Delete(ctx, &computepb.DeleteFirewallRequest{Project: f.Project(), Firewall: tag}); err != nil {
		t.Fatal(err)
	}
	// Not a 503: the client retries that by itself, and Run would never see it.
	f.Fail(http.MethodGet, "global/firewalls/"+tag, 1, gcefake.Fault{HTTPStatus: http.StatusForbidden, Reason: "forbidden",
		Message: "Required 'compute.firewalls.get' permission for 'projects/prebake-test/global/firewalls/" + tag + "'"})
	f.ResetRequests()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	failedGet := func() bool {
		for _, r := range f.Requests() {
			if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/global/firewalls/"+tag) && r.Status == http.StatusForbidden {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !failedGet() {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v before its get failed", err)
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for Run's get")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Firewalls()); n != 1 {
		t.Errorf("%d rules after Run, want 1", n)
	}
}

func TestWireGuardNameFitsGCE(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 40) + "-" + strings.Repeat("b", 22) // a 63-character DNS label
	for _, c := range []string{"c", "demo", long, long[:50] + "-x"} {
		n := wireGuardName(c)
		if len(n) > 63 || !strings.HasPrefix(n, "prebake-") || strings.HasSuffix(n, "-") || strings.Contains(n, "--") && !strings.Contains(c, "--") {
			t.Errorf("wireGuardName(%q) = %q: not a GCE name of at most 63 characters", c, n)
		}
	}
	if wireGuardName(long) == wireGuardName(long[:62]+"c") {
		t.Error("two long cluster names that differ at the end share a rule name")
	}
}
