package gce

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/prebake-dev/prebake/providers"
)

// isOutOfResources reports whether an operation error code means "no
// capacity or no quota here", so CA backs the group off and fails over to
// another one. The set is the one CA's own GCE provider classes as
// OutOfResourcesErrorClass (GetErrorInfo in
// cluster-autoscaler/cloudprovider/gce/autoscaling_gce_client.go, tag
// cluster-autoscaler-1.36.1): the three resource-pool stockout codes,
// INSUFFICIENT_CAPACITY, and every code that contains QUOTA (QUOTA_EXCEEDED,
// REGION_QUOTA_EXCEEDED, …). Codes CA classes as Other (IP_SPACE_EXHAUSTED,
// PERMISSIONS_ERROR, the reservation errors) stay Other here too. Unlike CA,
// the code reported is the API's own, not CA's normalised one, so a
// ZONE_RESOURCE_POOL_EXHAUSTED stays visible as such in the metrics.
func isOutOfResources(code string) bool {
	switch code {
	case "RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
		"INSUFFICIENT_CAPACITY":
		return true
	}
	return strings.Contains(code, "QUOTA")
}

// OperationError is an operation that ended DONE with errors: how the API
// reports stockouts, quota and most insert failures.
type OperationError struct {
	Operation string
	// Codes are error.errors[].code, such as ZONE_RESOURCE_POOL_EXHAUSTED.
	Codes    []string
	Messages []string
	// HTTPStatus is httpErrorStatusCode; 0 when absent.
	HTTPStatus int
}

func (e *OperationError) Error() string {
	var b strings.Builder
	b.WriteString("operation " + e.Operation + " failed")
	if e.HTTPStatus != 0 {
		b.WriteString(" (HTTP " + strconv.Itoa(e.HTTPStatus) + ")")
	}
	for i, c := range e.Codes {
		b.WriteString(": " + c)
		if i < len(e.Messages) && e.Messages[i] != "" {
			b.WriteString(" " + e.Messages[i])
		}
	}
	return b.String()
}

// operationError returns the error of a DONE operation, nil if it has none.
func operationError(op *computepb.Operation) error {
	errs := op.GetError().GetErrors()
	if len(errs) == 0 {
		return nil
	}
	e := &OperationError{Operation: op.GetName(), HTTPStatus: int(op.GetHttpErrorStatusCode())}
	for _, x := range errs {
		e.Codes = append(e.Codes, x.GetCode())
		e.Messages = append(e.Messages, x.GetMessage())
	}
	return e
}

// Classify implements providers.Provider. Stockout and quota operation
// errors are OutOfResources; rate limits (429, 403 rateLimitExceeded), 5xx
// and timeouts are retryable; the rest is Other.
func (p *Provider) Classify(err error) providers.Classification {
	return classify(err)
}

func classify(err error) providers.Classification {
	var opErr *OperationError
	var apiErr *googleapi.Error
	var netErr net.Error
	var foreign *foreignError
	var tooLarge *userDataTooLargeError
	switch {
	case err == nil:
		return providers.Classification{}
	case errors.As(err, &opErr):
		for _, c := range opErr.Codes {
			if isOutOfResources(c) {
				return providers.Classification{Class: providers.ErrorOutOfResources, Code: c}
			}
		}
		code := "OPERATION_FAILED"
		if len(opErr.Codes) > 0 && opErr.Codes[0] != "" {
			code = opErr.Codes[0]
		}
		return providers.Classification{Class: providers.ErrorOther, Code: code,
			Retryable: opErr.HTTPStatus >= 500 || code == "INTERNAL_ERROR"}
	case errors.As(err, &apiErr):
		reason := ""
		if len(apiErr.Errors) > 0 {
			reason = apiErr.Errors[0].Reason
		}
		switch {
		case apiErr.Code == http.StatusTooManyRequests, reason == "rateLimitExceeded", reason == "userRateLimitExceeded":
			return providers.Classification{Class: providers.ErrorOther, Code: "rateLimitExceeded", Retryable: true}
		case reason == "alreadyExists":
			// The name (or its disk's) is taken but get did not show the
			// instance: a concurrent insert won the race. A retry finds it.
			return providers.Classification{Class: providers.ErrorOther, Code: reason, Retryable: true}
		case apiErr.Code >= 500:
			return providers.Classification{Class: providers.ErrorOther, Code: "api_" + strconv.Itoa(apiErr.Code), Retryable: true}
		case reason != "":
			return providers.Classification{Class: providers.ErrorOther, Code: reason}
		}
		return providers.Classification{Class: providers.ErrorOther, Code: "http_" + strconv.Itoa(apiErr.Code)}
	case errors.As(err, &foreign):
		return providers.Classification{Class: providers.ErrorOther, Code: "foreign_instance"}
	case errors.As(err, &tooLarge):
		return providers.Classification{Class: providers.ErrorOther, Code: "user_data_too_large"}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}
	}
	return providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
}

// isNotFound reports a 404 answer.
func isNotFound(err error) bool {
	var apiErr *googleapi.Error
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusNotFound
}

// isConflict reports a 409 answer (alreadyExists).
func isConflict(err error) bool {
	var apiErr *googleapi.Error
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusConflict
}

// isPreconditionFailed reports a 412 answer (a stale fingerprint).
func isPreconditionFailed(err error) bool {
	var apiErr *googleapi.Error
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusPreconditionFailed
}
