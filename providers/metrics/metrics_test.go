package metrics

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

func TestWrapCountsCallsByOutcome(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := fake.New()
	f.SetCapacity(1)
	p := Wrap(f, NewAPIMetrics(reg))
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		_, _ = p.Create(ctx, providers.CreateRequest{Name: name, MachineType: "m1"})
	}
	if _, err := p.List(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.MachineType(ctx, "m1", "z"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.MachineType(ctx, "nope", "z"); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("MachineType(nope) = %v, want not found", err)
	}
	// The fake keeps no warm pool unless told: both calls fail, and are
	// measured all the same.
	if err := p.Park(ctx, "fake://a", providers.StandbyStopped); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Fatalf("Park = %v, want unsupported", err)
	}
	if _, err := p.Resume(ctx, "fake://a", nil); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Fatalf("Resume = %v, want unsupported", err)
	}
	f.Standby = []providers.StandbyState{providers.StandbyStopped}
	f.SetCapacity(-1)
	if _, err := p.Create(ctx, providers.CreateRequest{Name: "s", MachineType: "m1", Standby: providers.StandbyStopped}); err != nil {
		t.Fatal(err)
	}
	if err := p.Park(ctx, "fake://s", providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Resume(ctx, "fake://s", []byte("ud")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, outcome string
		want            float64
	}{
		{"Create", "ok", 2},
		{"Create", "resource_unavailable", 1},
		{"Park", "ok", 1},
		{"Park", "create_failed", 1},
		{"Resume", "ok", 1},
		{"Resume", "create_failed", 1},
		{"List", "ok", 1},
		{"MachineType", "ok", 1},
		{"MachineType", "create_failed", 1}, // the fake classifies every other error so
	} {
		got := testutil.ToFloat64(p.(*measured).m.calls.WithLabelValues("fake", tc.method, tc.outcome))
		if got != tc.want {
			t.Errorf("%s/%s = %v, want %v", tc.method, tc.outcome, got, tc.want)
		}
	}
}

// builderProvider is a provider with more than the contract: an image
// builder, as hcloud and gce are.
type builderProvider struct {
	*fake.Provider
	imagecatalog.BuildAPI
}

// TestWrapIsExactlyTheContract: the wrapper is what the core holds. It
// forwards what the contract has (capabilities, topology labels, the
// background work) and nothing else, so no optional interface can be
// claimed for a provider that lacks it, or hidden where it has it.
func TestWrapIsExactlyTheContract(t *testing.T) {
	t.Parallel()
	m := NewAPIMetrics(prometheus.NewRegistry())
	f := fake.New()
	f.BootsImages, f.UserData, f.PriceFix = true, providers.UserDataScript, "a fix only this test declares"
	f.Standby = []providers.StandbyState{providers.StandbyStopped}
	f.Topology = func(location string) map[string]string { return map[string]string{providers.LabelRegion: location} }
	w := Wrap(f, m)
	if d := cmp.Diff(f.Capabilities(), w.Capabilities()); d != "" {
		t.Errorf("Capabilities (-provider +wrapped):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{providers.LabelRegion: "fsn1"}, w.TopologyLabels("fsn1")); d != "" {
		t.Errorf("TopologyLabels (-want +got):\n%s", d)
	}
	if got := Wrap(fake.New(), m).TopologyLabels("fsn1"); got != nil {
		t.Errorf("TopologyLabels of a provider without any = %v, want nil", got)
	}
	if err := w.Run(t.Context()); err != nil {
		t.Errorf("Run = %v", err)
	}
	if _, ok := Wrap(builderProvider{Provider: fake.New()}, m).(imagecatalog.BuildAPI); ok {
		t.Error("the wrapper claims imagecatalog.BuildAPI: it must implement exactly providers.Provider")
	}
}
