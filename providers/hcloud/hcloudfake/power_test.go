package hcloudfake

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"
)

// poweroff and poweron are actions that complete; the server is off once
// poweroff's ends, starting while poweron's runs and running after. A
// power action that changes nothing still succeeds; one while another
// action of the server runs is 423 locked; a failed action leaves the
// power as it was.
func TestPowerOffAndOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, client, clk := newFake(t, Options{ActionDelay: 5 * time.Second})
	res, _, err := client.Server.Create(ctx, createOpts("p1", nil))
	if err != nil {
		t.Fatal(err)
	}
	srv := res.Server
	status := func() string {
		t.Helper()
		s, _, err := client.Server.GetByID(ctx, srv.ID)
		if err != nil {
			t.Fatal(err)
		}
		return string(s.Status)
	}
	var got []string
	note := func(what string) { got = append(got, what+":"+status()) }
	act := func(what string, call func() (*hcloud.Action, *hcloud.Response, error), command string) *hcloud.Action {
		t.Helper()
		a, _, err := call()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if a.Command != command || a.Status != hcloud.ActionStatusRunning {
			t.Errorf("%s: action %s %s, want %s running", what, a.Command, a.Status, command)
		}
		note(what)
		return a
	}
	poweroff := func() (*hcloud.Action, *hcloud.Response, error) { return client.Server.Poweroff(ctx, srv) }
	poweron := func() (*hcloud.Action, *hcloud.Response, error) { return client.Server.Poweron(ctx, srv) }

	// The create action runs: the server is locked.
	if _, _, err := client.Server.Poweroff(ctx, srv); !hcloud.IsError(err, hcloud.ErrorCodeLocked) {
		t.Errorf("poweroff while the server is created: %v, want locked", err)
	}
	clk.Advance(5 * time.Second)
	note("created")
	act("poweroff", poweroff, "stop_server")
	if _, _, err := client.Server.Poweron(ctx, srv); !hcloud.IsError(err, hcloud.ErrorCodeLocked) {
		t.Errorf("poweron while poweroff runs: %v, want locked", err)
	}
	clk.Advance(5 * time.Second)
	note("+5s")
	a := act("poweroff again", poweroff, "stop_server")
	clk.Advance(5 * time.Second)
	if a, _, err := client.Action.GetByID(ctx, a.ID); err != nil || a.Status != hcloud.ActionStatusSuccess {
		t.Errorf("a poweroff of an off server: %v %v, want success", a, err)
	}
	note("+5s")
	act("poweron", poweron, "start_server")
	clk.Advance(5 * time.Second)
	note("+5s")
	act("poweron again", poweron, "start_server")
	clk.Advance(5 * time.Second)
	note("+5s")
	act("poweroff", poweroff, "stop_server")
	clk.Advance(5 * time.Second)
	f.FailAction("start_server", 1, ActionError{Code: "action_failed", Message: "host unavailable"})
	act("failing poweron", poweron, "start_server")
	clk.Advance(5 * time.Second)
	note("+5s")
	want := []string{"created:running",
		"poweroff:running", "+5s:off",
		"poweroff again:off", "+5s:off",
		"poweron:starting", "+5s:running",
		"poweron again:running", "+5s:running",
		"poweroff:running",
		"failing poweron:starting", "+5s:off",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	if _, _, err := client.Server.Poweron(ctx, &hcloud.Server{ID: 999999}); !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		t.Errorf("poweron of a missing server: %v, want not_found", err)
	}
}
