package nodetimeline

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Formats Write renders.
const (
	FormatTable    = "table"
	FormatJSON     = "json"
	FormatMarkdown = "markdown"
)

// Write renders r as format (table, json or markdown).
func Write(w io.Writer, r Report, format string) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case FormatTable, FormatMarkdown:
		return writeText(w, r, format == FormatMarkdown)
	}
	return fmt.Errorf("output format %q: want table, json or markdown", format)
}

// columns of the per-node phase table, with their headers.
var phaseColumns = []struct{ header, phase string }{
	{"PENDING→CA", PodPending + " → " + CADecision},
	{"CA→INCREASE", CADecision + " → " + Requested},
	{"→ACCEPTED", Requested + " → " + Accepted},
	{"→RUNNING", Accepted + " → " + Running},
	{"→REGISTERED", Running + " → " + Registered},
	{"→READY", Registered + " → " + Ready},
	{"→POD RUNNING", Ready + " → " + PodRunning},
	{"INCREASE→READY", PhaseTotal},
	{"PENDING→POD", PhaseEndToEnd},
}

// table writes rows as an aligned table or a Markdown one.
type table struct {
	md   bool
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	if len(t.rows) == 0 {
		return nil
	}
	if t.md {
		for i, r := range t.rows {
			esc := make([]string, len(r))
			for j, c := range r {
				esc[j] = strings.ReplaceAll(c, "|", `\|`)
			}
			if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(esc, " | ")); err != nil {
				return err
			}
			if i == 0 {
				sep := make([]string, len(r))
				for j := range sep {
					sep[j] = "---"
				}
				fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
			}
		}
		_, err := fmt.Fprintln(w)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w)
	return err
}

func writeText(w io.Writer, r Report, md bool) error {
	heading := func(s string) {
		if md {
			fmt.Fprintf(w, "### %s\n\n", s)
		} else {
			fmt.Fprintf(w, "%s\n\n", strings.ToUpper(s))
		}
	}
	window := "every node"
	if !r.Since.IsZero() {
		window = fmt.Sprintf("nodes made since %s (the last %s)", r.Since.UTC().Format(time.RFC3339), r.Generated.Sub(r.Since).Round(time.Second))
	}
	filter := ""
	for _, k := range slices.Sorted(maps.Keys(r.Filter)) {
		filter += fmt.Sprintf(", --%s %s", k, r.Filter[k])
	}
	fmt.Fprintf(w, "prebake timeline at %s: %d %s%s.\n", r.Generated.UTC().Format(time.RFC3339), len(r.Nodes), window, filter)
	if r.Simulated > 0 {
		fmt.Fprintf(w, "SIMULATED: %d of the nodes are kwok's: their boot, Ready and pods are simulated (marked sim), not a machine's.\n", r.Simulated)
	}
	components := map[string]int{}
	for _, n := range r.Nodes {
		if c := n.Trigger.Component; c != "" && c != "cluster-autoscaler" {
			components[c]++
		}
	}
	pooled := 0
	for _, n := range r.Nodes {
		if n.FromWarmPool {
			pooled++
		}
	}
	if pooled > 0 {
		fmt.Fprintf(w, "FROM WARM POOL: %d of the nodes were resumed standbys (FROM: warm pool), not created: IncreaseSize took a parked machine, →ACCEPTED is its resume call and →RUNNING the restart of a machine prepared before. The summary counts them with the created nodes.\n", pooled)
	}
	for _, c := range slices.Sorted(maps.Keys(components)) {
		fmt.Fprintf(w, "The CA Events of %d of the nodes were written by %s, not cluster-autoscaler.\n", components[c], c)
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "Note: %s\n\n", n)
	}

	if len(r.Nodes) > 0 {
		heading("Phases per node")
		t := &table{md: md}
		hdr := []string{"NODE", "GROUP", "IMAGE KIND"}
		if pooled > 0 {
			// Only then: a report without resumed standbys keeps its columns.
			hdr = append(hdr, "FROM")
		}
		for _, c := range phaseColumns {
			hdr = append(hdr, c.header)
		}
		t.add(hdr...)
		for _, n := range r.Nodes {
			row := []string{n.Name, n.Group, orDash(n.ImageKind)}
			if pooled > 0 {
				row = append(row, originCell(n))
			}
			for _, c := range phaseColumns {
				row = append(row, phaseCell(n.Phase(c.phase)))
			}
			t.add(row...)
		}
		if err := t.write(w); err != nil {
			return err
		}

		heading("Bootstrap as each node reported it (the machine's clock)")
		t = &table{md: md}
		var phases []string
		for _, n := range r.Nodes {
			for _, p := range n.Bootstrap.Phases {
				if !slices.Contains(phases, p.Name) {
					phases = append(phases, p.Name)
				}
			}
		}
		hdr = []string{"NODE", "IMAGE", "PREBAKED", "INSTALL", "ACCEPTED→SCRIPT", "SCRIPT"}
		for _, p := range phases {
			hdr = append(hdr, strings.ToUpper(p))
		}
		t.add(append(hdr, "CLOCK SKEW")...)
		for _, n := range r.Nodes {
			b := n.Bootstrap
			row := []string{n.Name, orDash(n.Image)}
			if !b.Reported {
				row = append(row, "? "+b.Unknown+": "+b.Detail)
				t.add(row...)
				continue
			}
			row = append(row, fmt.Sprint(b.Prebaked), orDash(b.Install), phaseCell(b.VMBoot), fmtMs(float64(b.TotalMs)))
			for _, name := range phases {
				cell := "–"
				for _, p := range b.Phases {
					if p.Name == name {
						cell = fmtMs(float64(p.Ms))
						if p.Result != "ok" {
							cell += " " + p.Result
						}
					}
				}
				row = append(row, cell)
			}
			t.add(append(row, n.Skew.Detail)...)
		}
		if err := t.write(w); err != nil {
			return err
		}
	}

	heading("Summary across nodes")
	t := &table{md: md}
	t.add("PHASE", "N", "P50", "P90", "MAX", "UNKNOWN", "NOTE")
	for _, s := range r.Summary {
		if s.N == 0 && s.Unknown == 0 {
			continue
		}
		note := s.Note
		if s.Simulated > 0 {
			note = join(note, fmt.Sprintf("SIMULATED on %d of %d", s.Simulated, s.N))
		}
		if s.N == 0 {
			t.add(s.Phase, "0", "–", "–", "–", fmt.Sprint(s.Unknown), note)
			continue
		}
		t.add(s.Phase, fmt.Sprint(s.N), fmtMs(s.P50Ms), fmtMs(s.P90Ms), fmtMs(s.MaxMs), fmt.Sprint(s.Unknown), note)
	}
	if err := t.write(w); err != nil {
		return err
	}

	if r.Metrics != nil {
		writeMetrics(w, r.Metrics, md, heading)
	}

	var problems []string
	for _, n := range r.Nodes {
		for _, p := range n.Problems {
			problems = append(problems, n.Name+": "+p)
		}
	}
	if len(problems) > 0 {
		heading("Problems")
		for _, p := range problems {
			fmt.Fprintf(w, "- %s\n", p)
		}
		fmt.Fprintln(w)
	}
	used := usedUnknowns(r)
	if len(used) > 0 || len(r.Nodes) > 0 {
		heading("How to read it")
		fmt.Fprintln(w, "- A cell is the time from the previous moment to the column's: pod Pending (the creation of the first pod CA's TriggeredScaleUp names) → CA decision (its ScaledUpGroup Event) → IncreaseSize received → create accepted → machine running → Node registered → Node Ready → first pod Running. docs/timeline.md says where each comes from.")
		fmt.Fprintln(w, "- a–b: an end is an API timestamp with whole seconds, so the duration lies in that range. sim: SIMULATED (kwok). !: the phase ends before it starts (the clocks disagree; see Problems).")
		for _, u := range used {
			fmt.Fprintf(w, "- ? %s: %s\n", u, Legend[u])
		}
		fmt.Fprintln(w)
	}
	return nil
}

