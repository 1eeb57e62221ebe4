package kwok

import (
	"context"
	"errors"
	"fmt"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/prebake-dev/prebake/providers"
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
	var netErr net.Error
	switch {
	case err == nil:
		return providers.Classification{}
	case errors.As(err, &capErr):
		return providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_unavailable"}
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}
	case apierrors.IsTooManyRequests(err):
		return providers.Classification{Class: providers.ErrorOther, Code: "api_429", Retryable: true}
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), isServerError(err):
		return providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}
	}
	return providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
}

func isServerError(err error) bool {
	var s apierrors.APIStatus
	return errors.As(err, &s) && s.Status().Code >= 500
}
