package fake

import (
	"testing"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Setup{
		New:         func(*testing.T) providers.Provider { return New() },
		Cluster:     "c",
		MachineType: "m1",
		Location:    "z1",
	})
}
