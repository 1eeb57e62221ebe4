package autoscaling

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

// newGceCore is the core over the real gce provider over the fake API, with
// one group in europe-west4-a and one in us-central1-a.
func newGceCore(t *testing.T) (*Core, *gcefake.Fake) {
	t.Helper()
	f := gcefake.New(gcefake.Options{})
	t.Cleanup(f.Close)
	p, err := gce.New(t.Context(), gce.Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "test", Rate: 1000, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := newCore(t, p,
		GroupSpec{ID: "west", Provider: "gce", MinSize: 0, MaxSize: 5, MachineType: "e2-standard-2", Zone: "europe-west4-a", Region: "europe-west4"},
		GroupSpec{ID: "central", Provider: "gce", MinSize: 0, MaxSize: 5, MachineType: "e2-standard-2", Zone: "us-central1-a", Region: "us-central1"},
	)
	return c, f
}

// A stockout in one zone is reported to CA as OutOfResources on the
// instance, without waiting for a list, and the group in another zone still
// scales: what CA's failover needs.
func TestGceZoneResourcePoolExhaustedIsOutOfResources(t *testing.T) {
	t.Parallel()
	c, f := newGceCore(t)
	f.Fail(http.MethodPost, "zones/europe-west4-a/instances", 1, gcefake.ErrZoneResourcePoolExhausted)
	listsBefore := f.Calls(http.MethodGet, "/aggregated/instances")
	if err := c.IncreaseSize("west", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the create to be answered", func() bool {
		return slices.ContainsFunc(mustNodes(t, c, "west"), func(v InstanceView) bool { return v.Error != nil })
	})
	if got := f.Calls(http.MethodGet, "/aggregated/instances"); got != listsBefore {
		t.Fatalf("%d lists before the error showed; it must come from the create itself", got-listsBefore)
	}
	// One Refresh later the error still stands for CA to fail over on.
	c.Sync(t.Context(), true)
	v := mustNodes(t, c, "west")
	if len(v) != 1 || v[0].State != providers.StateCreating || v[0].Error == nil ||
		v[0].Error.Class != providers.ErrorOutOfResources || v[0].Error.Code != "ZONE_RESOURCE_POOL_EXHAUSTED" {
		t.Fatalf("west instances = %+v, want one creating with OutOfResources ZONE_RESOURCE_POOL_EXHAUSTED", v)
	}
	if !strings.HasPrefix(v[0].ProviderID, "gce://"+f.Project()+"/europe-west4-a/west-") {
		t.Errorf("failed instance's providerID %q is not its pre-assigned gce:// id", v[0].ProviderID)
	}
	if got := f.Calls(http.MethodPost, "/zones/europe-west4-a/instances"); got != 1 {
		t.Fatalf("%d inserts; a capacity error must not be retried", got)
	}

	// CA fails over: the group in the other zone scales.
	if err := c.IncreaseSize("central", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "2 instances in us-central1-a", func() bool { return len(f.Instances()) == 2 })
	// A worker may still be handing its Create result to the core; Refresh
	// until both show running, as CA's loop would.
	eventually(t, "2 running central instances", func() bool {
		c.Sync(t.Context(), true)
		running := 0
		for _, v := range mustNodes(t, c, "central") {
			if v.Error != nil {
				t.Fatalf("central instance %s has error %+v", v.ProviderID, v.Error)
			}
			if strings.HasPrefix(v.ProviderID, "gce://"+f.Project()+"/us-central1-a/central-") && v.State == providers.StateRunning {
				running++
			}
		}
		return running == 2
	})
	for _, in := range f.Instances() {
		if in.Zone != "us-central1-a" || in.Labels["prebake-dev_group"] != "central" {
			t.Errorf("instance %s in %s, group %q; want only central's, in us-central1-a", in.Name, in.Zone, in.Labels["prebake-dev_group"])
		}
	}
}

func TestGceQuotaExceededIsOutOfResources(t *testing.T) {
	t.Parallel()
	c, f := newGceCore(t)
	f.Fail(http.MethodPost, "zones/us-central1-a/instances", 1, gcefake.ErrQuotaExceeded)
	if err := c.IncreaseSize("central", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the create to be answered", func() bool {
		return slices.ContainsFunc(mustNodes(t, c, "central"), func(v InstanceView) bool { return v.Error != nil })
	})
	v := mustNodes(t, c, "central")
	if v[0].Error.Class != providers.ErrorOutOfResources || v[0].Error.Code != "QUOTA_EXCEEDED" {
		t.Fatalf("central instances = %+v, want OutOfResources QUOTA_EXCEEDED", v)
	}
}

// A GCE take that a killed process left between the marker's removal and
// the start: a restarted core adopts the TERMINATED instance and, once
// the provider's grace is over, shows it to CA failed, so CA deletes it
// at once rather than after --max-node-provision-time.
func TestGceInterruptedTakeShowsFailedAfterRestart(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	f := gcefake.New(gcefake.Options{Now: clk.Now})
	t.Cleanup(f.Close)
	p, err := gce.New(t.Context(), gce.Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "test", Rate: 1000, Burst: 1000, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	// What the killed process did: a standby created and parked, then its
	// marker removed and nothing more (here the setMetadata fails).
	req := providers.CreateRequest{Name: "west-s1", Cluster: "test", Group: "west", MachineType: "e2-standard-2", Location: "europe-west4-a",
		ImageKind: providers.ImageRuntimeInstall, UserData: []byte("#cloud-config\n"), Standby: providers.StandbyStopped}
	in, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Park(t.Context(), in.ProviderID, providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	f.Fail(http.MethodPost, "zones/europe-west4-a/instances/west-s1/setMetadata", 1, gcefake.ErrInvalid)
	if _, err := p.Resume(t.Context(), in.ProviderID, []byte("#cloud-config\n# join\n")); err == nil {
		t.Fatal("Resume succeeded through a failed setMetadata")
	}

	c := newCoreWith(t, p, func(o *Options) { o.Now = clk.Now },
		GroupSpec{ID: "west", Provider: "gce", MaxSize: 5, MachineType: "e2-standard-2", Zone: "europe-west4-a", Region: "europe-west4"})
	if v := mustNodes(t, c, "west"); len(v) != 1 || v[0].ProviderID != in.ProviderID || v[0].Error != nil {
		t.Fatalf("adopted within the grace: %+v, want %s without error", v, in.ProviderID)
	}
	clk.Advance(3 * time.Minute)
	c.Sync(t.Context(), true)
	v := mustNodes(t, c, "west")
	if len(v) != 1 || v[0].Error == nil || v[0].Error.Code != "resume_interrupted" {
		t.Fatalf("after the grace: %+v, want %s failed with resume_interrupted", v, in.ProviderID)
	}
	if err := c.DeleteNodes("west", []Node{{ProviderID: in.ProviderID}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the half-taken instance deleted", func() bool { clk.Advance(time.Second); return len(f.Instances()) == 0 })
}
