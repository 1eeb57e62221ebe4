package timeline

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/e2e/standin"
)

func TestQuantile(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.9, 9}, {0.99, 10}, {0, 1}, {1, 10}} {
		if got := Quantile(ds, tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v", got)
	}
}

const exposition = `# HELP prebake_rpc_seconds Latency.
# TYPE prebake_rpc_seconds histogram
prebake_rpc_seconds_bucket{code="OK",method="Refresh",le="0.001"} 2
prebake_rpc_seconds_bucket{code="OK",method="Refresh",le="0.01"} 8
prebake_rpc_seconds_bucket{code="OK",method="Refresh",le="+Inf"} 10
prebake_rpc_seconds_sum{code="OK",method="Refresh"} 0.05
prebake_rpc_seconds_count{code="OK",method="Refresh"} 10
prebake_rpc_seconds_bucket{code="OK",method="NodeGroups",le="0.001"} 10
prebake_rpc_seconds_bucket{code="OK",method="NodeGroups",le="0.01"} 10
prebake_rpc_seconds_bucket{code="OK",method="NodeGroups",le="+Inf"} 10
prebake_rpc_seconds_sum{code="OK",method="NodeGroups"} 0.002
prebake_rpc_seconds_count{code="OK",method="NodeGroups"} 10
prebake_other_total{a="b \"quoted\""} 3
`

func TestParseHistograms(t *testing.T) {
	hs, err := ParseHistograms(exposition, "prebake_rpc_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 {
		t.Fatalf("got %d series, want 2", len(hs))
	}
	want := Histogram{
		Labels:  map[string]string{"code": "OK", "method": "Refresh"},
		Buckets: []Bucket{{0.001, 2}, {0.01, 8}, {math.Inf(1), 10}},
		Count:   10, Sum: 0.05,
	}
	if diff := cmp.Diff(want, hs[0]); diff != "" {
		t.Errorf("Refresh series (-want +got):\n%s", diff)
	}
	// Rank 5 of 10 lies in (0.001, 0.01], 3 of its 6 samples in.
	if got := hs[0].Quantile(0.5); math.Abs(got-0.0055) > 1e-9 {
		t.Errorf("median = %v, want 0.0055", got)
	}
	// Rank 9.5 lies in the +Inf bucket: the estimate is its lower bound.
	if got := hs[0].Quantile(0.95); got != 0.01 {
		t.Errorf("p95 = %v, want 0.01", got)
	}
	all, ok := Merge(hs, map[string]string{"code": "OK"})
	if !ok || all.Count != 20 || all.Buckets[0].Count != 12 {
		t.Errorf("Merge = %+v, %v; want count 20, first bucket 12", all, ok)
	}
	if _, ok := Merge(hs, map[string]string{"method": "Nope"}); ok {
		t.Error("Merge matched a method that isn't there")
	}
}

func TestParseSampleEscapes(t *testing.T) {
	name, labels, v, err := parseSample(`m{a="x\"y\\z",b="n\nl"} 2.5 1700000000`)
	if err != nil {
		t.Fatal(err)
	}
	if name != "m" || labels["a"] != `x"y\z` || labels["b"] != "n\nl" || v != 2.5 {
		t.Errorf("got %q %q %v", name, labels, v)
	}
}

func TestPhases(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	insts := []standin.Instance{
		{
			ID: "kwok://a", Requested: true, ImageKind: "prebaked",
			PodPendingSeen: at(0), IncreaseSent: at(100), IncreaseReturned: at(103), Listed: at(110),
			Registered: at(2150), Ready: at(2160), PodRunning: at(2400),
		},
		{ID: "kwok://failed", Requested: true, IncreaseReturned: at(103), Error: &standin.CreateError{SeenAt: at(120)}},
		{ID: "kwok://adopted", Registered: at(5)},
	}
	stats := Phases(insts, Extra{
		CreateCalled: map[string]time.Time{"kwok://a": at(104)},
		Boot:         map[string]time.Duration{"prebaked": 2 * time.Second},
	})
	got := map[string]float64{}
	for _, s := range stats {
		if s.N != 1 {
			t.Errorf("%s: n = %d, want 1", s.Phase, s.N)
		}
		got[s.Phase] = s.MedianMS
	}
	want := map[string]float64{
		PhaseReaction: 100, PhaseIncreaseSize: 3, PhasePluginCreate: 4, PhaseListed: 7,
		PhaseRegistration: 46, PhaseRegistered: 2050, PhaseReady: 10, PhasePodRunning: 240,
		PhaseEndToEnd: 2400, PhaseErrorVisible: 17,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("medians (-want +got):\n%s", diff)
	}
}

func TestReportWrite(t *testing.T) {
	r := &Report{Backend: "hermetic", Started: time.Now()}
	r.Add(Scenario{
		Name: "a", Title: "a: scale from zero", Instances: 1,
		Inputs: []Input{{"simulated boot, prebaked (SIMULATED)", "2s"}},
		Phases: []Stat{Summarise(PhaseReaction, "x", "y", "s", []time.Duration{time.Millisecond})},
	})
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "timeline.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## All scenarios, pooled", "**Inputs**", "SIMULATED", "| stand-in reaction |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("timeline.md lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "timeline.json")); err != nil {
		t.Error(err)
	}
}
