package gcefake_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

const zone = "europe-west4-a"

// insertGuest inserts an instance with these metadata items.
func (c clients) insertGuest(t *testing.T, name string, items map[string]string) {
	t.Helper()
	b := body(name, zone, "e2-standard-2", nil)
	b.Metadata = &computepb.Metadata{}
	for k, v := range items {
		b.Metadata.Items = append(b.Metadata.Items, &computepb.Items{Key: proto.String(k), Value: proto.String(v)})
	}
	if _, err := c.inst.Insert(context.Background(), &computepb.InsertInstanceRequest{Project: c.f.Project(), Zone: zone, InstanceResource: b}); err != nil {
		t.Fatal(err)
	}
}

// guestRequest sends one request to the instance's metadata server and
// returns the status and body.
func guestRequest(t *testing.T, f *gcefake.Fake, instance, method, path, body string, header map[string]string) (int, string) {
	t.Helper()
	base, err := f.MetadataURL(instance)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

var google = map[string]string{"Metadata-Flavor": "Google"}

const reportPath = "/computeMetadata/v1/instance/guest-attributes/prebake/report"

// The guest writes an attribute through its metadata server; the API's
// getGuestAttributes reads it back, by path and by key; before that, and
// for other paths, it is 404.
func TestGuestAttributesRoundTrip(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	ctx := context.Background()
	c.insertGuest(t, "b1", map[string]string{"enable-guest-attributes": "TRUE", "user-data": "#cloud-config\n"})
	get := func(path, key string) (*computepb.GuestAttributes, error) {
		req := &computepb.GetGuestAttributesInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "b1"}
		if path != "" {
			req.QueryPath = proto.String(path)
		}
		if key != "" {
			req.VariableKey = proto.String(key)
		}
		return c.inst.GetGuestAttributes(ctx, req)
	}
	if _, err := get("prebake/report", ""); !isCode(err, 404) {
		t.Fatalf("before the guest wrote: %v, want 404", err)
	}
	if code, out := guestRequest(t, c.f, "b1", http.MethodGet, "/computeMetadata/v1/instance/attributes/user-data", "", google); code != 200 || out != "#cloud-config" {
		t.Errorf("user-data from the metadata server = %d %q", code, out)
	}
	if code, out := guestRequest(t, c.f, "b1", http.MethodPut, reportPath, `{"status":"done"}`, google); code != 200 {
		t.Fatalf("PUT report = %d %s", code, out)
	}
	guestRequest(t, c.f, "b1", http.MethodPut, "/computeMetadata/v1/instance/guest-attributes/other/x", "1", google)
	ga, err := get("prebake/report", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []*computepb.GuestAttributesEntry{{Namespace: proto.String("prebake"), Key: proto.String("report"), Value: proto.String(`{"status":"done"}`)}}
	if d := cmp.Diff(want, ga.GetQueryValue().GetItems(), protocmp.Transform()); d != "" {
		t.Errorf("queryPath prebake/report (-want +got):\n%s", d)
	}
	if ga, err := get("prebake/", ""); err != nil || len(ga.GetQueryValue().GetItems()) != 1 {
		t.Errorf("queryPath prebake/ = %v, %v; want the one entry", ga, err)
	}
	if ga, err := get("", "prebake/report"); err != nil || ga.GetVariableValue() != `{"status":"done"}` {
		t.Errorf("variableKey = %v, %v", ga, err)
	}
	if _, err := get("prebake/missing", ""); !isCode(err, 404) {
		t.Errorf("missing key: %v, want 404", err)
	}
	if code, out := guestRequest(t, c.f, "b1", http.MethodGet, reportPath, "", google); code != 200 || out != `{"status":"done"}` {
		t.Errorf("GET from the guest = %d %q", code, out)
	}
	if got := c.f.Instances()[0].GuestAttributes; !cmp.Equal(got, map[string]string{"prebake/report": `{"status":"done"}`, "other/x": "1"}) {
		t.Errorf("Instances().GuestAttributes = %v", got)
	}
}

// The metadata server refuses what the real one refuses.
func TestMetadataServerRefuses(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	c.insertGuest(t, "on", map[string]string{"enable-guest-attributes": "TRUE"})
	c.insertGuest(t, "off", nil)
	c.insertGuest(t, "false", map[string]string{"enable-guest-attributes": "FALSE"})
	for _, tc := range []struct {
		name, instance string
		header         map[string]string
		want           int
	}{
		{"no Metadata-Flavor", "on", nil, 403},
		{"wrong Metadata-Flavor", "on", map[string]string{"Metadata-Flavor": "Amazon"}, 403},
		{"X-Forwarded-For", "on", map[string]string{"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"}, 403},
		{"guest attributes not enabled", "off", google, 403},
		{"guest attributes disabled", "false", google, 403},
		{"enabled, with the header", "on", google, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, out := guestRequest(t, c.f, tc.instance, http.MethodPut, reportPath, "{}", tc.header); code != tc.want {
				t.Errorf("PUT = %d %s, want %d", code, out, tc.want)
			}
		})
	}
	for _, in := range c.f.Instances() {
		if want := map[bool]int{true: 1, false: 0}[in.Name == "on"]; len(in.GuestAttributes) != want {
			t.Errorf("%s holds guest attributes %v, want %d", in.Name, in.GuestAttributes, want)
		}
	}
}

