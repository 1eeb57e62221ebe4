package nodetimeline

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The metrics of `prebake serve` the report reads (autoscaling/metrics.go).
const (
	MetricPhaseSeconds     = "prebake_instance_phase_seconds"
	MetricBootstrapSeconds = "prebake_bootstrap_phase_seconds"
	MetricCreateErrors     = "prebake_instance_create_errors_total"
	MetricFallbacks        = "prebake_image_fallback_total"
	MetricRequested        = "prebake_instances_requested_total"
)

// Metrics is what prebake's /metrics says: every instance since the process started, the
// ones whose Nodes are gone included. Quantiles are estimates from the histogram buckets
// (linear within a bucket, as Prometheus' histogram_quantile does).
type Metrics struct {
	Source string `json:"source"`
	// Requested is the instances requested through IncreaseSize.
	Requested float64        `json:"requested"`
	Phases    []MetricsPhase `json:"phases"`
	// CreateErrors counts creations that failed for good by CA error class; Fallbacks the
	// machines of groups with a channel that installed at runtime, by reason.
	CreateErrors map[string]float64 `json:"createErrors"`
	Fallbacks    map[string]float64 `json:"fallbacks"`
}

// MetricsPhase is one histogram series, summed over what its labels don't name.
type MetricsPhase struct {
	Metric    string  `json:"metric"`
	Group     string  `json:"group"`
	ImageKind string  `json:"imageKind"`
	Phase     string  `json:"phase"`
	Result    string  `json:"result,omitempty"`
	Count     uint64  `json:"count"`
	P50S      float64 `json:"p50Seconds"`
	P90S      float64 `json:"p90Seconds"`
}

// ParseMetrics reads prebake's /metrics text; source names where it came from.
func ParseMetrics(r io.Reader, source string) (*Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("%s: not Prometheus text: %w", source, err)
	}
	if fams[MetricPhaseSeconds] == nil && fams[MetricRequested] == nil {
		return nil, fmt.Errorf("%s: no %s or %s: is this prebake serve's /metrics (its --http-listen)?", source, MetricPhaseSeconds, MetricRequested)
	}
	m := &Metrics{Source: source, CreateErrors: map[string]float64{}, Fallbacks: map[string]float64{}}
	for _, s := range fams[MetricRequested].GetMetric() {
		m.Requested += s.GetCounter().GetValue()
	}
	for _, s := range fams[MetricCreateErrors].GetMetric() {
		m.CreateErrors[label(s, "class")] += s.GetCounter().GetValue()
	}
	for _, s := range fams[MetricFallbacks].GetMetric() {
		m.Fallbacks[label(s, "reason")] += s.GetCounter().GetValue()
	}
	for _, name := range []string{MetricPhaseSeconds, MetricBootstrapSeconds} {
		for _, s := range fams[name].GetMetric() {
			h := s.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			m.Phases = append(m.Phases, MetricsPhase{
				Metric: name, Group: label(s, "group"), ImageKind: label(s, "image_kind"), Phase: label(s, "phase"), Result: label(s, "result"),
				Count: h.GetSampleCount(), P50S: bucketQuantile(h, 0.5), P90S: bucketQuantile(h, 0.9),
			})
		}
	}
	slices.SortFunc(m.Phases, func(a, b MetricsPhase) int {
		return cmp.Or(strings.Compare(a.Metric, b.Metric), strings.Compare(a.Group, b.Group), strings.Compare(a.ImageKind, b.ImageKind),
			cmp.Compare(phaseOrder(a.Phase), phaseOrder(b.Phase)), strings.Compare(a.Phase, b.Phase), strings.Compare(a.Result, b.Result))
	})
	return m, nil
}

// phaseOrder puts the timeline's phases in the order they happen.
func phaseOrder(p string) int {
	if i := slices.Index([]string{"api_accepted", "running", "node_registered", "node_ready", "pod_running"}, p); i >= 0 {
		return i
	}
	return 100
}

func label(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// bucketQuantile estimates the q-quantile of a histogram: linear within the bucket the rank
// falls in; the highest finite bound when it falls in +Inf.
func bucketQuantile(h *dto.Histogram, q float64) float64 {
	rank := q * float64(h.GetSampleCount())
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		upper, count := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if math.IsInf(upper, 1) {
			return lower
		}
		if count >= rank {
			if count == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(count-below)
		}
		lower, below = upper, count
	}
	return lower
}

func writeMetrics(w io.Writer, m *Metrics, md bool, heading func(string)) {
	heading("prebake's own metrics since it started")
	fmt.Fprintf(w, "From %s: every instance prebake served since it started, the nodes gone since included, not limited to the window. "+
		"Quantiles are estimates from the histogram's buckets (each about 1.8 times the one below). %.0f instances requested.\n\n", m.Source, m.Requested)
	t := &table{md: md}
	t.add("METRIC", "GROUP", "IMAGE KIND", "PHASE", "N", "P50", "P90")
	for _, p := range m.Phases {
		phase := p.Phase
		if p.Result != "" && p.Result != "ok" {
			phase += " (" + p.Result + ")"
		}
		t.add(p.Metric, p.Group, p.ImageKind, phase, fmt.Sprint(p.Count), fmtMs(p.P50S*1000), fmtMs(p.P90S*1000))
	}
	_ = t.write(w)
	counts := func(what string, by map[string]float64) {
		if len(by) == 0 {
			fmt.Fprintf(w, "%s: none.\n", what)
			return
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(by)) {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, by[k]))
		}
		fmt.Fprintf(w, "%s: %s.\n", what, strings.Join(parts, ", "))
	}
	counts("Creation errors by class", m.CreateErrors)
	counts("Runtime-install fallbacks by reason", m.Fallbacks)
	fmt.Fprintln(w)
}

// ScrapeMetrics reads prebake serve's /metrics at url (its --http-listen address, e.g.
// through kubectl port-forward).
func ScrapeMetrics(ctx context.Context, url string) (*Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url: %w (reach prebake's --http-listen port, e.g. kubectl -n kube-system port-forward deploy/prebake 8087)", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--metrics-url %s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body, url)
}
