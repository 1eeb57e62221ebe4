package gcefake_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

type clients struct {
	f      *gcefake.Fake
	inst   *compute.InstancesClient
	ops    *compute.ZoneOperationsClient
	images *compute.ImagesClient
}

// newClients starts a fake and the real REST clients on it.
func newClients(t *testing.T, o gcefake.Options) clients {
	t.Helper()
	f := gcefake.New(o)
	t.Cleanup(f.Close)
	ctx := context.Background()
	opts := []option.ClientOption{option.WithEndpoint(f.URL()), option.WithoutAuthentication()}
	inst, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := compute.NewZoneOperationsRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	images, err := compute.NewImagesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(); ops.Close(); images.Close() })
	return clients{f, inst, ops, images}
}

func body(name, zone, machineType string, labels map[string]string) *computepb.Instance {
	return &computepb.Instance{
		Name: proto.String(name), MachineType: proto.String("zones/" + zone + "/machineTypes/" + machineType), Labels: labels,
		Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64")}}},
	}
}

func (c clients) insert(t *testing.T, name, zone string, labels map[string]string) *compute.Operation {
	t.Helper()
	op, err := c.inst.Insert(context.Background(), &computepb.InsertInstanceRequest{Project: c.f.Project(), Zone: zone, InstanceResource: body(name, zone, "e2-standard-2", labels)})
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func httpCode(err error) (int, string) {
	var e *googleapi.Error
	if !errors.As(err, &e) {
		return 0, ""
	}
	reason := ""
	if len(e.Errors) > 0 {
		reason = e.Errors[0].Reason
	}
	return e.Code, reason
}

func TestAggregatedListFilterAndPages(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	ctx := context.Background()
	mine := map[string]string{"prebake-dev_cluster": "a"}
	c.insert(t, "a1", "europe-west4-a", mine)
	c.insert(t, "a2", "europe-west4-a", mine)
	c.insert(t, "a3", "us-central1-f", mine)
	c.insert(t, "b1", "us-central1-f", map[string]string{"prebake-dev_cluster": "b"})
	c.insert(t, "n1", "europe-west4-b", nil)

	// Pages of 2 through the library's iterator: every match once, keyed
	// by zones/<zone>; zones without matches carry a warning.
	it := c.inst.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: c.f.Project(),
		Filter: proto.String(`labels.prebake-dev_cluster = "a"`), MaxResults: proto.Uint32(2)})
	var got []string
	warned := map[string]bool{}
	for {
		pair, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range pair.Value.GetInstances() {
			got = append(got, pair.Key+"/"+in.GetName()+"/"+in.GetStatus())
		}
		if pair.Value.GetWarning().GetCode() == "NO_RESULTS_ON_PAGE" {
			warned[pair.Key] = true
		}
	}
	want := []string{"zones/europe-west4-a/a1/RUNNING", "zones/europe-west4-a/a2/RUNNING", "zones/us-central1-f/a3/RUNNING"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("aggregated (-want +got):\n%s", d)
	}
	if !warned["zones/europe-west4-b"] {
		t.Errorf("no NO_RESULTS_ON_PAGE warning for an empty zone: %v", warned)
	}
	if n := c.f.Calls(http.MethodGet, "/aggregated/instances"); n != 2 {
		t.Errorf("%d pages, want 2 for 3 instances at 2 a page", n)
	}
	// != and a bad filter.
	var names []string
	for in, err := range c.inst.List(ctx, &computepb.ListInstancesRequest{Project: c.f.Project(), Zone: "us-central1-f",
		Filter: proto.String(`(labels.prebake-dev_cluster != "a") AND (name = "b1")`)}).All() {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, in.GetName())
	}
	if d := cmp.Diff([]string{"b1"}, names); d != "" {
		t.Errorf("list (-want +got):\n%s", d)
	}
	_, err := c.inst.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: c.f.Project(), Filter: proto.String(`labels.a = "x" OR labels.b = "y"`)}).Next()
	if code, _ := httpCode(err); code != http.StatusBadRequest {
		t.Errorf("OR filter: %v, want 400", err)
	}
}

