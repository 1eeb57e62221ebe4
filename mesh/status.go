package mesh

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// ClusterStatus compares one cluster's configured peers with the wanted ones.
type ClusterStatus struct {
	Cluster    string   `json:"cluster"`
	Configured []string `json:"configured"`        // peers the cluster is configured with
	Missing    []string `json:"missing,omitempty"` // wanted but not configured
	Extra      []string `json:"extra,omitempty"`   // configured but not wanted (unexpected)
}

// OK reports whether the cluster is configured exactly as wanted.
func (s ClusterStatus) OK() bool { return len(s.Missing) == 0 && len(s.Extra) == 0 }

// Status compares every member's configured peers (as a DeclarativeBackend's Peers
// reports them) with its peers in wanted. It is pure; members are reported in
// canonical order.
func Status(members []string, wanted *Graph, configured map[string][]string) []ClusterStatus {
	want := wanted.Peers()
	out := make([]ClusterStatus, 0, len(members))
	for _, c := range slices.SortedFunc(slices.Values(members), Compare) {
		have := sortedCopy(configured[c])
		s := ClusterStatus{Cluster: c, Configured: have}
		for _, p := range want[c] {
			if !slices.Contains(have, p) {
				s.Missing = append(s.Missing, p)
			}
		}
		for _, p := range have {
			if !slices.Contains(want[c], p) {
				s.Extra = append(s.Extra, p)
			}
		}
		out = append(out, s)
	}
	return out
}

// WriteStatus prints the statuses as a table and a one-line verdict.
func WriteStatus(w io.Writer, statuses []ClusterStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tCONFIGURED\tMISSING\tEXTRA")
	bad := 0
	for _, s := range statuses {
		if !s.OK() {
			bad++
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Cluster, len(s.Configured), list(s.Missing), list(s.Extra))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if bad == 0 {
		_, err = fmt.Fprintf(w, "all %d clusters list exactly their peers\n", len(statuses))
	} else {
		_, err = fmt.Fprintf(w, "%d of %d clusters need a write: run prebake mesh apply\n", bad, len(statuses))
	}
	return err
}

func list(s []string) string {
	switch {
	case len(s) == 0:
		return "-"
	case len(s) > 8:
		return strings.Join(s[:8], ",") + fmt.Sprintf(",… (+%d)", len(s)-8)
	}
	return strings.Join(s, ",")
}
