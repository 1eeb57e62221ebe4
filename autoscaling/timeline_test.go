package autoscaling

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prebake-dev/prebake/internal/manualclock"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// The core's timeline accessor returns each moment it observed, on its own
// clock, and the pod Running and bootstrap observations land in the
// histograms once per instance.
func TestTimelineAccessorAndObservers(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := manualclock.New(t0)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p := fake.New()
	release := p.GateCreates()
	c := newCoreWith(t, p, func(o *Options) { o.Now, o.Metrics = clock.Now, m })

	if _, ok := c.Timeline("fake://g1-00001"); ok {
		t.Fatal("Timeline of an instance that does not exist: ok")
	}
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	const pid = "fake://g1-00001"
	tl, ok := c.Timeline(pid)
	if !ok || !tl.Requested.Equal(t0) || !tl.Accepted.IsZero() || tl.Adopted || tl.Group != "g1" {
		t.Fatalf("Timeline right after IncreaseSize = %+v, %v; want requested %s only", tl, ok, t0)
	}
	clock.Advance(40 * time.Millisecond)
	release()
	eventually(t, "create accepted", func() bool { tl, _ := c.Timeline(pid); return !tl.Accepted.IsZero() })

	clock.Advance(2 * time.Second)
	c.ObserveNode("g1-00001", pid, false, clock.Now()) // registered: running too
	clock.Advance(500 * time.Millisecond)
	c.ObserveNode("g1-00001", pid, true, clock.Now())
	clock.Advance(700 * time.Millisecond)
	c.ObservePodRunning(pid, clock.Now())
	c.ObservePodRunning(pid, clock.Now().Add(time.Hour)) // later pods don't move it

	got, _ := c.Timeline(pid)
	ms := func(d time.Duration) time.Time { return t0.Add(d) }
	want := InstanceTimeline{Group: "g1", ImageKind: got.ImageKind,
		Requested: t0, Accepted: ms(40 * time.Millisecond), Running: ms(2040 * time.Millisecond),
		Registered: ms(2040 * time.Millisecond), Ready: ms(2540 * time.Millisecond), PodRunning: ms(3240 * time.Millisecond)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Timeline (-want +got):\n%s", d)
	}
	kind := string(got.ImageKind)
	if n := testutil.CollectAndCount(m.phaseSeconds); n != 5 {
		t.Errorf("%d phase series, want 5 (api_accepted, running, node_registered, node_ready, pod_running)", n)
	}
	if sum, n := sample(t, reg, "prebake_instance_phase_seconds", map[string]string{"phase": "pod_running"}); sum != 3.24 || n != 1 {
		t.Errorf("pod_running: sum %v s over %d, want 3.24 s once (from IncreaseSize)", sum, n)
	}

	phases := []BootstrapPhase{{Name: "install", Result: "skipped"}, {Name: "join", Result: "ok", Duration: 9 * time.Second}}
	c.ObserveBootstrap(pid, phases, 9500*time.Millisecond)
	c.ObserveBootstrap(pid, phases, 9500*time.Millisecond) // every Node update repeats the report
	if n := testutil.CollectAndCount(m.bootstrapSeconds); n != 3 {
		t.Errorf("%d bootstrap series, want 3 (install, join, total)", n)
	}
	for phase, want := range map[string]float64{"join": 9, "total": 9.5, "install": 0} {
		if sum, n := sample(t, reg, "prebake_bootstrap_phase_seconds", map[string]string{"phase": phase, "image_kind": kind}); sum != want || n != 1 {
			t.Errorf("bootstrap %s: sum %v over %d, want %v once", phase, sum, n, want)
		}
	}
}

// After a restart the core adopts what it finds and knows none of its
// timeline: Timeline says so with zero times, and nothing is observed.
func TestTimelineOfAdoptedInstanceIsUnknown(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c1 := newCore(t, p)
	if err := c1.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "1 machine", func() bool { return len(p.Machines()) == 1 })
	p.SetState("fake://g1-00001", providers.StateRunning)

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	c2 := newCoreWith(t, p, func(o *Options) { o.Metrics = m })
	c2.ObserveNode("g1-00001", "fake://g1-00001", true, time.Now())
	c2.ObservePodRunning("fake://g1-00001", time.Now())
	c2.ObserveBootstrap("fake://g1-00001", []BootstrapPhase{{Name: "join", Result: "ok", Duration: time.Second}}, time.Second)
	tl, ok := c2.Timeline("fake://g1-00001")
	if !ok || !tl.Adopted || !tl.Requested.IsZero() || !tl.Registered.IsZero() || !tl.PodRunning.IsZero() {
		t.Errorf("Timeline of an adopted instance = %+v, %v; want Adopted with no times", tl, ok)
	}
	if n := testutil.CollectAndCount(m.phaseSeconds) + testutil.CollectAndCount(m.bootstrapSeconds); n != 0 {
		t.Errorf("%d timeline series observed for an adopted instance, want 0", n)
	}
}

// sample is the sum (rounded to ms) and count of the histogram series of
// name whose labels include want.
func sample(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, uint64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			h := s.GetHistogram()
			return float64(int64(h.GetSampleSum()*1000+0.5)) / 1000, h.GetSampleCount()
		}
	}
	t.Fatalf("no %s series with %v", name, want)
	return 0, 0
}
