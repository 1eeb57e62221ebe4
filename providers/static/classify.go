package static

import (
	"context"
	"errors"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/prebake-dev/prebake/providers"
)

// Classify implements providers.Provider.
func (p *Provider) Classify(err error) providers.Classification {
	var (
		noFree  *noFreeMachineError
		hostKey *HostKeyError
		dial    *DialError
		cmdErr  *CommandError
		netErr  net.Error
	)
	switch {
	case err == nil:
		return providers.Classification{}
	case errors.As(err, &noFree):
		return providers.Classification{Class: providers.ErrorOutOfResources, Code: "no_free_machine"}
	case errors.As(err, &hostKey):
		// Retrying can't fix a key mismatch: a person must check the machine.
		return providers.Classification{Class: providers.ErrorOther, Code: "ssh_host_key"}
	case errors.As(err, &cmdErr):
		return providers.Classification{Class: providers.ErrorOther, Code: "command_failed"}
	case errors.As(err, &dial):
		return providers.Classification{Class: providers.ErrorOther, Code: "ssh_unreachable", Retryable: true}
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}
	case apierrors.IsConflict(err):
		return providers.Classification{Class: providers.ErrorOther, Code: "claim_conflict", Retryable: true}
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