func TestInsertValidates(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	ctx := context.Background()
	c.insert(t, "dup", "europe-west4-a", nil)
	for _, tc := range []struct {
		name string
		in   *computepb.Instance
		zone string
		code int
		why  string
	}{
		{"duplicate", body("dup", "europe-west4-a", "e2-standard-2", nil), "europe-west4-a", 409, "alreadyExists"},
		{"label key with a slash", body("x1", "europe-west4-a", "e2-standard-2", map[string]string{"prebake.dev/cluster": "a"}), "europe-west4-a", 400, "invalid"},
		{"upper-case label value", body("x2", "europe-west4-a", "e2-standard-2", map[string]string{"a": "B"}), "europe-west4-a", 400, "invalid"},
		{"type not sold in zone", body("x3", "europe-west4-b", "t2a-standard-4", nil), "europe-west4-b", 400, "invalid"},
		{"bad name", body("X_1", "europe-west4-a", "e2-standard-2", nil), "europe-west4-a", 400, "invalid"},
		{"unknown zone", body("x4", "mars-north1-a", "e2-standard-2", nil), "mars-north1-a", 404, "notFound"},
	} {
		_, err := c.inst.Insert(ctx, &computepb.InsertInstanceRequest{Project: c.f.Project(), Zone: tc.zone, InstanceResource: tc.in})
		if code, why := httpCode(err); code != tc.code || why != tc.why {
			t.Errorf("%s: %v, want %d %s", tc.name, err, tc.code, tc.why)
		}
	}
}

func withMetadata(in *computepb.Instance, kv ...string) *computepb.Instance {
	in.Metadata = &computepb.Metadata{}
	for i := 0; i < len(kv); i += 2 {
		in.Metadata.Items = append(in.Metadata.Items, &computepb.Items{Key: proto.String(kv[i]), Value: proto.String(kv[i+1])})
	}
	return in
}

// The metadata limits of the API's Metadata reference: keys of
// [a-zA-Z0-9-_], less than 128 bytes, unique; values up to 256 KiB; all
// keys and values less than 512 KB. Each limit is probed at its edge.
func TestInsertChecksMetadataLimits(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	ctx := context.Background()
	const zone = "europe-west4-a"
	kib := func(n int) string { return strings.Repeat("x", n<<10) }
	for i, tc := range []struct {
		name string
		kv   []string
		ok   bool
	}{
		{"key of 127 bytes", []string{strings.Repeat("k", 127), "v"}, true},
		{"key of 128 bytes", []string{strings.Repeat("k", 128), "v"}, false},
		{"key with a dot", []string{"user.data", "v"}, false},
		{"empty key", []string{"", "v"}, false},
		{"duplicate key", []string{"a", "1", "a", "2"}, false},
		{"value of 256 KiB", []string{"user-data", kib(256)}, true},
		{"value of 256 KiB and a byte", []string{"user-data", kib(256) + "x"}, false},
		{"total just under 512 KiB", []string{"a", kib(256), "b", kib(256)[3:]}, true},
		{"total of 512 KiB", []string{"a", kib(256), "b", kib(256)[2:]}, false},
	} {
		name := fmt.Sprintf("m%d", i)
		_, err := c.inst.Insert(ctx, &computepb.InsertInstanceRequest{Project: c.f.Project(), Zone: zone,
			InstanceResource: withMetadata(body(name, zone, "e2-standard-2", nil), tc.kv...)})
		code, why := httpCode(err)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case !tc.ok && (code != http.StatusBadRequest || why != "invalid" || !strings.Contains(err.Error(), "resource.metadata")):
			t.Errorf("%s: %v, want 400 invalid naming resource.metadata", tc.name, err)
		}
	}
}

// maxResults is 0 to 500: more is a 400, as in the API, not a short page.
func TestMaxResultsOver500IsRefused(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	ctx := context.Background()
	c.insert(t, "a1", "europe-west4-a", nil)
	for _, tc := range []struct {
		max  uint32
		code int
	}{{0, 0}, {1, 0}, {500, 0}, {501, http.StatusBadRequest}, {1000, http.StatusBadRequest}} {
		_, err := c.inst.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: c.f.Project(), MaxResults: proto.Uint32(tc.max)}).Next()
		_, lerr := c.inst.List(ctx, &computepb.ListInstancesRequest{Project: c.f.Project(), Zone: "europe-west4-a", MaxResults: proto.Uint32(tc.max)}).Next()
		for _, e := range []error{err, lerr} {
			if code, why := httpCode(e); code != tc.code || (tc.code != 0 && (why != "invalid" || !strings.Contains(e.Error(), "maxResults"))) {
				t.Errorf("maxResults %d: %v, want HTTP %d (0: accepted)", tc.max, e, tc.code)
			}
		}
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	ctx := context.Background()
	c.f.Fail(http.MethodPost, "zones/europe-west4-a/instances", 1, gcefake.ErrZoneResourcePoolExhausted)
	op := c.insert(t, "s1", "europe-west4-a", nil)
	pb := op.Proto()
	if pb.GetStatus() != computepb.Operation_DONE || len(pb.GetError().GetErrors()) != 1 ||
		pb.GetError().GetErrors()[0].GetCode() != "ZONE_RESOURCE_POOL_EXHAUSTED" || pb.GetHttpErrorStatusCode() != 503 {
		t.Fatalf("operation = %v, want DONE with ZONE_RESOURCE_POOL_EXHAUSTED and 503", pb)
	}
	if _, err := c.inst.Get(ctx, &computepb.GetInstanceRequest{Project: c.f.Project(), Zone: "europe-west4-a", Instance: "s1"}); err == nil {
		t.Fatal("a stocked-out insert left an instance")
	}
	for _, ft := range []gcefake.Fault{gcefake.ErrRateLimited429, gcefake.ErrRateLimited403} {
		c.f.Fail(http.MethodPost, "zones/europe-west4-a/instances", 1, ft)
		_, err := c.inst.Insert(ctx, &computepb.InsertInstanceRequest{Project: c.f.Project(), Zone: "europe-west4-a", InstanceResource: body("r1", "europe-west4-a", "e2-standard-2", nil)})
		if code, why := httpCode(err); code != ft.HTTPStatus || why != "rateLimitExceeded" {
			t.Errorf("rate limit: %v, want %d rateLimitExceeded", err, ft.HTTPStatus)
		}
	}
	// The fault is used up: the retry succeeds.
	c.insert(t, "r1", "europe-west4-a", nil)
}

