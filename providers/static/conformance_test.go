package static

import (
	"errors"
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

// TestConformance runs the suite over the fake clientset and a fake shell;
// the same provider over real sshd and a real API server is tested in
// system_test.go and race_test.go.
func TestConformance(t *testing.T) {
	type cloud struct {
		client kubernetes.Interface
		shell  Shell
	}
	var clouds sync.Map // providers.Provider → cloud
	const poolSize = 16 // the suite's parallel case makes 8, the restart case 3
	build := func(t *testing.T, c cloud, machines []Machine) providers.Provider {
		t.Helper()
		p := newTestProvider(t, c.client, c.shell, machines, func(o *Options) { o.Cluster = "c"; o.Now = nil })
		clouds.Store(providers.Provider(p), c)
		return p
	}
	failingShell := func(err error) func(t *testing.T) providers.Provider {
		return func(t *testing.T) providers.Provider {
			sh := newFakeShell()
			for _, m := range pool(poolSize) {
				sh.failHost(m.Host, err)
			}
			return build(t, cloud{fake.NewClientset(), sh}, pool(poolSize))
		}
	}
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(t *testing.T) providers.Provider {
			return build(t, cloud{fake.NewClientset(), newFakeShell()}, pool(poolSize))
		},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			c, ok := clouds.Load(p)
			if !ok {
				t.Fatal("Reopen of a provider this test did not build")
			}
			return build(t, c.(cloud), pool(poolSize))
		},
		CreateErrors: []providertest.CreateErrorCase[*testing.T]{
			{
				Name: "pool has no machine of the type",
				New: func(t *testing.T) providers.Provider {
					ms := pool(2)
					for i := range ms {
						ms[i].MachineType = "metal-large"
					}
					return build(t, cloud{fake.NewClientset(), newFakeShell()}, ms)
				},
				Class: providers.ErrorOutOfResources,
			},
			{
				Name: "every machine claimed by another cluster",
				New: func(t *testing.T) providers.Provider {
					client := fake.NewClientset()
					other := newTestProvider(t, client, newFakeShell(), pool(2), func(o *Options) { o.Cluster = "other" })
					for _, name := range []string{"o-1", "o-2"} {
						req := request(name, "g")
						req.Cluster = "other"
						if _, err := other.Create(t.Context(), req); err != nil {
							t.Fatal(err)
						}
					}
					return build(t, cloud{client, newFakeShell()}, pool(2))
				},
				Class: providers.ErrorOutOfResources,
			},
			{
				Name: "api 500",
				New: func(t *testing.T) providers.Provider {
					c := fake.NewClientset()
					c.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewInternalError(errors.New("injected by the conformance test"))
					})
					return build(t, cloud{c, newFakeShell()}, pool(poolSize))
				},
				Class: providers.ErrorOther, Retryable: true,
			},
			{
				Name:  "ssh unreachable",
				New:   failingShell(&DialError{Host: "h", Addr: "192.0.2.1:22", Err: errors.New("connection refused")}),
				Class: providers.ErrorOther, Retryable: true,
			},
			{
				Name:  "host key mismatch",
				New:   failingShell(&HostKeyError{Host: "h", Addr: "192.0.2.1:22", KnownHosts: "kh", Mismatch: true}),
				Class: providers.ErrorOther,
			},
			{
				Name:  "bootstrap fails",
				New:   failingShell(&CommandError{Host: "h", Status: 1}),
				Class: providers.ErrorOther,
			},
		},
		Cluster:     "c",
		MachineType: testType,
		Location:    testZone,
	})
}
