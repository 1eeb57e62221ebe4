package hcloud

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake/builderssh"
	"github.com/prebake-dev/prebake/providers/providertest"
)

const testToken = "test-token"

// newTestProvider returns a provider over f, with retries fast (or off, when
// retries < 0) and pacing out of the way.
func newTestProvider(t *testing.T, f *hcloudfake.Fake, retries int) *Provider {
	t.Helper()
	p, err := New(Options{
		Token: testToken, Endpoint: f.URL(), Cluster: "c", PollInterval: time.Millisecond,
		RetryBase: time.Millisecond, MaxRetries: retries, Rate: 1000, Burst: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newFake(t *testing.T, o hcloudfake.Options) *hcloudfake.Fake {
	t.Helper()
	o.Token = testToken
	f := hcloudfake.New(o)
	t.Cleanup(f.Close)
	return f
}

func TestConformance(t *testing.T) {
	// Standbys are reached over SSH: every fake has a stand-in sshd playing
	// them, and every provider the standby login key (a restarted one too).
	key := loginKey(t)
	var clouds sync.Map // providers.Provider → *hcloudfake.Fake
	var sshds sync.Map  // *hcloudfake.Fake → *builderssh.Sshd
	build := func(t *testing.T, f *hcloudfake.Fake) providers.Provider {
		sshd, loaded := sshds.LoadOrStore(f, builderssh.NewShell(f, builderssh.NewStandby().Shell))
		if !loaded {
			t.Cleanup(sshd.(*builderssh.Sshd).Close)
		}
		p, err := New(Options{
			Token: testToken, Endpoint: f.URL(), Cluster: "c", PollInterval: time.Millisecond,
			RetryBase: time.Millisecond, MaxRetries: -1, Rate: 1000, Burst: 1000,
			StandbySSHKey: key, BuilderDial: sshd.(*builderssh.Sshd).Dial,
		})
		if err != nil {
			t.Fatal(err)
		}
		clouds.Store(providers.Provider(p), f)
		return p
	}
	failing := func(e hcloudfake.APIError) func(t *testing.T) providers.Provider {
		return func(t *testing.T) providers.Provider {
			f := newFake(t, hcloudfake.Options{})
			f.Fail(http.MethodPost, "/servers", 1, e)
			return build(t, f)
		}
	}
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(t *testing.T) providers.Provider {
			return build(t, newFake(t, hcloudfake.Options{}))
		},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			f, ok := clouds.Load(p)
			if !ok {
				t.Fatal("Reopen of a provider this test did not build")
			}
			return build(t, f.(*hcloudfake.Fake))
		},
		CreateErrors: []providertest.CreateErrorCase[*testing.T]{
			{Name: "resource_unavailable", New: failing(hcloudfake.ErrResourceUnavailable), Class: providers.ErrorOutOfResources},
			{Name: "create_server_failed", New: func(t *testing.T) providers.Provider {
				f := newFake(t, hcloudfake.Options{})
				f.FailAction("create_server", 1, hcloudfake.ErrActionUnknown)
				return build(t, f)
			}, Class: providers.ErrorOther},
			{Name: "sold_out", New: func(t *testing.T) providers.Provider {
				f := newFake(t, hcloudfake.Options{})
				f.SoldOut("cx22", "fsn1", true)
				return build(t, f)
			}, Class: providers.ErrorOutOfResources},
			{Name: "resource_limit_exceeded", New: failing(hcloudfake.ErrResourceLimitExceeded), Class: providers.ErrorOutOfResources},
			{Name: "placement_error", New: failing(hcloudfake.ErrPlacement), Class: providers.ErrorOutOfResources},
			{Name: "rate_limit_exceeded", New: failing(hcloudfake.ErrRateLimited), Class: providers.ErrorOther, Retryable: true},
			{Name: "server_error", New: failing(hcloudfake.ErrServerError), Class: providers.ErrorOther, Retryable: true},
			{Name: "unavailable", New: failing(hcloudfake.ErrUnavailable), Class: providers.ErrorOther, Retryable: true},
			{Name: "invalid_input", New: failing(hcloudfake.APIError{Status: 400, Code: "invalid_input", Message: "bad"}), Class: providers.ErrorOther},
		},
		Cluster:        "c",
		MachineType:    "cx22",
		Location:       "fsn1",
		Parallel:       12,
		ResumeUserData: joinUserData(t, "conf-s-stopped", "", "k3x9qa.m2c8v0rty5b7n1zq"),
	})
}
