package hcloudfake

import (
	"fmt"
	"net/http"
	"slices"
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
// ErrResourceUnavailable is what the API answers when the server type is
// sold out in the location (a 412 resource_unavailable "error during
// placement", as captured in jenkinsci/hetzner-cloud-plugin#21); it is also
// what POST /servers answers for a type SoldOut marks.
var (
	ErrRateLimited           = APIError{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", Message: "limit of 3600 requests per hour reached"}
	ErrServerError           = APIError{Status: http.StatusInternalServerError, Code: "server_error", Message: "error within the API backend"}
	ErrUnavailable           = APIError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "service unavailable"}
	ErrResourceUnavailable   = APIError{Status: http.StatusPreconditionFailed, Code: "resource_unavailable", Message: "error during placement"}
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

// ActionError is how a failed action ends: its error.code and
// error.message.
type ActionError struct {
	Code    string
	Message string
}

// ErrActionUnknown is the failure reports of failed server actions show
// ("action 273224989 failed: Unknown Error (unknown_error)",
// terraform-provider-hcloud#483).
var ErrActionUnknown = ActionError{Code: "unknown_error", Message: "Unknown Error"}

type actionFault struct {
	command string
	times   int
	err     ActionError
}

// FailAction makes the next n actions with this command (such as
// "create_server", "start_server", "create_image"; any if "") end in
// status "error" with err when they finish, instead of "success". The
// request that starts one is answered as usual. A create_server that fails
// leaves its server behind, off; a create_image that fails leaves no image.
// Faults queue like Fail's.
func (f *Fake) FailAction(command string, n int, err ActionError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actionFails = append(f.actionFails, &actionFault{command: command, times: n, err: err})
}

// takeActionFault consumes and returns the first action fault matching
// command. f.mu is held.
func (f *Fake) takeActionFault(command string) *ActionError {
	for i, ft := range f.actionFails {
		if ft.command != "" && ft.command != command {
			continue
		}
		ft.times--
		if ft.times <= 0 {
			f.actionFails = append(f.actionFails[:i], f.actionFails[i+1:]...)
		}
		e := ft.err
		return &e
	}
	return nil
}

// SetActionDelay changes how long new actions run before they succeed:
// slow actions.
func (f *Fake) SetActionDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opts.ActionDelay = d
}

// SoldOut marks serverType as sold out (or, with soldOut false, back in
// stock) in location, as Hetzner does when it runs out of hosts: the server
// type and datacenter lists show it unavailable there, and POST /servers
// answers ErrResourceUnavailable. It panics on a type or location the fake
// does not sell, a test's mistake.
func (f *Fake) SoldOut(serverType, location string, soldOut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	found := false
	var typeID int64
	for i := range f.serverTypes {
		t := &f.serverTypes[i]
		if t.Name != serverType {
			continue
		}
		for j := range t.Locations {
			if t.Locations[j].Name == location {
				t.Locations[j].Available, found, typeID = !soldOut, true, t.ID
			}
		}
	}
	if !found {
		panic(fmt.Sprintf("hcloudfake: SoldOut: server type %q is not sold in %q", serverType, location))
	}
	for i := range f.datacenters {
		dc := &f.datacenters[i]
		if dc.Location.Name != location || dc.ServerTypes == nil {
			continue
		}
		dc.ServerTypes.Available = slices.DeleteFunc(dc.ServerTypes.Available, func(id int64) bool { return id == typeID })
		if !soldOut {
			dc.ServerTypes.Available = append(dc.ServerTypes.Available, typeID)
		}
	}
}
