package kwok

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/providers"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), nil)
	nodes := schema.GroupResource{Resource: "nodes"}
	var (
		full      = providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_unavailable"}
		timeout   = providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}
		throttled = providers.Classification{Class: providers.ErrorOther, Code: "api_429", Retryable: true}
		server    = providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}
		failed    = providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
	)
	tests := []struct {
		name string
		err  error
		want providers.Classification
	}{
		{name: "nil", err: nil, want: providers.Classification{}},
		{name: "capacity", err: &capacityError{zone: "z", limit: 1}, want: full},
		{name: "wrapped capacity", err: fmt.Errorf("create: %w", &capacityError{zone: "z"}), want: full},
		{name: "deadline", err: fmt.Errorf("create: %w", context.DeadlineExceeded), want: timeout},
		{name: "504", err: apierrors.NewTimeoutError("x", 1), want: timeout},
		{name: "server timeout", err: apierrors.NewServerTimeout(nodes, "create", 1), want: timeout},
		{name: "net timeout", err: &net.OpError{Op: "dial", Err: timeoutErr{}}, want: timeout},
		{name: "429", err: apierrors.NewTooManyRequests("x", 1), want: throttled},
		{name: "wrapped 429", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", apierrors.NewTooManyRequests("x", 1))), want: throttled},
		{name: "500", err: apierrors.NewInternalError(errors.New("x")), want: server},
		{name: "503", err: apierrors.NewServiceUnavailable("x"), want: server},
		{name: "502", err: apierrors.NewGenericServerResponse(502, "create", nodes, "n", "bad gateway", 0, true), want: server},
		{name: "not found", err: apierrors.NewNotFound(nodes, "n"), want: failed},
		{name: "forbidden", err: apierrors.NewForbidden(nodes, "n", errors.New("rbac")), want: failed},
		{name: "unknown machine type", err: fmt.Errorf("x: %w", providers.ErrNotFound), want: failed},
		{name: "canceled", err: context.Canceled, want: failed},
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

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