func usedUnknowns(r Report) []string {
	set := map[string]bool{}
	for _, n := range r.Nodes {
		for _, p := range append(slices.Clone(n.Phases), n.Total, n.EndToEnd, n.Bootstrap.VMBoot) {
			if p.Unknown != "" {
				set[p.Unknown] = true
			}
		}
		if n.Bootstrap.Unknown != "" {
			set[n.Bootstrap.Unknown] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// originCell says where a node's machine came from: a resumed warm-pool standby, a create,
// or unknown where prebake's annotation is missing (a Node without it can't say).
func originCell(n Node) string {
	switch {
	case n.FromWarmPool:
		return "warm pool"
	case n.Moment(Requested).Known():
		return "create"
	}
	return "? " + UnknownNoAnnotation
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// phaseCell renders a phase for a table cell.
func phaseCell(p Phase) string {
	if !p.Known {
		if p.Unknown == "" {
			return "?"
		}
		return "? " + p.Unknown
	}
	var s string
	switch {
	case p.OutOfOrder:
		s = "-" + fmtMs(-p.Ms) + " !"
	case p.Exact():
		s = fmtMs(p.Ms)
	default:
		s = fmtRange(p.MinMs, p.MaxMs)
	}
	if p.Simulated {
		s += " sim"
	}
	return s
}

// fmtMs renders milliseconds: 12ms, 3.40s, 2m05.3s.
func fmtMs(v float64) string {
	switch {
	case v < 1000:
		return fmt.Sprintf("%.0fms", v)
	case v < 60_000:
		return fmt.Sprintf("%.2fs", v/1000)
	}
	m := int(v / 60_000)
	return fmt.Sprintf("%dm%04.1fs", m, (v-float64(m)*60_000)/1000)
}

// fmtRange renders a duration known to a range, in seconds: 0–1.0s.
func fmtRange(lo, hi float64) string {
	if hi >= 60_000 {
		return fmtMs(lo) + "–" + fmtMs(hi)
	}
	return fmt.Sprintf("%.1f–%.1fs", lo/1000, hi/1000)
}
