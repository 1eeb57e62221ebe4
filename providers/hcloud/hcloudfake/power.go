package hcloudfake

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// A server's power, as the API's server actions move it
// (https://docs.hetzner.cloud/reference/cloud#server-actions):
//
//	running --poweroff or shutdown--> off (when the action ends)
//	off     --poweron-->  starting (while the action runs) --> running
//
// poweroff cuts the power; shutdown sends an ACPI request, which the
// fake's guest honours unless IgnoreACPI says otherwise: the action then
// succeeds and the server runs on, as the API reference says of an OS that
// does not react to it. Powering on a running server, or off an off
// one, is an action that changes nothing. While another action of the
// server runs (its creation, a power action, create_image), a power action
// is refused with 423 and error code locked ("Item is locked (Another
// action is running)", hcloud-go's ErrorCodeLocked; the status is the one
// its retry tests use for it, hcloud/client_handler_retry_test.go). An
// action made to fail (FailAction) leaves the power as it was.

// powerCommands maps the action path to the action's command.
var powerCommands = map[string]string{
	"poweroff": "stop_server",
	"shutdown": "shutdown_server",
	"poweron":  "start_server",
}

// ErrLocked is the API's answer to an action on a server that has one
// running.
var ErrLocked = APIError{Status: http.StatusLocked, Code: "locked", Message: "server is locked: there is already an action running"}

// busy reports whether an action of server id runs.
func (f *Fake) busy(id int64) bool {
	for _, a := range f.actions {
		if a.schema.Status == "running" && slices.ContainsFunc(a.schema.Resources, func(r schema.ActionResourceReference) bool {
			return r.Type == "server" && r.ID == id
		}) {
			return true
		}
	}
	return false
}

// powerServer answers poweroff, shutdown and poweron.
func (f *Fake) powerServer(w http.ResponseWriter, id int64, verb string, now time.Time) {
	s, ok := f.servers[id]
	if !ok || !s.deleteAt.IsZero() {
		notFound(w)
		return
	}
	if f.busy(id) {
		writeError(w, APIError{Status: ErrLocked.Status, Code: ErrLocked.Code, Message: fmt.Sprintf("server %d is locked: there is already an action running", id)})
		return
	}
	on := verb == "poweron"
	a := f.newAction(powerCommands[verb], now, schema.ActionResourceReference{ID: id, Type: "server"})
	if on && !s.started {
		s.poweringOn = true
	}
	a.onDone = func(failed bool) {
		s.poweringOn = false
		if !failed && !(verb == "shutdown" && s.ignoresACPI) {
			s.started = on
		}
	}
	f.settle(now)
	writeJSON(w, http.StatusCreated, schema.ServerActionPoweronResponse{Action: a.schema})
}

// IgnoreACPI makes server id's OS ignore a shutdown request: its action
// succeeds and the server keeps running.
func (f *Fake) IgnoreACPI(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.servers[id]; s != nil {
		s.ignoresACPI = true
	}
}
