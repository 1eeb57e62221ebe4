package gce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/googleapi"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

func request(name, group, machineType, zone string) providers.CreateRequest {
	return providers.CreateRequest{Name: name, Cluster: "c", Group: group, MachineType: machineType, Location: zone,
		ImageKind: providers.ImageRuntimeInstall, UserData: []byte("#cloud-config\nruncmd: [secret-join]\n")}
}

func TestLabelKeyMapping(t *testing.T) {
	t.Parallel()
	for _, k := range []string{providers.LabelCluster, providers.LabelGroup, providers.LabelImage, providers.LabelImageKind, providers.LabelMachine} {
		g := LabelKey(k)
		if strings.ContainsAny(g, "./") || !strings.HasPrefix(g, "prebake-dev_") {
			t.Errorf("LabelKey(%q) = %q, not a GCE label key", k, g)
		}
		if back := ProjectLabelKey(g); back != k {
			t.Errorf("ProjectLabelKey(LabelKey(%q)) = %q", k, back)
		}
	}
	if got := LabelKey("team"); got != "team" {
		t.Errorf("LabelKey(team) = %q, want unchanged", got)
	}
}

func TestCreateWritesLabelsUserDataAndImage(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	if _, err := p.Create(ctx, request("g-x86", "g", "e2-standard-2", testZone)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, request("g-arm", "g", "t2a-standard-4", testZone)); err != nil {
		t.Fatal(err)
	}
	got := f.Instances()
	if len(got) != 2 {
		t.Fatalf("instances = %+v", got)
	}
	byName := map[string]gcefake.Instance{got[0].Name: got[0], got[1].Name: got[1]}
	want := map[string]string{"prebake-dev_cluster": "c", "prebake-dev_group": "g", "prebake-dev_machine": "g-x86", "prebake-dev_image-kind": "runtime-install"}
	if d := cmp.Diff(want, byName["g-x86"].Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if ud := byName["g-x86"].Metadata["user-data"]; ud != "#cloud-config\nruncmd: [secret-join]\n" {
		t.Errorf("user-data = %q", ud)
	}
	for name, img := range map[string]string{
		"g-x86": "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20261101",
		"g-arm": "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-arm64-v20261101",
	} {
		if byName[name].SourceImage != img {
			t.Errorf("%s booted %q, want %q (the image for its arch)", name, byName[name].SourceImage, img)
		}
	}
}

func TestMachineTypeFromAPI(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, newFake(t, gcefake.Options{}))
	ctx := context.Background()
	tests := []struct {
		name, zone string
		want       providers.MachineType
	}{
		{"e2-standard-2", testZone, providers.MachineType{Name: "e2-standard-2", MilliCPU: 2000, MemoryBytes: 8 << 30, EphemeralStorageBytes: 50 << 30, Pods: 110, Arch: "amd64"}},
		{"t2a-standard-4", testZone, providers.MachineType{Name: "t2a-standard-4", MilliCPU: 4000, MemoryBytes: 16 << 30, EphemeralStorageBytes: 50 << 30, Pods: 110, Arch: "arm64"}},
		{"g2-standard-8", testZone, providers.MachineType{Name: "g2-standard-8", MilliCPU: 8000, MemoryBytes: 32 << 30, EphemeralStorageBytes: 50 << 30, Pods: 110, Arch: "amd64", GPUs: 1, GPUType: "nvidia-l4"}},
	}
	for _, tc := range tests {
		got, err := p.MachineType(ctx, tc.name, tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	// Not sold in that zone: not found, naming type and zone.
	if _, err := p.MachineType(ctx, "t2a-standard-4", "europe-west4-b"); !errors.Is(err, providers.ErrNotFound) || !strings.Contains(err.Error(), "europe-west4-b") {
		t.Errorf("t2a in europe-west4-b: %v, want ErrNotFound naming the zone", err)
	}
}

func TestArchAndRegion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ arch, name, want string }{
		{"ARM64", "x", "arm64"}, {"X86_64", "t2a-standard-1", "amd64"}, {"", "t2a-standard-1", "arm64"},
		{"", "c4a-highmem-8", "arm64"}, {"", "n2-standard-4", "amd64"}, {"", "e2-micro", "amd64"},
	} {
		if got := Arch(tc.arch, tc.name); got != tc.want {
			t.Errorf("Arch(%q, %q) = %q, want %q", tc.arch, tc.name, got, tc.want)
		}
	}
	if got := Region("europe-west4-a"); got != "europe-west4" {
		t.Errorf("Region = %q", got)
	}
}

