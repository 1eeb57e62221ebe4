package hcloud

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers"
)

// Classify implements providers.Provider. Capacity, limit and placement
// errors are OutOfResources, so CA fails over to another group; rate
// limits, 5xx, timeouts and locked servers are retryable; a resume that
// failed on the standby (SSH, its host key, its join) has a code of its
// own; the rest is Other.
func (p *Provider) Classify(err error) providers.Classification {
	var apiErr hcloud.Error
	var netErr net.Error
	var actionErr *createActionError
	var standbyErr *standbyError
	switch {
	case err == nil:
		return providers.Classification{}
	case errors.As(err, &standbyErr):
		// A resume that failed on the standby's side (standby.go): the core
		// replaces the standby with a created machine.
		return providers.Classification{Class: providers.ErrorOther, Code: standbyErr.code}
	case errors.As(err, &actionErr):
		// The API accepted the server and its create_server action failed.
		// Capacity codes keep their class; anything else is one stable code.
		if isOutOfResources(hcloud.ErrorCode(actionErr.action.Code)) {
			return providers.Classification{Class: providers.ErrorOutOfResources, Code: actionErr.action.Code}
		}
		return providers.Classification{Class: providers.ErrorOther, Code: "create_server_failed"}
	case errors.As(err, &apiErr):
		code := string(apiErr.Code)
		if isOutOfResources(apiErr.Code) {
			return providers.Classification{Class: providers.ErrorOutOfResources, Code: code}
		}
		switch apiErr.Code {
		case hcloud.ErrorCodeRateLimitExceeded, hcloud.ErrorCodeServerError, hcloud.ErrorCodeServiceError,
			hcloud.ErrorCodeMaintenance, hcloud.ErrorCodeConflict, hcloud.ErrorCodeLocked, hcloud.ErrorCodeBadGateway,
			hcloud.ErrorCodeTimeout, hcloud.ErrorCodeRobotUnavailable, "unavailable":
			return providers.Classification{Class: providers.ErrorOther, Code: code, Retryable: true}
		}
		if resp := apiErr.Response(); resp != nil && resp.Response != nil && resp.StatusCode >= 500 {
			return providers.Classification{Class: providers.ErrorOther, Code: code, Retryable: true}
		}
		if code == "" {
			code = "create_failed"
		}
		return providers.Classification{Class: providers.ErrorOther, Code: code}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}
	case errors.Is(err, hcloud.ErrStatusCode):
		// A body that was not an API error: a 502 or 504 from a proxy, say.
		var se *statusError
		switch {
		case errors.As(err, &se) && se.status == http.StatusTooManyRequests:
			return providers.Classification{Class: providers.ErrorOther, Code: "rate_limit_exceeded", Retryable: true}
		case errors.As(err, &se) && se.status >= 500:
			return providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}
		}
		return providers.Classification{Class: providers.ErrorOther, Code: "http_error"}
	}
	return providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
}

// isOutOfResources reports the codes that mean no capacity or limit left
// for this group: CA fails over to another one.
func isOutOfResources(c hcloud.ErrorCode) bool {
	switch c {
	case hcloud.ErrorCodeResourceUnavailable, hcloud.ErrorCodeResourceLimitExceeded, hcloud.ErrorCodePlacementError:
		return true
	}
	return false
}

// statusError carries the HTTP status of a response that was not an API
// error body.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// wrapStatus attaches the response status to err when the body was not an
// API error, so Classify can tell a 4xx from a 5xx.
func wrapStatus(err error, resp *hcloud.Response) error {
	if err == nil || !errors.Is(err, hcloud.ErrStatusCode) || resp == nil || resp.Response == nil {
		return err
	}
	return &statusError{status: resp.StatusCode, err: err}
}
