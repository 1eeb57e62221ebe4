// Package kubeapi holds what the providers whose "cloud" is a Kubernetes
// cluster (kwok's machine records, static's claims) share: how an API
// server's errors map to CA's error classes, and creating the namespace
// their Leases live in.
package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/providers"
)

// Classify maps an API server or network error to CA's classes: timeouts,
// 429 and 5xx are retryable Other. ok is false for any other error, which
// the provider classifies itself.
func Classify(err error) (c providers.Classification, ok bool) {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		errors.As(err, &netErr) && netErr.Timeout():
		return providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}, true
	case apierrors.IsTooManyRequests(err):
		return providers.Classification{Class: providers.ErrorOther, Code: "api_429", Retryable: true}, true
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), isServerError(err):
		return providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}, true
	}
	return providers.Classification{}, false
}

func isServerError(err error) bool {
	var s apierrors.APIStatus
	return errors.As(err, &s) && s.Status().Code >= 500
}

// EnsureNamespace creates namespace unless it exists; created says whether
// this call made it. what names its use in the error.
func EnsureNamespace(ctx context.Context, client kubernetes.Interface, namespace, what string) (created bool, err error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	_, err = client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create namespace %q for the %s: %w", namespace, what, err)
	}
	return true, nil
}
