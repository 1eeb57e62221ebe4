package gce

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
	"github.com/prebake-dev/prebake/providers/providertest"
)

const testZone = "europe-west4-a"

// newTestProvider returns a provider over f, with pacing out of the way.
func newTestProvider(t *testing.T, f *gcefake.Fake) *Provider {
	t.Helper()
	p, err := New(context.Background(), Options{
		Project: f.Project(), Endpoint: f.URL(), Cluster: "c", Rate: 1000, Burst: 1000,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newFake(t *testing.T, o gcefake.Options) *gcefake.Fake {
	t.Helper()
	f := gcefake.New(o)
	t.Cleanup(f.Close)
	return f
}

func TestConformance(t *testing.T) {
	t.Parallel()
	var clouds sync.Map // providers.Provider → *gcefake.Fake
	build := func(t *testing.T, f *gcefake.Fake) providers.Provider {
		p := newTestProvider(t, f)
		clouds.Store(providers.Provider(p), f)
		return p
	}
	failing := func(e gcefake.Fault) func(t *testing.T) providers.Provider {
		return func(t *testing.T) providers.Provider {
			f := newFake(t, gcefake.Options{})
			f.Fail(http.MethodPost, "zones/"+testZone+"/instances", 1, e)
			return build(t, f)
		}
	}
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(t *testing.T) providers.Provider {
			return build(t, newFake(t, gcefake.Options{}))
		},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			f, ok := clouds.Load(p)
			if !ok {
				t.Fatal("Reopen of a provider this test did not build")
			}
			return build(t, f.(*gcefake.Fake))
		},
		CreateErrors: []providertest.CreateErrorCase[*testing.T]{
			{Name: "ZONE_RESOURCE_POOL_EXHAUSTED", New: failing(gcefake.ErrZoneResourcePoolExhausted), Class: providers.ErrorOutOfResources},
			{Name: "QUOTA_EXCEEDED", New: failing(gcefake.ErrQuotaExceeded), Class: providers.ErrorOutOfResources},
			// Codes CA's GCE provider also classes as out of resources.
			{Name: "INSUFFICIENT_CAPACITY", New: failing(gcefake.Fault{OpCode: "INSUFFICIENT_CAPACITY", OpHTTPStatus: http.StatusServiceUnavailable, Message: "insufficient capacity"}), Class: providers.ErrorOutOfResources},
			{Name: "RESOURCE_POOL_EXHAUSTED", New: failing(gcefake.Fault{OpCode: "RESOURCE_POOL_EXHAUSTED", OpHTTPStatus: http.StatusServiceUnavailable, Message: "pool exhausted"}), Class: providers.ErrorOutOfResources},
			{Name: "rateLimitExceeded_403", New: failing(gcefake.ErrRateLimited403), Class: providers.ErrorOther, Retryable: true},
			{Name: "rateLimitExceeded_429", New: failing(gcefake.ErrRateLimited429), Class: providers.ErrorOther, Retryable: true},
			{Name: "backendError_500", New: failing(gcefake.ErrBackend), Class: providers.ErrorOther, Retryable: true},
			{Name: "unavailable_503", New: failing(gcefake.ErrUnavailable), Class: providers.ErrorOther, Retryable: true},
			{Name: "invalid_400", New: failing(gcefake.ErrInvalid), Class: providers.ErrorOther},
		},
		Cluster:     "c",
		MachineType: "e2-standard-2",
		Location:    testZone,
		Parallel:    12,
	})
}