// While its insert operation runs, an instance is listed and got as
// PROVISIONING, as the real API shows it; then it goes PROVISIONING →
// STAGING → RUNNING on the Provisioning and Staging times. A failed insert
// removes it when its operation ends.
func TestProvisioningWhileTheInsertRuns(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c := newClients(t, gcefake.Options{Now: clk.Now, OperationDelay: time.Minute, Provisioning: 10 * time.Second, Staging: 10 * time.Second})
	ctx := context.Background()
	const zone = "europe-west4-a"
	c.f.Fail(http.MethodPost, "zones/"+zone+"/instances", 1, gcefake.ErrZoneResourcePoolExhausted)
	failed := c.insert(t, "stockout", zone, nil)
	ok := c.insert(t, "fine", zone, nil)
	if failed.Done() || ok.Done() {
		t.Fatal("a slow insert operation is DONE at once")
	}
	statuses := func() []string {
		t.Helper()
		var out []string
		it := c.inst.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: c.f.Project()})
		for {
			pair, err := it.Next()
			if errors.Is(err, iterator.Done) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range pair.Value.GetInstances() {
				got, err := c.inst.Get(ctx, &computepb.GetInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: in.GetName()})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, in.GetName()+"/"+in.GetStatus()+"/"+got.GetStatus())
			}
		}
		return out
	}
	var got [][]string
	got = append(got, statuses())
	_, err := c.inst.Stop(ctx, &computepb.StopInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "fine"})
	if code, why := httpCode(err); code != http.StatusBadRequest || why != "resourceNotReady" {
		t.Errorf("stop while the insert runs: %v, want 400 resourceNotReady", err)
	}
	for _, step := range []time.Duration{time.Minute, 10 * time.Second, 10 * time.Second} {
		clk.Advance(step)
		got = append(got, statuses())
	}
	want := [][]string{
		{"fine/PROVISIONING/PROVISIONING", "stockout/PROVISIONING/PROVISIONING"},
		{"fine/PROVISIONING/PROVISIONING"}, // operation DONE: the stockout is gone
		{"fine/STAGING/STAGING"},
		{"fine/RUNNING/RUNNING"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	if _, err := c.inst.Get(ctx, &computepb.GetInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "stockout"}); !isCode(err, http.StatusNotFound) {
		t.Errorf("get of the stocked-out instance: %v, want 404", err)
	}
}

