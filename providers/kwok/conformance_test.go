package kwok

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Setup{
		New: func(t *testing.T) providers.Provider {
			p, err := New(Options{Client: fake.NewClientset(), Cluster: "c"})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Cluster:     "c",
		MachineType: "kwok-small",
		Location:    "zone-a",
	})
}