// A machine boots the catalog image the core resolved its channel to (on
// GCE an image's id is its name) and records it; without one it boots the
// default image on the runtime-install path.
func TestCreateBootsTheResolvedImage(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := newFake(t, gcefake.Options{Now: clk.Now})
	p := newTestProvider(t, f)
	ctx := context.Background()
	req := func(name, image string) providers.CreateRequest {
		r := request(name, "g", "e2-standard-2", testZone)
		r.ImageChannel, r.Image, r.ImageKind = "stable", image, providers.ImageRuntimeInstall
		if image != "" {
			r.ImageKind = providers.ImagePrebaked
		}
		return r
	}
	bakeImage(t, f, p, "img-1", clk)
	bakeImage(t, f, p, "img-2", clk)
	for _, r := range []providers.CreateRequest{req("g-none", ""), req("g-1", "img-2"), req("g-2", "img-1")} {
		if _, err := p.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, l := range listed {
		images[l.Name] = l.Image + "/" + string(l.ImageKind)
	}
	if d := cmp.Diff(map[string]string{"g-none": "/runtime-install", "g-1": "img-2/prebaked", "g-2": "img-1/prebaked"}, images); d != "" {
		t.Errorf("images by instance (-want +got):\n%s", d)
	}
	for _, in := range f.Instances() {
		want := "projects/" + f.Project() + "/global/images/" + strings.TrimSuffix(images[in.Name], "/prebaked")
		if in.Name == "g-none" {
			want = "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20261101"
		}
		if in.SourceImage != want {
			t.Errorf("%s booted %s, want %s", in.Name, in.SourceImage, want)
		}
	}
	// An image that is gone fails the create with GCE's own error, which
	// names it: the core resolves only what the catalog lists.
	if _, err := p.Create(ctx, req("g-3", "img-gone")); err == nil || !strings.Contains(err.Error(), "img-gone") {
		t.Errorf("create from a missing image = %v, want an error naming it", err)
	}
}

// bakeImage publishes an image from a builder's disk, an hour after the
// last.
func bakeImage(t *testing.T, f *gcefake.Fake, p *Provider, name string, clk *gcefake.Clock) {
	t.Helper()
	clk.Advance(time.Hour)
	ctx := context.Background()
	if _, err := p.Create(ctx, request("builder", "builder", "e2-standard-2", testZone)); err != nil {
		t.Fatal(err)
	}
	if err := insertImage(ctx, p, name, "zones/"+testZone+"/disks/builder", "prebake-stable-amd64"); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "gce://"+f.Project()+"/"+testZone+"/builder"); err != nil {
		t.Fatal(err)
	}
}

func TestCreateRefusesAForeignInstanceAndDeleteToo(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	other, err := New(context.Background(), Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "other", Rate: 1000, Burst: 1000,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ctx := context.Background()
	in, err := other.Create(ctx, request("g-1", "g", "e2-standard-2", testZone))
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, f)
	_, err = p.Create(ctx, request("g-1", "g", "e2-standard-2", testZone))
	if err == nil || !strings.Contains(err.Error(), "not owned by this cluster") || p.Classify(err).Code != "foreign_instance" {
		t.Fatalf("create over another cluster's instance: %v", err)
	}
	if err := p.Delete(ctx, in.ProviderID); err == nil || !strings.Contains(err.Error(), "not owned") {
		t.Fatalf("delete of another cluster's instance: %v", err)
	}
	if err := p.Delete(ctx, "gce://another-project/"+testZone+"/g-1"); err == nil || !strings.Contains(err.Error(), "another-project") {
		t.Fatalf("delete in another project: %v", err)
	}
	if len(f.Instances()) != 1 {
		t.Fatal("the foreign instance is gone")
	}
}

