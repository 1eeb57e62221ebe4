package hcloud

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"golang.org/x/time/rate"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/providerid"
)

func request(name, group string) providers.CreateRequest {
	return providers.CreateRequest{
		Name: name, Cluster: "c", Group: group, MachineType: "cx22", Location: "nbg1",
		ImageKind: providers.ImageRuntimeInstall, UserData: []byte("#cloud-config\njoin: secret\n"),
	}
}

func TestCreateSendsEverything(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	p, err := New(Options{
		Token: testToken, Endpoint: f.URL(), Cluster: "c", Image: "debian-12", PollInterval: time.Millisecond,
		Networks: []int64{1}, Firewalls: []int64{2, 3}, SSHKeys: []int64{4}, PlacementGroup: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	in, err := p.Create(context.Background(), request("pool-a-1", "pool-a"))
	if err != nil {
		t.Fatal(err)
	}
	servers := f.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers", len(servers))
	}
	s := servers[0]
	want := hcloudfake.Server{
		ID: s.ID, Name: "pool-a-1", Status: "running", ServerType: "cx22", Image: "debian-12", Location: "nbg1",
		Labels: map[string]string{
			providers.LabelCluster: "c", providers.LabelGroup: "pool-a",
			providers.LabelMachine: "pool-a-1", providers.LabelImageKind: "runtime-install",
		},
		UserData: "#cloud-config\njoin: secret\n",
		Networks: []int64{1}, Firewalls: []int64{2, 3}, SSHKeys: []int64{4}, PlacementGroup: 5,
	}
	want.IPv4, want.PrivateIPs = s.IPv4, s.PrivateIPs // the fake's, from TEST-NET-1 and 10.0.0.0/8
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("server (-want +got):\n%s", diff)
	}
	wantIn := providers.Instance{
		ProviderID: providerid.Format(s.ID), Name: "pool-a-1", Group: "pool-a", State: providers.StateRunning,
		ImageKind: providers.ImageRuntimeInstall, CreatedAt: in.CreatedAt,
	}
	if diff := cmp.Diff(wantIn, in); diff != "" || in.CreatedAt.IsZero() {
		t.Errorf("instance (-want +got):\n%s", diff)
	}
}

func TestCreateRaceMakesOneServer(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	p := newTestProvider(t, f, -1)
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in, err := p.Create(context.Background(), request("same", "g"))
			ids[i], errs[i] = in.ProviderID, err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("create %d: %q, %v; want %q", i, ids[i], errs[i], ids[0])
		}
	}
	if got := len(f.Servers()); got != 1 {
		t.Fatalf("%d servers for one name", got)
	}
}

func TestCreateRefusesForeignName(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	other, err := New(Options{Token: testToken, Endpoint: f.URL(), PollInterval: time.Millisecond, Cluster: "other"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.Create(context.Background(), request("taken", "g"))
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, f, -1)
	if _, err := p.Create(context.Background(), request("taken", "g")); err == nil {
		t.Fatal("Create adopted another cluster's server")
	}
	if err := p.Delete(context.Background(), theirs.ProviderID); err == nil {
		t.Fatal("Delete removed another cluster's server")
	}
	if ins, err := p.List(context.Background()); err != nil || len(ins) != 0 {
		t.Fatalf("List shows %v, %v; want nothing of another cluster", ins, err)
	}
}

func TestListIsOnePagedScan(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	p := newTestProvider(t, f, -1)
	ctx := context.Background()
	for i := range 120 {
		if _, err := p.Create(ctx, request(fmt.Sprint("m-", i), fmt.Sprint("g", i%20))); err != nil {
			t.Fatal(err)
		}
	}
	before := f.Calls("GET", "/servers")
	ins, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 120 {
		t.Fatalf("listed %d, want 120", len(ins))
	}
	if got := f.Calls("GET", "/servers") - before; got != 3 {
		t.Fatalf("List made %d requests for 120 servers in 20 groups, want 3 pages of 50", got)
	}
}

func TestListStates(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	// The create action ends at once (Create waits for it); the delete
	// action takes a second.
	f := newFake(t, hcloudfake.Options{Now: clock, Initializing: time.Second, Starting: time.Second})
	p := newTestProvider(t, f, -1)
	ctx := context.Background()
	in, err := p.Create(ctx, request("m", "g"))
	if err != nil {
		t.Fatal(err)
	}
	f.SetActionDelay(time.Second)
	check := func(want providers.InstanceState) {
		t.Helper()
		ins, err := p.List(ctx)
		if err != nil || len(ins) != 1 || ins[0].State != want {
			t.Fatalf("List = %+v, %v; want one instance in state %v", ins, err, want)
		}
	}
	check(providers.StateCreating) // initializing
	advance(time.Second)
	check(providers.StateCreating) // starting
	advance(time.Second)
	check(providers.StateRunning)
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	check(providers.StateDeleting)
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatalf("second Delete while deleting: %v", err)
	}
	advance(time.Second)
	if ins, err := p.List(ctx); err != nil || len(ins) != 0 {
		t.Fatalf("after the delete action: %+v, %v", ins, err)
	}
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatalf("Delete of a gone server: %v", err)
	}
	if err := p.Delete(ctx, "kwok://x"); err == nil {
		t.Fatal("Delete accepted a kwok providerID")
	}
}

func TestRetriesRateLimitAndServerErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	p := newTestProvider(t, f, 3)
	// hcloud-go retries 429 and 502 itself, with our jittered backoff.
	f.Fail(http.MethodPost, "/servers", 1, hcloudfake.ErrRateLimited)
	f.Fail(http.MethodPost, "/servers", 1, hcloudfake.APIError{Status: 502, Code: "bad_gateway", Message: "retry"})
	if _, err := p.Create(context.Background(), request("m", "g")); err != nil {
		t.Fatalf("Create through a 429 and a 502: %v", err)
	}
	if got := f.Calls("POST", "/servers"); got != 3 {
		t.Fatalf("%d create requests, want 3", got)
	}
	// Not retried by the client: resource_unavailable reaches the core.
	f.Fail(http.MethodPost, "/servers", 1, hcloudfake.ErrResourceUnavailable)
	_, err := p.Create(context.Background(), request("m2", "g"))
	if c := p.Classify(err); c.Class != providers.ErrorOutOfResources || c.Code != "resource_unavailable" || c.Retryable {
		t.Fatalf("Classify(%v) = %+v", err, c)
	}
}

// A create_server action that ends in error fails Create with a stable
// code. The server it left behind is deleted and never listed, so the core
// keeps the failed creation and its error for CA; if that delete fails, the
// next List tries it again.
func TestCreateActionFails(t *testing.T) {
	t.Parallel()
	for _, cleanupFails := range []bool{false, true} {
		t.Run(fmt.Sprint("cleanupFails=", cleanupFails), func(t *testing.T) {
			t.Parallel()
			clk := hcloudfake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			f := newFake(t, hcloudfake.Options{Now: clk.Now})
			p := newTestProvider(t, f, -1)
			ctx := context.Background()
			f.FailAction("create_server", 1, hcloudfake.ErrActionUnknown)
			f.SetActionDelay(time.Minute) // the cleanup's delete runs while we look
			if cleanupFails {
				f.Fail(http.MethodDelete, "/servers", 1, hcloudfake.ErrServerError)
			}
			done := make(chan error, 1)
			go func() { _, err := p.Create(ctx, request("m", "g")); done <- err }()
			// Create waits for its create_server action: poll until it
			// does, then end the action on the fake's clock.
			for f.Calls(http.MethodGet, "/actions") == 0 {
				select {
				case err := <-done:
					t.Fatalf("Create returned (%v) without waiting for its create_server action", err)
				case <-time.After(time.Millisecond):
				}
			}
			clk.Advance(time.Minute)
			err := <-done
			if err == nil || !strings.Contains(err.Error(), "create_server action failed") || !strings.Contains(err.Error(), "unknown_error") {
				t.Fatalf("Create = %v, want the create_server action's failure", err)
			}
			if c := p.Classify(err); c != (providers.Classification{Class: providers.ErrorOther, Code: "create_server_failed"}) {
				t.Fatalf("Classify = %+v, want Other create_server_failed, not retryable", c)
			}
			if cleanupFails != strings.Contains(err.Error(), "tried again") {
				t.Errorf("Create = %v; it must say whether the server left behind is still there", err)
			}
			status := func() string {
				if ss := f.Servers(); len(ss) == 1 {
					return ss[0].Status
				}
				return "gone"
			}
			var got []string
			for range 3 {
				got = append(got, status())
				if l, err := p.List(ctx); err != nil || len(l) != 0 {
					t.Fatalf("List = %+v, %v; the server of a failed create must not be listed", l, err)
				}
				clk.Advance(time.Minute)
			}
			want := []string{"deleting", "gone", "gone"}
			if cleanupFails {
				want = []string{"off", "gone", "gone"} // the first List deletes it again
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("the server left behind, before each List (-want +got):\n%s", d)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	p := &Provider{}
	apiErr := func(code string) error {
		return fmt.Errorf("wrapped: %w", hcloud.Error{Code: hcloud.ErrorCode(code), Message: "m"})
	}
	tests := []struct {
		name string
		err  error
		want providers.Classification
	}{
		{"nil", nil, providers.Classification{}},
		{"capacity", apiErr("resource_unavailable"), providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_unavailable"}},
		{"limit", apiErr("resource_limit_exceeded"), providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_limit_exceeded"}},
		{"placement", apiErr("placement_error"), providers.Classification{Class: providers.ErrorOutOfResources, Code: "placement_error"}},
		{"429", apiErr("rate_limit_exceeded"), providers.Classification{Class: providers.ErrorOther, Code: "rate_limit_exceeded", Retryable: true}},
		{"500", apiErr("server_error"), providers.Classification{Class: providers.ErrorOther, Code: "server_error", Retryable: true}},
		{"503", apiErr("unavailable"), providers.Classification{Class: providers.ErrorOther, Code: "unavailable", Retryable: true}},
		{"invalid", apiErr("invalid_input"), providers.Classification{Class: providers.ErrorOther, Code: "invalid_input"}},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}},
		{"bare 502", &statusError{status: 502, err: hcloud.ErrStatusCode}, providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}},
		{"bare 404", &statusError{status: 404, err: hcloud.ErrStatusCode}, providers.Classification{Class: providers.ErrorOther, Code: "http_error"}},
		{"other", errors.New("boom"), providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}},
		{"create action", fmt.Errorf("x: %w", &createActionError{action: hcloud.ActionError{Code: "unknown_error", Message: "Unknown Error"}}),
			providers.Classification{Class: providers.ErrorOther, Code: "create_server_failed"}},
		{"create action out of capacity", &createActionError{action: hcloud.ActionError{Code: "resource_unavailable", Message: "error during placement"}},
			providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_unavailable"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := p.Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %+v, want %+v", tc.err, got, tc.want)
			}
		})
	}
}

