package static

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/providers"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), newFakeShell(), pool(1), nil)
	leases := coordinationv1.Resource("leases")
	var (
		full     = providers.Classification{Class: providers.ErrorOutOfResources, Code: "no_free_machine"}
		hostKey  = providers.Classification{Class: providers.ErrorOther, Code: "ssh_host_key"}
		cmdFail  = providers.Classification{Class: providers.ErrorOther, Code: "command_failed"}
		unreach  = providers.Classification{Class: providers.ErrorOther, Code: "ssh_unreachable", Retryable: true}
		timeout  = providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}
		conflict = providers.Classification{Class: providers.ErrorOther, Code: "claim_conflict", Retryable: true}
		api429   = providers.Classification{Class: providers.ErrorOther, Code: "api_429", Retryable: true}
		api5xx   = providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}
		failed   = providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
	)
	tests := []struct {
		name string
		err  error
		want providers.Classification
	}{
		{name: "nil", err: nil, want: providers.Classification{}},
		{name: "pool dry", err: fmt.Errorf("x: %w", &noFreeMachineError{fitting: 3}), want: full},
		{name: "host key", err: fmt.Errorf("x: %w", &HostKeyError{Mismatch: true}), want: hostKey},
		{name: "script failed", err: fmt.Errorf("x: %w", &CommandError{Status: 1}), want: cmdFail},
		{name: "unreachable", err: fmt.Errorf("x: %w", &DialError{Err: errors.New("refused")}), want: unreach},
		{name: "dial timeout wins over unreachable", err: &DialError{Err: context.DeadlineExceeded}, want: unreach},
		{name: "script timeout", err: fmt.Errorf("machine: %w", context.DeadlineExceeded), want: timeout},
		{name: "conflict", err: apierrors.NewConflict(leases, "h", errors.New("changed")), want: conflict},
		{name: "429", err: apierrors.NewTooManyRequests("x", 1), want: api429},
		{name: "500", err: apierrors.NewInternalError(errors.New("x")), want: api5xx},
		{name: "503", err: apierrors.NewServiceUnavailable("x"), want: api5xx},
		{name: "forbidden", err: apierrors.NewForbidden(leases, "h", errors.New("rbac")), want: failed},
		{name: "plain", err: errors.New("boom"), want: failed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, p.Classify(tc.err)); diff != "" {
				t.Errorf("Classify(%v) (-want +got):\n%s", tc.err, diff)
			}
		})
	}
}