// Status follows the fake's clock: PROVISIONING and STAGING are creating,
// RUNNING is running, a deleted instance is deleting until it is gone.
func TestListFollowsTheLifecycle(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := newFake(t, gcefake.Options{Now: clk.Now, Provisioning: 10 * time.Second, Staging: 20 * time.Second, Stopping: 30 * time.Second})
	p := newTestProvider(t, f)
	ctx := context.Background()
	in, err := p.Create(ctx, request("g-1", "g", "e2-standard-2", testZone))
	if err != nil {
		t.Fatal(err)
	}
	stateAt := func() providers.InstanceState {
		t.Helper()
		l, err := p.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != 1 {
			return 0
		}
		return l[0].State
	}
	var got []string
	for _, step := range []time.Duration{0, 15 * time.Second, 20 * time.Second} {
		clk.Advance(step)
		got = append(got, fmt.Sprint(stateAt(), "/", f.Instances()[0].Status))
	}
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	got = append(got, fmt.Sprint(stateAt(), "/", f.Instances()[0].Status))
	clk.Advance(30 * time.Second)
	got = append(got, fmt.Sprint(stateAt()))
	want := []string{"creating/PROVISIONING", "creating/STAGING", "running/RUNNING", "deleting/STOPPING", "InstanceState(0)"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("states (-want +got):\n%s", d)
	}
}