func TestPace(t *testing.T) {
	t.Parallel()
	const base = rate.Limit(5)
	tests := []struct {
		name                     string
		status, limit, remaining int
		untilReset               time.Duration
		wantRate                 rate.Limit
		wantBurst                int
	}{
		{"no headers", 200, 0, 0, 0, base, 20},
		{"plenty left", 200, 3600, 3000, time.Hour, base, 20},
		{"at a tenth", 200, 3600, 360, 3240 * time.Second, base, 20},
		{"below a tenth: spread the rest", 200, 3600, 300, 3300 * time.Second, rate.Limit(300.0 / 3300), 1},
		{"empty: one call by the reset", 200, 3600, 0, 100 * time.Second, rate.Limit(1.0 / 100), 1},
		{"never faster than base", 200, 100, 9, time.Second, base, 1},
		{"429 waits for the reset", 429, 3600, 0, 10 * time.Second, rate.Limit(0.1), 1},
		{"429 past reset", 429, 3600, 0, -time.Second, rate.Limit(1), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, b := pace(base, 20, tc.status, tc.limit, tc.remaining, tc.untilReset)
			if r != tc.wantRate || b != tc.wantBurst {
				t.Errorf("pace = %v, %d; want %v, %d", r, b, tc.wantRate, tc.wantBurst)
			}
		})
	}
}

