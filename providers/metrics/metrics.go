// Package metrics is a providers.Provider decorator that counts and times
// every cloud API call, so no provider sprinkles metrics through its code.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prebake-dev/prebake/providers"
)

// APIMetrics are the provider API call metrics.
type APIMetrics struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

// NewAPIMetrics registers the metrics with reg.
func NewAPIMetrics(reg prometheus.Registerer) *APIMetrics {
	m := &APIMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_provider_api_calls_total",
			Help: "Provider API calls by provider, method and outcome (ok or the error code from Classify).",
		}, []string{"provider", "method", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "prebake_provider_api_seconds",
			Help:    "Latency of provider API calls.",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 120, 20),
		}, []string{"provider", "method"}),
	}
	reg.MustRegister(m.calls, m.seconds)
	return m
}

// Wrap returns p with every call to the cloud measured: List, Create,
// Delete, MachineType, Park and Resume. It implements exactly providers.Provider (the rest
// is p's, unmeasured), so nothing can tell the wrapped provider has an
// optional method it lacks.
func Wrap(p providers.Provider, m *APIMetrics) providers.Provider {
	return &measured{Provider: p, m: m}
}

type measured struct {
	providers.Provider
	m *APIMetrics
}

func (w *measured) observe(method string, start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		outcome = w.Provider.Classify(err).Code
		if outcome == "" {
			outcome = "error"
		}
	}
	name := w.Provider.Name()
	w.m.calls.WithLabelValues(name, method, outcome).Inc()
	w.m.seconds.WithLabelValues(name, method).Observe(time.Since(start).Seconds())
}

func (w *measured) List(ctx context.Context) ([]providers.Instance, error) {
	start := time.Now()
	out, err := w.Provider.List(ctx)
	w.observe("List", start, err)
	return out, err
}

func (w *measured) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	start := time.Now()
	out, err := w.Provider.Create(ctx, req)
	w.observe("Create", start, err)
	return out, err
}

func (w *measured) Delete(ctx context.Context, providerID string) error {
	start := time.Now()
	err := w.Provider.Delete(ctx, providerID)
	w.observe("Delete", start, err)
	return err
}

func (w *measured) MachineType(ctx context.Context, name, location string) (providers.MachineType, error) {
	start := time.Now()
	out, err := w.Provider.MachineType(ctx, name, location)
	w.observe("MachineType", start, err)
	return out, err
}

func (w *measured) Park(ctx context.Context, providerID string, state providers.StandbyState) error {
	start := time.Now()
	err := w.Provider.Park(ctx, providerID, state)
	w.observe("Park", start, err)
	return err
}

func (w *measured) Resume(ctx context.Context, providerID string, userData []byte) (providers.Instance, error) {
	start := time.Now()
	out, err := w.Provider.Resume(ctx, providerID, userData)
	w.observe("Resume", start, err)
	return out, err
}
