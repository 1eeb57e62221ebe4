package static

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kubeapi"
)

// Classify implements providers.Provider.
func (p *Provider) Classify(err error) providers.Classification {
	var (
		noFree  *noFreeMachineError
		hostKey *HostKeyError
		dial    *DialError
		cmdErr  *CommandError
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
	case apierrors.IsConflict(err):
		return providers.Classification{Class: providers.ErrorOther, Code: "claim_conflict", Retryable: true}
	}
	if c, ok := kubeapi.Classify(err); ok {
		return c
	}
	return providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
}
