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