// A slow insert operation: Create waits through operations.wait until the
// fake's clock ends it; meanwhile the instance is listed PROVISIONING, as
// the real API lists it, which the core sees as creating.
func TestCreateWaitsForASlowOperation(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := newFake(t, gcefake.Options{Now: clk.Now, OperationDelay: time.Minute})
	p := newTestProvider(t, f)
	done := make(chan error, 1)
	go func() {
		_, err := p.Create(context.Background(), request("g-1", "g", "e2-standard-2", testZone))
		done <- err
	}()
	waits := func() int { return f.Calls(http.MethodPost, "/wait") }
	for waits() == 0 {
		select {
		case err := <-done:
			t.Fatalf("Create returned %v before its operation ended", err)
		default:
			time.Sleep(time.Millisecond)
		}
	}
	if in := f.Instances(); len(in) != 1 || in[0].Status != "PROVISIONING" {
		t.Fatalf("instances while the insert operation runs: %+v, want one PROVISIONING", in)
	}
	if l, err := p.List(context.Background()); err != nil || len(l) != 1 || l[0].State != providers.StateCreating {
		t.Fatalf("List while the insert operation runs = %+v, %v; want one creating", l, err)
	}
	clk.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if in := f.Instances(); len(in) != 1 || in[0].Status != "RUNNING" {
		t.Fatalf("instances after the operation: %+v, want one RUNNING", in)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	p := &Provider{}
	tests := []struct {
		name string
		err  error
		want providers.Classification
	}{
		{"stockout", &OperationError{Codes: []string{"ZONE_RESOURCE_POOL_EXHAUSTED"}, HTTPStatus: 503}, providers.Classification{Class: providers.ErrorOutOfResources, Code: "ZONE_RESOURCE_POOL_EXHAUSTED"}},
		{"stockout with details", fmt.Errorf("wrapped: %w", &OperationError{Codes: []string{"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"}}), providers.Classification{Class: providers.ErrorOutOfResources, Code: "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"}},
		{"quota", &OperationError{Codes: []string{"QUOTA_EXCEEDED"}, HTTPStatus: 403}, providers.Classification{Class: providers.ErrorOutOfResources, Code: "QUOTA_EXCEEDED"}},
		{"other op error", &OperationError{Codes: []string{"RESOURCE_NOT_FOUND"}, HTTPStatus: 404}, providers.Classification{Class: providers.ErrorOther, Code: "RESOURCE_NOT_FOUND"}},
		{"internal op error", &OperationError{Codes: []string{"INTERNAL_ERROR"}, HTTPStatus: 500}, providers.Classification{Class: providers.ErrorOther, Code: "INTERNAL_ERROR", Retryable: true}},
		{"429", &googleapi.Error{Code: 429}, providers.Classification{Class: providers.ErrorOther, Code: "rateLimitExceeded", Retryable: true}},
		{"403 rate", &googleapi.Error{Code: 403, Errors: []googleapi.ErrorItem{{Reason: "rateLimitExceeded"}}}, providers.Classification{Class: providers.ErrorOther, Code: "rateLimitExceeded", Retryable: true}},
		{"403 forbidden", &googleapi.Error{Code: 403, Errors: []googleapi.ErrorItem{{Reason: "forbidden"}}}, providers.Classification{Class: providers.ErrorOther, Code: "forbidden"}},
		{"409 pending", &googleapi.Error{Code: 409, Errors: []googleapi.ErrorItem{{Reason: "alreadyExists"}}}, providers.Classification{Class: providers.ErrorOther, Code: "alreadyExists", Retryable: true}},
		{"502", &googleapi.Error{Code: 502}, providers.Classification{Class: providers.ErrorOther, Code: "api_502", Retryable: true}},
		{"timeout", context.DeadlineExceeded, providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}},
		{"unknown", errors.New("boom"), providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}},
	}
	for _, tc := range tests {
		if d := cmp.Diff(tc.want, p.Classify(tc.err)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestOperationErrorClassesMatchCA checks the operation error codes against
// the classes CA's own GCE provider gives them (GetErrorInfo in
// cluster-autoscaler/cloudprovider/gce/autoscaling_gce_client.go, tag
// cluster-autoscaler-1.36.1): stockouts, INSUFFICIENT_CAPACITY and any code
// containing QUOTA are OutOfResources; IP space, permissions and the rest
// are Other. The code reported is the API's.
func TestOperationErrorClassesMatchCA(t *testing.T) {
	t.Parallel()
	p := &Provider{}
	oor := providers.ErrorOutOfResources
	for _, tc := range []struct {
		codes []string
		class providers.ErrorClass
		code  string
	}{
		{[]string{"RESOURCE_POOL_EXHAUSTED"}, oor, "RESOURCE_POOL_EXHAUSTED"},
		{[]string{"ZONE_RESOURCE_POOL_EXHAUSTED"}, oor, "ZONE_RESOURCE_POOL_EXHAUSTED"},
		{[]string{"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"}, oor, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"},
		{[]string{"INSUFFICIENT_CAPACITY"}, oor, "INSUFFICIENT_CAPACITY"},
		{[]string{"QUOTA_EXCEEDED"}, oor, "QUOTA_EXCEEDED"},
		{[]string{"REGION_QUOTA_EXCEEDED"}, oor, "REGION_QUOTA_EXCEEDED"},
		{[]string{"QUOTA_LIMIT"}, oor, "QUOTA_LIMIT"},
		// The first code that is out of resources wins over an earlier other.
		{[]string{"CONDITION_NOT_MET", "INSUFFICIENT_CAPACITY"}, oor, "INSUFFICIENT_CAPACITY"},
		{[]string{"IP_SPACE_EXHAUSTED"}, providers.ErrorOther, "IP_SPACE_EXHAUSTED"},
		{[]string{"PERMISSIONS_ERROR"}, providers.ErrorOther, "PERMISSIONS_ERROR"},
		{[]string{"RESOURCE_NOT_FOUND"}, providers.ErrorOther, "RESOURCE_NOT_FOUND"},
		// Near misses are not out of resources.
		{[]string{"POOL_EXHAUSTED"}, providers.ErrorOther, "POOL_EXHAUSTED"},
		{[]string{"quota_exceeded"}, providers.ErrorOther, "quota_exceeded"},
	} {
		t.Run(strings.Join(tc.codes, "+"), func(t *testing.T) {
			t.Parallel()
			got := p.Classify(&OperationError{Operation: "op", Codes: tc.codes, HTTPStatus: 403})
			if got.Class != tc.class || got.Code != tc.code || got.Retryable {
				t.Fatalf("Classify(%v) = %+v, want class %d code %s, not retryable", tc.codes, got, tc.class, tc.code)
			}
		})
	}
}

// User-data is one metadata value, which GCE caps at 256 KiB: at the limit
// the fake accepts it; one byte more fails before any request, with an
// error that names user-data and the fix.
func TestUserDataAtTheMetadataLimit(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	req := request("g-1", "g", "e2-standard-2", testZone)
	req.UserData = []byte(strings.Repeat("#", 256<<10))
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatalf("Create with 256 KiB of user-data: %v", err)
	}
	f.ResetRequests()
	req = request("g-2", "g", "e2-standard-2", testZone)
	req.UserData = []byte(strings.Repeat("#", 256<<10+1))
	_, err := p.Create(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "user-data") || !strings.Contains(err.Error(), "262144") || !strings.Contains(err.Error(), "userDataFile") {
		t.Fatalf("Create with 256 KiB + 1 of user-data: %v, want an error naming user-data, the limit and the fix", err)
	}
	if c := p.Classify(err); c.Class != providers.ErrorOther || c.Code != "user_data_too_large" || c.Retryable {
		t.Fatalf("Classify = %+v", c)
	}
	if n := len(f.Requests()); n != 0 {
		t.Fatalf("%d requests for user-data the API would refuse", n)
	}
}

// Every request goes through the real compute REST client, and List is one
// aggregatedList call for every zone.
func TestListIsOneAggregatedCall(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	for i, z := range []string{"europe-west4-a", "europe-west4-b", "us-central1-a", "us-central1-f"} {
		if _, err := p.Create(ctx, request(fmt.Sprintf("g-%d", i), "g", "e2-standard-2", z)); err != nil {
			t.Fatal(err)
		}
	}
	f.ResetRequests()
	l, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 4 {
		t.Fatalf("listed %d, want 4", len(l))
	}
	reqs := f.Requests()
	if len(reqs) != 1 || !strings.HasSuffix(reqs[0].Path, "/aggregated/instances") {
		t.Fatalf("requests = %+v, want one aggregatedList", reqs)
	}
	if !strings.Contains(reqs[0].APIClient, "gapic/") {
		t.Errorf("x-goog-api-client %q does not name the client library", reqs[0].APIClient)
	}
}

func TestBadCredentialsNameTheSetting(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), Options{Project: "p", Cluster: "c", CredentialsJSON: []byte(`{"type": "service_account"`)})
	if err == nil || !strings.Contains(err.Error(), "providers.gce.credentials") {
		t.Fatalf("New with a truncated key: %v, want an error naming providers.gce.credentials", err)
	}
}

