package fake

import (
	"testing"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(*testing.T) providers.Provider { return New() },
		// The fake's memory is its cloud: a restart can't be told apart
		// from the same object, so the restart case is left to the real
		// providers.
		CreateErrors: []providertest.CreateErrorCase[*testing.T]{
			{Name: "capacity", New: func(*testing.T) providers.Provider {
				p := New()
				p.SetCapacity(0)
				return p
			}, Class: providers.ErrorOutOfResources},
			{Name: "transient", New: func(*testing.T) providers.Provider {
				p := New()
				p.InjectCreateErrors(ErrTransient)
				return p
			}, Class: providers.ErrorOther, Retryable: true},
		},
		Cluster:     "c",
		MachineType: "m1",
		Location:    "z1",
	})
}

// TestConformanceWithWarmPool runs the suite over a fake that parks
// standbys, so the suite's standby case checks Park and Resume.
func TestConformanceWithWarmPool(t *testing.T) {
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(*testing.T) providers.Provider {
			p := New()
			p.Standby = []providers.StandbyState{providers.StandbyStopped}
			return p
		},
		Cluster:     "c",
		MachineType: "m1",
		Location:    "z1",
	})
}