// Injected faults reach the metadata server and getGuestAttributes.
func TestGuestFaults(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	c.insertGuest(t, "b1", map[string]string{"enable-guest-attributes": "TRUE"})
	c.f.Fail(http.MethodPut, "metadata/"+zone+"/b1", 1, gcefake.ErrUnavailable)
	if code, _ := guestRequest(t, c.f, "b1", http.MethodPut, reportPath, "{}", google); code != 503 {
		t.Errorf("PUT with a fault = %d, want 503", code)
	}
	if code, _ := guestRequest(t, c.f, "b1", http.MethodPut, reportPath, "{}", google); code != 200 {
		t.Errorf("PUT after the fault = %d, want 200", code)
	}
	c.f.Fail(http.MethodGet, "zones/"+zone+"/instances/b1/getGuestAttributes", 1, gcefake.ErrRateLimited429)
	_, err := c.inst.GetGuestAttributes(context.Background(), &computepb.GetGuestAttributesInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "b1", QueryPath: proto.String("prebake/report")})
	if !isCode(err, 429) {
		t.Errorf("getGuestAttributes with a fault: %v, want 429", err)
	}
}

// stop ends TERMINATED through its operation; a running instance's disk
// is imaged only with forceCreate, a stopped one's without; a stopped
// instance's metadata server answers nothing.
func TestStopThenImage(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c := newClients(t, gcefake.Options{Now: clk.Now})
	ctx := context.Background()
	c.insertGuest(t, "b1", map[string]string{"enable-guest-attributes": "TRUE"})
	insertImage := func(name string) error {
		op, err := c.images.Insert(ctx, &computepb.InsertImageRequest{Project: c.f.Project(),
			ImageResource: &computepb.Image{Name: proto.String(name), SourceDisk: proto.String("zones/" + zone + "/disks/b1")}})
		if err == nil && op.Proto().GetError() != nil {
			t.Fatalf("image insert operation: %v", op.Proto())
		}
		return err
	}
	if err := insertImage("img-running"); !isCode(err, 400) {
		t.Fatalf("image of a running instance's disk: %v, want 400", err)
	}
	c.f.SetOperationDelay(time.Minute)
	op, err := c.inst.Stop(ctx, &computepb.StopInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	got = append(got, fmt.Sprint(op.Done(), "/", c.f.Instances()[0].Status))
	clk.Advance(time.Minute)
	got = append(got, c.f.Instances()[0].Status)
	if d := cmp.Diff([]string{"false/STOPPING", "TERMINATED"}, got); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	if code, _ := guestRequest(t, c.f, "b1", http.MethodPut, reportPath, "{}", google); code != 503 {
		t.Errorf("PUT to a stopped instance = %d, want 503", code)
	}
	c.f.SetOperationDelay(0)
	if err := insertImage("img-stopped"); err != nil {
		t.Fatalf("image of a stopped instance's disk: %v", err)
	}
	if ims := c.f.Images(); len(ims) != 1 || ims[0].Name != "img-stopped" || ims[0].Status != "READY" {
		t.Errorf("images = %+v", ims)
	}
}

func isCode(err error, code int) bool {
	c, _ := httpCode(err)
	return c == code
}
