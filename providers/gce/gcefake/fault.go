package gcefake

import (
	"net/http"
	"strings"
)

// Fault is one injected failure. With HTTPStatus set the request is answered
// with that HTTP error (Reason is errors[].reason); otherwise the request
// (an insert) is accepted and its operation ends DONE with error.errors[]
// carrying OpCode, as the real API reports stockouts and quota.
type Fault struct {
	HTTPStatus int
	Reason     string
	Message    string

	OpCode string
	// OpHTTPStatus is the operation's httpErrorStatusCode.
	OpHTTPStatus int
}

// The failures prebake must tell apart, in the shapes the real API uses.
var (
	ErrZoneResourcePoolExhausted = Fault{OpCode: "ZONE_RESOURCE_POOL_EXHAUSTED", OpHTTPStatus: http.StatusServiceUnavailable,
		Message: "The zone 'projects/prebake-test/zones/europe-west4-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."}
	ErrQuotaExceeded = Fault{OpCode: "QUOTA_EXCEEDED", OpHTTPStatus: http.StatusForbidden,
		Message: "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west4."}
	ErrRateLimited403 = Fault{HTTPStatus: http.StatusForbidden, Reason: "rateLimitExceeded", Message: "Rate Limit Exceeded"}
	ErrRateLimited429 = Fault{HTTPStatus: http.StatusTooManyRequests, Reason: "rateLimitExceeded", Message: "Rate Limit Exceeded"}
	ErrBackend        = Fault{HTTPStatus: http.StatusInternalServerError, Reason: "backendError", Message: "Internal error. Please try again or contact Google Support."}
	ErrUnavailable    = Fault{HTTPStatus: http.StatusServiceUnavailable, Reason: "backendError", Message: "The service is currently unavailable."}
	ErrInvalid        = Fault{HTTPStatus: http.StatusBadRequest, Reason: "invalid", Message: "Invalid value for field 'resource.name'."}
)

type fault struct {
	method, path string
	times        int
	f            Fault
}

// Fail makes the next n requests with this method (any if "") whose path,
// relative to /compute/v1/projects/<project>/, is path or below it (any if
// ""), fail with ft. For example Fail("POST", "zones/europe-west4-a/instances",
// 1, ErrZoneResourcePoolExhausted). Faults queue: the oldest that matches is
// used first. An operation fault on a request that makes no operation is
// ignored.
func (f *Fake) Fail(method, path string, n int, ft Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &fault{method: method, path: strings.Trim(path, "/"), times: n, f: ft})
}

// takeFault consumes and returns the first fault matching. f.mu is held.
func (f *Fake) takeFault(method, path string) (Fault, bool) {
	for i, ft := range f.faults {
		if ft.method != "" && ft.method != method {
			continue
		}
		if ft.path != "" && path != ft.path && !strings.HasPrefix(path, ft.path+"/") {
			continue
		}
		ft.times--
		if ft.times <= 0 {
			f.faults = append(f.faults[:i], f.faults[i+1:]...)
		}
		return ft.f, true
	}
	return Fault{}, false
}
