package kwok

import (
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/providertest"
)

func TestConformance(t *testing.T) {
	// clients maps each provider to its cluster, so Reopen can build a
	// second provider over the same cluster, as a restarted plugin would.
	var clients sync.Map // providers.Provider → kubernetes.Interface
	build := func(t *testing.T, o Options) providers.Provider {
		t.Helper()
		o.Cluster = "c"
		p, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		clients.Store(providers.Provider(p), o.Client)
		return p
	}
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(t *testing.T) providers.Provider {
			return build(t, Options{Client: fake.NewClientset()})
		},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			c, ok := clients.Load(p)
			if !ok {
				t.Fatal("Reopen of a provider this test did not build")
			}
			return build(t, Options{Client: c.(kubernetes.Interface)})
		},
		CreateErrors: []providertest.CreateErrorCase[*testing.T]{
			{
				Name: "zone full",
				New: func(t *testing.T) providers.Provider {
					return build(t, Options{Client: fake.NewClientset(), Capacity: map[string]int{"zone-a": 0}})
				},
				Class: providers.ErrorOutOfResources,
			},
			{
				Name: "api 500",
				New: func(t *testing.T) providers.Provider {
					c := fake.NewClientset()
					c.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewInternalError(errInjected)
					})
					return build(t, Options{Client: c})
				},
				Class: providers.ErrorOther, Retryable: true,
			},
		},
		Cluster:     "c",
		MachineType: "kwok-small",
		Location:    "zone-a",
	})
}

type injectedError struct{}

func (injectedError) Error() string { return "injected by the conformance test" }

var errInjected error = injectedError{}
