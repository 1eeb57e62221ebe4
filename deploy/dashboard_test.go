package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The shipped dashboard loads strictly and holds together; its queries cover what
// docs/timeline.md promises (p50/p90 per phase and group, prebaked vs runtime-install,
// fallbacks, creation errors by class). That every name exists in a running prebake serve's
// /metrics is cmd/prebake/app's TestDashboardMetricsExistInServe.
func TestDashboardLoads(t *testing.T) {
	t.Parallel()
	onDisk, err := os.ReadFile("grafana/prebake-timeline.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(onDisk) != string(DashboardJSON) {
		t.Fatal("the embedded dashboard is not grafana/prebake-timeline.json")
	}
	d, err := LoadDashboard(DashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"prebake_bootstrap_phase_seconds_bucket", "prebake_bootstrap_phase_seconds_count",
		"prebake_image_fallback_total", "prebake_instance_create_errors_total",
		"prebake_instance_phase_seconds_bucket", "prebake_instances_requested_total",
	}
	if diff := cmp.Diff(want, d.MetricNames()); diff != "" {
		t.Errorf("metrics the dashboard queries (-want +got):\n%s", diff)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		"histogram_quantile(0.5, sum by (le, group, phase)", "histogram_quantile(0.9, sum by (le, group, phase)",
		`sum by (le, image_kind) (rate(prebake_instance_phase_seconds_bucket{group=~"$group",phase="node_ready"}`,
		`phase="pod_running"`, "sum by (group, reason) (increase(prebake_image_fallback_total",
		"sum by (class, code) (increase(prebake_instance_create_errors_total",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no query contains %q", want)
		}
	}
}

// The checks can fail: each broken dashboard is refused with its reason.
func TestDashboardCheckCatchesBrokenDashboards(t *testing.T) {
	t.Parallel()
	good := string(DashboardJSON)
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown field", `"schemaVersion": 39`, `"schemaVersion": 39, "style": "dark"`, `unknown field "style"`},
		{"old schema", `"schemaVersion": 39`, `"schemaVersion": 27`, "schemaVersion 27"},
		{"duplicate id", `"id": 2,`, `"id": 1,`, "id must be positive and unique"},
		{"overlap", `"x": 12,
        "y": 0`, `"x": 6,
        "y": 0`, "overlaps panel 1"},
		{"off the grid", `"w": 8,`, `"w": 30,`, "off the 24-column grid"},
		{"fixed datasource", `"uid": "${datasource}"`, `"uid": "P1809F7CD0C75ACF3"`, "want a query on ${datasource}"},
		{"undefined variable", `{group=~\"$group\"}[$__rate_interval]`, `{group=~\"$node\"}[$__rate_interval]`, "variable $node is not defined"},
		{"unclosed", `sum by (group) (increase(`, `sum by (group (increase(`, `unclosed "("`},
		{"unbalanced", `[$__range]))`, `[$__range])})`, `unbalanced '}'`},
		{"trailing data", "", "{}", "data after the JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			broken := good + tc.new
			if tc.old != "" {
				if !strings.Contains(good, tc.old) {
					t.Fatalf("the dashboard no longer contains %q: update the case", tc.old)
				}
				broken = strings.Replace(good, tc.old, tc.new, 1)
			}
			_, err := LoadDashboard([]byte(broken))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