func TestWaitBlocksUntilDone(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{OperationDelay: 100 * time.Millisecond})
	op := c.insert(t, "w1", "europe-west4-a", nil)
	if op.Done() {
		t.Fatal("a slow operation is DONE at once")
	}
	res, err := c.ops.Wait(context.Background(), &computepb.WaitZoneOperationRequest{Project: c.f.Project(), Zone: "europe-west4-a", Operation: op.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetStatus() != computepb.Operation_DONE || len(c.f.Instances()) != 1 {
		t.Fatalf("after wait: %v, %d instances", res.GetStatus(), len(c.f.Instances()))
	}
}

func TestImages(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c := newClients(t, gcefake.Options{Now: clk.Now})
	ctx := context.Background()
	p := c.f.Project()
	c.insert(t, "builder", "europe-west4-a", nil)
	mk := func(name string, force bool) error {
		clk.Advance(time.Hour)
		_, err := c.images.Insert(ctx, &computepb.InsertImageRequest{Project: p, ForceCreate: proto.Bool(force),
			ImageResource: &computepb.Image{Name: proto.String(name), Family: proto.String("fam"),
				SourceDisk: proto.String("zones/europe-west4-a/disks/builder"), Labels: map[string]string{"k": name}}})
		return err
	}
	if code, why := httpCode(mk("i0", false)); code != 400 || why != "resourceInUseByAnotherResource" {
		t.Errorf("image of an attached disk without forceCreate: %d %s", code, why)
	}
	for _, n := range []string{"i1", "i2", "i3"} {
		if err := mk(n, true); err != nil {
			t.Fatal(err)
		}
	}
	latest := func() string {
		im, err := c.images.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: p, Family: "fam"})
		if err != nil {
			return err.Error()
		}
		return im.GetName()
	}
	deprecate := func(name, state string) {
		if _, err := c.images.Deprecate(ctx, &computepb.DeprecateImageRequest{Project: p, Image: name,
			DeprecationStatusResource: &computepb.DeprecationStatus{State: proto.String(state)}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	got = append(got, latest())
	deprecate("i3", "DEPRECATED")
	got = append(got, latest())
	deprecate("i2", "OBSOLETE")
	got = append(got, latest())
	deprecate("i3", "ACTIVE")
	got = append(got, latest())
	if d := cmp.Diff([]string{"i3", "i2", "i1", "i3"}, got); d != "" {
		t.Errorf("family head through deprecations (-want +got):\n%s", d)
	}
	// An OBSOLETE image refuses new instances.
	in := body("from-obsolete", "europe-west4-a", "e2-standard-2", nil)
	in.Disks[0].InitializeParams.SourceImage = proto.String("projects/" + p + "/global/images/i2")
	if _, err := c.inst.Insert(ctx, &computepb.InsertInstanceRequest{Project: p, Zone: "europe-west4-a", InstanceResource: in}); err == nil {
		t.Error("insert from an OBSOLETE image succeeded")
	}

	// setLabels needs the current fingerprint.
	im, err := c.images.Get(ctx, &computepb.GetImageRequest{Project: p, Image: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	set := func(fp string) error {
		_, err := c.images.SetLabels(ctx, &computepb.SetLabelsImageRequest{Project: p, Resource: "i1",
			GlobalSetLabelsRequestResource: &computepb.GlobalSetLabelsRequest{LabelFingerprint: proto.String(fp), Labels: map[string]string{"k": "new"}}})
		return err
	}
	if err := set(im.GetLabelFingerprint()); err != nil {
		t.Fatal(err)
	}
	if code, _ := httpCode(set(im.GetLabelFingerprint())); code != http.StatusPreconditionFailed {
		t.Errorf("setLabels with a stale fingerprint: %d, want 412", code)
	}
	var listed []string
	for x, err := range c.images.List(ctx, &computepb.ListImagesRequest{Project: p, Filter: proto.String(`labels.k = "new"`)}).All() {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, x.GetName())
	}
	if d := cmp.Diff([]string{"i1"}, listed); d != "" {
		t.Errorf("images labelled k=new (-want +got):\n%s", d)
	}
	// delete, then 404.
	if _, err := c.images.Delete(ctx, &computepb.DeleteImageRequest{Project: p, Image: "i1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.images.Delete(ctx, &computepb.DeleteImageRequest{Project: p, Image: "i1"}); func() int { c, _ := httpCode(err); return c }() != 404 {
		t.Errorf("second delete: %v, want 404", err)
	}
	var names []string
	for _, im := range c.f.Images() {
		names = append(names, im.Name)
	}
	if !slices.Equal(names, []string{"i2", "i3"}) {
		t.Errorf("images left = %v", names)
	}
}

func TestMachineTypes(t *testing.T) {
	t.Parallel()
	f := gcefake.New(gcefake.Options{})
	t.Cleanup(f.Close)
	mt, err := compute.NewMachineTypesRESTClient(context.Background(), option.WithEndpoint(f.URL()), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mt.Close() })
	var names []string
	for m, err := range mt.List(context.Background(), &computepb.ListMachineTypesRequest{Project: f.Project(), Zone: "europe-west4-b"}).All() {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m.GetName())
	}
	// t2a, g2 and a2 are not sold in europe-west4-b.
	if d := cmp.Diff([]string{"e2-standard-2", "e2-standard-4", "n2-standard-8", "c4a-standard-4"}, names); d != "" {
		t.Errorf("machine types in europe-west4-b (-want +got):\n%s", d)
	}
	g2, err := mt.Get(context.Background(), &computepb.GetMachineTypeRequest{Project: f.Project(), Zone: "europe-west4-a", MachineType: "g2-standard-8"})
	if err != nil {
		t.Fatal(err)
	}
	if g2.GetGuestCpus() != 8 || g2.GetMemoryMb() != 32768 || len(g2.GetAccelerators()) != 1 ||
		g2.GetAccelerators()[0].GetGuestAcceleratorType() != "nvidia-l4" || g2.GetAccelerators()[0].GetGuestAcceleratorCount() != 1 {
		t.Errorf("g2-standard-8 = %v", g2)
	}
}
