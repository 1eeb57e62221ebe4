package timeline

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/prebake-dev/prebake/e2e/standin"
)

// Stat summarises one phase.
type Stat struct {
	Phase string `json:"phase"`
	// From and To name the two events the phase lies between.
	From string `json:"from"`
	To   string `json:"to"`
	N    int    `json:"n"`
	// Median, P90 and Max are in milliseconds.
	MedianMS float64 `json:"medianMs"`
	P90MS    float64 `json:"p90Ms"`
	MaxMS    float64 `json:"maxMs"`
	// Source says where the numbers come from and how they were measured.
	Source string `json:"source"`
	// Note flags anything a reader must know (e.g. "includes the SIMULATED boot").
	Note string `json:"note,omitempty"`

	samples []time.Duration
}

// Summarise computes a Stat over samples (nearest-rank quantiles).
func Summarise(phase, from, to, source string, samples []time.Duration) Stat {
	s := Stat{Phase: phase, From: from, To: to, Source: source, N: len(samples), samples: slices.Clone(samples)}
	if len(samples) == 0 {
		return s
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	s.MedianMS = ms(Quantile(sorted, 0.5))
	s.P90MS = ms(Quantile(sorted, 0.9))
	s.MaxMS = ms(sorted[len(sorted)-1])
	return s
}

// Quantile is the nearest-rank q-quantile of sorted (ascending) samples.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// Extra is what the tests know besides the stand-in's records.
type Extra struct {
	// CreateCalled maps an instance id to when the provider's Create ran for it (the kwok
	// provider stamps it on its machine record).
	CreateCalled map[string]time.Time
	// Boot maps an image kind (prebaked, runtime-install) to its configured SIMULATED boot.
	Boot map[string]time.Duration
}

// Phase names, shared by the tables and the JSON.
const (
	PhaseReaction      = "stand-in reaction"
	PhaseIncreaseSize  = "IncreaseSize latency"
	PhasePluginCreate  = "plugin overhead to the create call"
	PhaseListed        = "instance listed"
	PhaseRegistration  = "registration beyond the simulated boot"
	PhaseRegistered    = "node registered"
	PhaseReady         = "node Ready"
	PhasePodRunning    = "pod Running"
	PhaseEndToEnd      = "end to end"
	PhaseErrorVisible  = "creation error visible"
	PhaseAPIAccepted   = "plugin: IncreaseSize recorded → Create returned"
	simulatedBootNote  = "includes the SIMULATED boot (an input, see Inputs)"
	standinClockSource = "stand-in's clock (watch events, RPC returns)"
)

// Phases computes the per-phase statistics of the instances the stand-in requested.
// Instances with a creation error count only in PhaseErrorVisible.
func Phases(insts []standin.Instance, x Extra) []Stat {
	var reaction, incr, plugin, listed, beyond, registered, ready, running, e2e, errVisible []time.Duration
	add := func(dst *[]time.Duration, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			*dst = append(*dst, to.Sub(from))
		}
	}
	for _, in := range insts {
		if !in.Requested {
			continue
		}
		if in.Error != nil {
			add(&errVisible, in.IncreaseReturned, in.Error.SeenAt)
			continue
		}
		add(&reaction, in.PodPendingSeen, in.IncreaseSent)
		add(&incr, in.IncreaseSent, in.IncreaseReturned)
		add(&listed, in.IncreaseReturned, in.Listed)
		created, ok := x.CreateCalled[in.ID]
		if ok {
			add(&plugin, in.IncreaseSent, created)
			if boot, ok := x.Boot[in.ImageKind]; ok && !in.Registered.IsZero() {
				beyond = append(beyond, in.Registered.Sub(created)-boot)
			}
		}
		add(&registered, in.IncreaseSent, in.Registered)
		add(&ready, in.Registered, in.Ready)
		add(&running, in.Ready, in.PodRunning)
		add(&e2e, in.PodPendingSeen, in.PodRunning)
	}
	stats := []Stat{
		Summarise(PhaseReaction, "pod seen Unschedulable", "IncreaseSize sent", standinClockSource, reaction),
		Summarise(PhaseIncreaseSize, "IncreaseSize sent", "IncreaseSize returned", "client side, over gRPC", incr),
		Summarise(PhasePluginCreate, "IncreaseSize sent", "provider Create called", "machine record's requested-at stamp vs stand-in's clock (same host)", plugin),
		Summarise(PhaseListed, "IncreaseSize returned", "first NodeGroupNodes listing it", standinClockSource+"; bounded by the loop interval", listed),
		Summarise(PhaseRegistration, "provider Create called + simulated boot", "Node with spec.providerID == instance id seen", "materialiser, API server and watch latency", beyond),
		withNote(Summarise(PhaseRegistered, "IncreaseSize sent", "Node with spec.providerID == instance id seen", standinClockSource, registered), simulatedBootNote),
		Summarise(PhaseReady, "Node registered", "Node Ready=True and not-ready taint gone, seen", standinClockSource, ready),
		Summarise(PhasePodRunning, "Node Ready", "first pod on it seen Running", standinClockSource, running),
		withNote(Summarise(PhaseEndToEnd, "pod seen Unschedulable", "pod Running", standinClockSource, e2e), simulatedBootNote),
	}
	if len(errVisible) > 0 {
		stats = append(stats, Summarise(PhaseErrorVisible, "IncreaseSize returned", "NodeGroupNodes shows errorInfo", standinClockSource, errVisible))
	}
	return slices.DeleteFunc(stats, func(s Stat) bool { return s.N == 0 })
}

func withNote(s Stat, note string) Stat {
	s.Note = note
	return s
}

// RPCStat summarises the latency of one RPC method.
type RPCStat struct {
	Method string  `json:"method"`
	N      int     `json:"n"`
	P50MS  float64 `json:"p50Ms"`
	P90MS  float64 `json:"p90Ms"`
	P99MS  float64 `json:"p99Ms"`
	MaxMS  float64 `json:"maxMs"`
	Source string  `json:"source"`
}

// RPCStats summarises client-side latencies by method, with an "all" row first.
func RPCStats(byMethod map[string][]time.Duration) []RPCStat {
	var all []time.Duration
	var out []RPCStat
	for _, m := range slices.Sorted(maps.Keys(byMethod)) {
		ds := byMethod[m]
		all = append(all, ds...)
		out = append(out, rpcStat(m, ds))
	}
	if len(all) == 0 {
		return nil
	}
	return append([]RPCStat{rpcStat("all", all)}, out...)
}

func rpcStat(method string, ds []time.Duration) RPCStat {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return RPCStat{
		Method: method, N: len(ds), Source: "client side (stand-in)",
		P50MS: ms(Quantile(sorted, 0.5)), P90MS: ms(Quantile(sorted, 0.9)), P99MS: ms(Quantile(sorted, 0.99)),
		MaxMS: ms(sorted[len(sorted)-1]),
	}
}

// FormatMS renders milliseconds for a table: µs precision below 10 ms, seconds above 10 s.
func FormatMS(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 10000:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.2f s", v/1000)
}