// Every client shares one token bucket: with a burst of 1 and a rate of
// one request in ~17 minutes, a second request (another client, another
// method) can't fit before its deadline and never reaches the API. (Only
// calls whose request carries ctx can be refused this way: the compute
// library's list calls send their requests without it.)
func TestOneRateLimiterForAllClients(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p, err := New(context.Background(), Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "c", Rate: 0.001, Burst: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if _, err := p.MachineType(context.Background(), "e2-standard-2", testZone); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Delete(ctx, "gce://"+f.Project()+"/"+testZone+"/g-1"); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Fatalf("Delete past the budget: %v, want the limiter's refusal", err)
	}
	if n := len(f.Requests()); n != 1 {
		t.Fatalf("%d requests reached the API, want 1", n)
	}
}

// Prices come from the configured table: the region's entry first, then the
// any-region one; a type with no entry has none.
func TestMachineTypePrices(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p, err := New(context.Background(), Options{
		Project: f.Project(), Endpoint: f.URL(), Cluster: "c", Rate: 1000, Burst: 1000, Logger: slog.New(slog.DiscardHandler),
		Prices: []Price{
			{MachineType: "e2-standard-2", Region: "europe-west4", PerHour: 0.074},
			{MachineType: "e2-standard-2", PerHour: 0.067},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	for _, tc := range []struct {
		name, zone string
		want       float64
	}{
		{"e2-standard-2", testZone, 0.074},
		{"e2-standard-2", "us-central1-a", 0.067},
		{"t2a-standard-4", testZone, 0},
	} {
		mt, err := p.MachineType(context.Background(), tc.name, tc.zone)
		if err != nil {
			t.Fatalf("%s in %s: %v", tc.name, tc.zone, err)
		}
		if mt.PricePerHour != tc.want {
			t.Errorf("%s in %s: price %v, want %v", tc.name, tc.zone, mt.PricePerHour, tc.want)
		}
	}
}
