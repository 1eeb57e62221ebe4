package kwok

import (
	"errors"
	"fmt"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kubeapi"
)

// capacityError is a simulated stockout: the zone holds Options.Capacity
// machines already.
type capacityError struct {
	zone  string
	limit int
}

func (e *capacityError) Error() string {
	return fmt.Sprintf("zone %q is full: it holds at most %d machines (simulated stockout, set by the kwok provider's capacity); try another zone or group", e.zone, e.limit)
}

// Classify implements providers.Provider.
func (p *Provider) Classify(err error) providers.Classification {
	var capErr *capacityError
	if err == nil {
		return providers.Classification{}
	}
	if errors.As(err, &capErr) {
		return providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_unavailable"}
	}
	if c, ok := kubeapi.Classify(err); ok {
		return c
	}
	return providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
}
