package metrics

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	for _, tc := range []struct {
		method, outcome string
		want            float64
	}{
		{"Create", "ok", 1},
		{"Create", "resource_unavailable", 1},
		{"List", "ok", 1},
	} {
		got := testutil.ToFloat64(p.(*measured).m.calls.WithLabelValues("fake", tc.method, tc.outcome))
		if got != tc.want {
			t.Errorf("%s/%s = %v, want %v", tc.method, tc.outcome, got, tc.want)
		}
	}
	if _, ok := p.(providers.Runner); !ok {
		t.Fatal("wrapped provider lost the Runner interface")
	}
}

// labeled is a provider with topology labels of its own.
type labeled struct{ *fake.Provider }

func (labeled) TopologyLabels(location string) map[string]string {
	return map[string]string{providers.LabelRegion: location}
}

// TestWrapForwardsTopologyLabels: the wrapper is what the core holds, so it must not hide a
// provider's topology labels (Hetzner's), nor invent any for a provider without them.
func TestWrapForwardsTopologyLabels(t *testing.T) {
	t.Parallel()
	m := NewAPIMetrics(prometheus.NewRegistry())
	tl, ok := Wrap(labeled{fake.New()}, m).(providers.TopologyLabeler)
	if !ok {
		t.Fatal("the wrapper is no TopologyLabeler")
	}
	if got := tl.TopologyLabels("fsn1"); got[providers.LabelRegion] != "fsn1" || len(got) != 1 {
		t.Errorf("wrapped TopologyLabels = %v, want the provider's", got)
	}
	if got := Wrap(fake.New(), m).(providers.TopologyLabeler).TopologyLabels("z1"); got != nil {
		t.Errorf("wrapped provider without topology labels gives %v, want nil (keep zone and region)", got)
	}
}