func TestPacerFollowsHeaders(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{RateLimit: 20})
	p := newTestProvider(t, f, -1)
	ctx := context.Background()
	// 19 calls leave 1 of 20: below a tenth, so the pacer slows down.
	for range 19 {
		if _, _, err := p.client.Server.GetByID(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	pc := p.pacer
	pc.mu.Lock()
	l, b := pc.lim.Limit(), pc.lim.Burst()
	pc.mu.Unlock()
	if b != 1 || l >= 1 {
		t.Fatalf("pacer at %v/s burst %d after the budget ran low; want under 1/s, burst 1", l, b)
	}
}

func TestMachineType(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	p := newTestProvider(t, f, -1)
	ctx := context.Background()
	mt, err := p.MachineType(ctx, "cax11", "hel1")
	if err != nil {
		t.Fatal(err)
	}
	want := providers.MachineType{Name: "cax11", MilliCPU: 2000, MemoryBytes: 4 << 30, EphemeralStorageBytes: 40 << 30,
		Pods: 110, Arch: "arm64", PricePerHour: 0.006}
	if diff := cmp.Diff(want, mt); diff != "" {
		t.Errorf("cax11 (-want +got):\n%s", diff)
	}
	if _, err := p.MachineType(ctx, "cax11", "ash"); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("cax11 in ash: %v, want ErrNotFound", err)
	}
	// Hetzner prices a type per location: each group gets its location's
	// net price (the fake's cpx31 costs 0.0242 in Europe, 0.0277 in ash).
	for loc, want := range map[string]float64{"fsn1": 0.0242, "hel1": 0.0242, "ash": 0.0277} {
		mt, err := p.MachineType(ctx, "cpx31", loc)
		if err != nil {
			t.Fatal(err)
		}
		if mt.PricePerHour != want {
			t.Errorf("cpx31 in %s: %v an hour, want %v (that location's net price)", loc, mt.PricePerHour, want)
		}
	}
	for range 5 {
		if _, err := p.MachineType(ctx, "cx22", "fsn1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Calls("GET", "/server_types"); got != 1 {
		t.Errorf("%d server type requests, want 1 (cached)", got)
	}
}

func TestNewRequiresTokenAndCluster(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Cluster: "c"}); err == nil {
		t.Error("New without a token succeeded")
	}
	if _, err := New(Options{Token: "t"}); err == nil {
		t.Error("New without a cluster succeeded")
	}
}

// TestTopologyLabels: a node carries what Hetzner's CCM and CSI driver set: the location's
// datacenter as the zone, the location as the region. The datacenter list is part of
// MachineType (templates are built from it): a failed list fails it, naming the list, and
// once loaded it is never listed again.
func TestTopologyLabels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(t, hcloudfake.Options{})
	p, err := New(Options{Token: testToken, Endpoint: f.URL(), PollInterval: time.Millisecond, Cluster: "c", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	var zone string
	for _, dc := range hcloudfake.DefaultDatacenters() {
		if dc.Location.Name == "nbg1" {
			zone = dc.Name
		}
	}
	f.Fail(http.MethodGet, "/datacenters", 1, hcloudfake.APIError{Status: 503, Code: "unavailable", Message: "try again"})
	if _, err := p.MachineType(ctx, "cx22", "nbg1"); err == nil || !strings.Contains(err.Error(), "list datacenters") {
		t.Fatalf("MachineType with the datacenter list failing = %v, want an error naming it", err)
	}
	if _, err := p.MachineType(ctx, "cx22", "nbg1"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{providers.LabelZone: zone, providers.LabelRegion: "nbg1",
		LabelCSILocation: "nbg1", LabelProvidedBy: "cloud"}
	if d := cmp.Diff(want, p.TopologyLabels("nbg1")); d != "" || zone == "" {
		t.Errorf("topology labels (-want +got):\n%s", d)
	}
	lists := f.Calls(http.MethodGet, "/datacenters")
	if _, err := p.MachineType(ctx, "cx22", "fsn1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.List(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.Calls(http.MethodGet, "/datacenters"); n != lists {
		t.Errorf("%d more datacenter lists once they are known, want none", n-lists)
	}
}
