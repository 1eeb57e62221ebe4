package hcloudfake

import (
	"net/http"
	"strings"
	"time"
)

// APIError is an error answer of the API: the HTTP status and the body's
// error.code, error.message and, for invalid_input, error.details.fields.
type APIError struct {
	Status  int
	Code    string
	Message string
	Fields  []FieldError
}

// FieldError is one entry of an invalid_input error's details.fields: the
// field and what is wrong with it.
type FieldError struct {
	Name     string   `json:"name"`
	Messages []string `json:"messages"`
}

// The errors prebake must tell apart, with the statuses the real API uses.
var (
	ErrRateLimited           = APIError{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", Message: "limit of 3600 requests per hour reached"}
	ErrServerError           = APIError{Status: http.StatusInternalServerError, Code: "server_error", Message: "error within the API backend"}
	ErrUnavailable           = APIError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "service unavailable"}
	ErrResourceUnavailable   = APIError{Status: http.StatusForbidden, Code: "resource_unavailable", Message: "server type currently unavailable in this location"}
	ErrResourceLimitExceeded = APIError{Status: http.StatusForbidden, Code: "resource_limit_exceeded", Message: "server limit exceeded"}
	ErrPlacement             = APIError{Status: http.StatusPreconditionFailed, Code: "placement_error", Message: "no suitable host found for placement group"}
)

// fault is one injected failure: the next Times requests matching Method and
// Path fail with Err.
type fault struct {
	method, path string
	times        int
	err          APIError
}

func (f fault) matches(r *http.Request) bool {
	if f.method != "" && f.method != r.Method {
		return false
	}
	return f.path == "" || r.URL.Path == f.path || strings.HasPrefix(r.URL.Path, strings.TrimSuffix(f.path, "/")+"/")
}

// Fail makes the next n requests with this method (any if "") whose path is
// path or below it (any if "") fail with err. Faults queue: the oldest that
// matches is used first. A 429 carries the RateLimit headers with
// RateLimit-Remaining 0.
func (f *Fake) Fail(method, path string, n int, err APIError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &fault{method: method, path: path, times: n, err: err})
}

// takeFault consumes and returns the first fault matching r. f.mu is held.
func (f *Fake) takeFault(r *http.Request) (APIError, bool) {
	for i, ft := range f.faults {
		if !ft.matches(r) {
			continue
		}
		ft.times--
		if ft.times <= 0 {
			f.faults = append(f.faults[:i], f.faults[i+1:]...)
		}
		return ft.err, true
	}
	return APIError{}, false
}

// SetActionDelay changes how long new actions run before they succeed:
// slow actions.
func (f *Fake) SetActionDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opts.ActionDelay = d
}
