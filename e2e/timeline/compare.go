package timeline

import (
	"fmt"
	"strings"
	"time"
)

// Comparison is a phase table of a few runs side by side (a vanilla and a prebaked node,
// say): one row per phase, one column per run, each cell one measured duration.
type Comparison struct {
	Title   string
	Columns []string // the runs, e.g. "vanilla (node-a)", "prebaked (node-b)"
	Rows    []Row
	Notes   []string
}

// Row is one phase: from → to, its duration in each column (Unknown or a missing value is
// shown as –: the run did not get there, or the phase is not one of its own; any other
// negative value is shown with its sign: "to" was seen before "from"), and where the figures
// come from.
type Row struct {
	Phase, From, To string
	Values          []time.Duration
	Source          string
}

// Add appends a row.
func (c *Comparison) Add(phase, from, to, source string, values ...time.Duration) {
	c.Rows = append(c.Rows, Row{Phase: phase, From: from, To: to, Values: values, Source: source})
}

// Unknown is a duration that was not measured.
const Unknown time.Duration = -1

// Between is to - from, or Unknown when either is unknown (zero).
func Between(from, to time.Time) time.Duration {
	if from.IsZero() || to.IsZero() {
		return Unknown
	}
	return to.Sub(from)
}

// Markdown renders the table.
func (c Comparison) Markdown() string {
	var b strings.Builder
	if c.Title != "" {
		fmt.Fprintf(&b, "%s\n\n", c.Title)
	}
	b.WriteString("| phase | from → to |")
	for _, col := range c.Columns {
		fmt.Fprintf(&b, " %s |", col)
	}
	b.WriteString(" measured by |\n|---|---|")
	for range c.Columns {
		b.WriteString("---:|")
	}
	b.WriteString("---|\n")
	for _, r := range c.Rows {
		fmt.Fprintf(&b, "| %s | %s → %s |", r.Phase, r.From, r.To)
		for i := range c.Columns {
			cell := "–"
			v := Unknown
			if i < len(r.Values) {
				v = r.Values[i]
			}
			switch {
			case v == Unknown:
			case v < 0:
				cell = "−" + FormatMS(ms(-v))
			default:
				cell = FormatMS(ms(v))
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		fmt.Fprintf(&b, " %s |\n", r.Source)
	}
	for _, n := range c.Notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	return b.String()
}
