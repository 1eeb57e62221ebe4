package timeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Input is a configured value the results depend on, such as a SIMULATED boot time. It is
// never a finding.
type Input struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Fact is one measured number that is not a phase, such as "time to all pods Running".
type Fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Scenario is one e2e run's results.
type Scenario struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Instances is the number of instances the stand-in requested.
	Instances int       `json:"instances"`
	Inputs    []Input   `json:"inputs"`
	Phases    []Stat    `json:"phases"`
	Metrics   []Stat    `json:"pluginMetrics,omitempty"`
	RPC       []RPCStat `json:"rpc,omitempty"`
	// ServerRPC are prebake_rpc_seconds estimates from /metrics.
	ServerRPC []Stat   `json:"serverRpc,omitempty"`
	Facts     []Fact   `json:"facts,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// Report collects scenarios; it is safe for concurrent use.
type Report struct {
	mu        sync.Mutex // guards scenarios
	scenarios []Scenario

	Backend string
	Started time.Time
}

// Add records a scenario, replacing one of the same name.
func (r *Report) Add(s Scenario) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.scenarios {
		if r.scenarios[i].Name == s.Name {
			r.scenarios[i] = s
			return
		}
	}
	r.scenarios = append(r.scenarios, s)
}

// Len is the number of scenarios recorded.
func (r *Report) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.scenarios)
}

type reportJSON struct {
	Generated time.Time  `json:"generated"`
	Backend   string     `json:"backend"`
	Go        string     `json:"go"`
	CPUs      int        `json:"cpus"`
	WallS     float64    `json:"wallSeconds"`
	Pooled    []Stat     `json:"allScenarios"`
	Scenarios []Scenario `json:"scenarios"`
}

func (r *Report) snapshot(now time.Time) reportJSON {
	r.mu.Lock()
	defer r.mu.Unlock()
	return reportJSON{
		Generated: now, Backend: r.Backend, Go: runtime.Version(), CPUs: runtime.NumCPU(),
		WallS:     now.Sub(r.Started).Round(time.Millisecond).Seconds(),
		Pooled:    pooled(r.scenarios),
		Scenarios: append([]Scenario(nil), r.scenarios...),
	}
}

// pooled merges the samples of the same phase across scenarios.
func pooled(scenarios []Scenario) []Stat {
	var order []string
	by := map[string]*Stat{}
	for _, sc := range scenarios {
		for _, st := range sc.Phases {
			p := by[st.Phase]
			if p == nil {
				c := st
				c.samples = nil
				by[st.Phase] = &c
				order = append(order, st.Phase)
				p = &c
			}
			p.samples = append(p.samples, st.samples...)
		}
	}
	out := make([]Stat, 0, len(order))
	for _, name := range order {
		p := by[name]
		s := Summarise(p.Phase, p.From, p.To, p.Source, p.samples)
		s.Note = p.Note
		out = append(out, s)
	}
	return out
}

// Write writes timeline.md and timeline.json into dir.
func (r *Report) Write(dir string) error {
	snap := r.snapshot(time.Now())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(snap, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "timeline.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "timeline.md"), []byte(markdown(snap)), 0o644)
}

// Markdown renders the report as it would be written now.
func (r *Report) Markdown() string { return markdown(r.snapshot(time.Now())) }

func markdown(s reportJSON) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# prebake scale-up timeline\n\n")
	fmt.Fprintf(&b, "Generated %s by the e2e suite against the **%s** backend (%s, %d CPUs); suite wall time %.1f s.\n\n",
		s.Generated.Format(time.RFC3339), s.Backend, s.Go, s.CPUs, s.WallS)
	b.WriteString("Every number in a *Measured* table was measured in this run: `prebake serve` ran as a real process, " +
		"driven over real gRPC by the e2e suite's **stand-in for cluster-autoscaler** (not CA itself), against a real " +
		"kube-apiserver, kube-scheduler and kube-controller-manager, with kwok running the nodes. Machines are kwok Nodes: " +
		"their boot time is **SIMULATED** and configured per scenario; it is listed under *Inputs* and is not a finding.\n\n")
	if len(s.Pooled) > 0 {
		b.WriteString("## All scenarios, pooled\n\n")
		writeStats(&b, s.Pooled)
	}
	for _, sc := range s.Scenarios {
		fmt.Fprintf(&b, "## %s\n\n", sc.Title)
		if len(sc.Inputs) > 0 {
			b.WriteString("**Inputs** (configured, SIMULATED where marked — not findings)\n\n| input | value |\n|---|---|\n")
			for _, in := range sc.Inputs {
				fmt.Fprintf(&b, "| %s | %s |\n", in.Name, in.Value)
			}
			b.WriteString("\n")
		}
		if len(sc.Phases) > 0 {
			fmt.Fprintf(&b, "**Measured** per instance (%d requested)\n\n", sc.Instances)
			writeStats(&b, sc.Phases)
		}
		if len(sc.Metrics) > 0 {
			b.WriteString("**Measured** by prebake itself (scraped from its /metrics)\n\n")
			writeStats(&b, sc.Metrics)
		}
		if len(sc.RPC) > 0 {
			b.WriteString("**RPC latency**, client side\n\n| method | n | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n")
			for _, r := range sc.RPC {
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", r.Method, r.N, FormatMS(r.P50MS), FormatMS(r.P90MS), FormatMS(r.P99MS), FormatMS(r.MaxMS))
			}
			b.WriteString("\n")
		}
		if len(sc.ServerRPC) > 0 {
			b.WriteString("**RPC latency**, server side (`prebake_rpc_seconds`, bucket estimates)\n\n")
			writeStats(&b, sc.ServerRPC)
		}
		if len(sc.Facts) > 0 {
			b.WriteString("**Measured facts**\n\n")
			for _, f := range sc.Facts {
				fmt.Fprintf(&b, "- %s: %s\n", f.Name, f.Value)
			}
			b.WriteString("\n")
		}
		for _, n := range sc.Notes {
			fmt.Fprintf(&b, "> %s\n", n)
		}
		if len(sc.Notes) > 0 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func writeStats(b *strings.Builder, stats []Stat) {
	b.WriteString("| phase | from → to | n | median | p90 | max | source |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, st := range stats {
		maxCell := FormatMS(st.MaxMS)
		if st.MaxMS == 0 {
			maxCell = "–"
		}
		phase := st.Phase
		if st.Note != "" {
			phase += " ¹"
		}
		src := st.Source
		if st.Note != "" {
			src += "; ¹ " + st.Note
		}
		fmt.Fprintf(b, "| %s | %s → %s | %d | %s | %s | %s | %s |\n", phase, st.From, st.To, st.N,
			FormatMS(st.MedianMS), FormatMS(st.P90MS), maxCell, src)
	}
	b.WriteString("\n")
}

// Table renders stats as the same Markdown table the report uses, for terminals.
func Table(stats []Stat) string {
	var b strings.Builder
	writeStats(&b, stats)
	return b.String()
}
