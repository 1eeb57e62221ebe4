package hcloud

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/providerid"
)

// stopServer shuts a server down gracefully and cuts the power only when
// its OS ignores the ACPI request for the grace period; startServer powers
// it on; neither touches a server already where it should be.
func TestStopAndStartServer(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	p := newTestProvider(t, f, 0)
	ctx := context.Background()
	server := func(name string) (int64, string) {
		t.Helper()
		in, err := p.Create(ctx, request(name, "g"))
		if err != nil {
			t.Fatal(err)
		}
		id, err := providerid.Parse(in.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		return id, fmt.Sprint(id)
	}
	status := func(id int64) hcloud.ServerStatus {
		t.Helper()
		s, err := p.serverByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return s.Status
	}
	calls := func(id string) string {
		return fmt.Sprintf("shutdown=%d poweroff=%d poweron=%d",
			f.Calls(http.MethodPost, "/servers/"+id+"/actions/shutdown"),
			f.Calls(http.MethodPost, "/servers/"+id+"/actions/poweroff"),
			f.Calls(http.MethodPost, "/servers/"+id+"/actions/poweron"))
	}

	polite, politeID := server("g-polite")
	if err := p.stopServer(ctx, polite, time.Minute, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := p.stopServer(ctx, polite, time.Minute, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := calls(politeID); status(polite) != hcloud.ServerStatusOff || got != "shutdown=1 poweroff=0 poweron=0" {
		t.Errorf("graceful stop: %s, %s", status(polite), got)
	}
	if err := p.startServer(ctx, polite); err != nil {
		t.Fatal(err)
	}
	if err := p.startServer(ctx, polite); err != nil {
		t.Fatal(err)
	}
	if got := calls(politeID); status(polite) != hcloud.ServerStatusRunning || got != "shutdown=1 poweroff=0 poweron=1" {
		t.Errorf("start: %s, %s", status(polite), got)
	}

	deaf, deafID := server("g-deaf")
	f.IgnoreACPI(deaf)
	if err := p.stopServer(ctx, deaf, 50*time.Millisecond, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := calls(deafID); status(deaf) != hcloud.ServerStatusOff || got != "shutdown=1 poweroff=1 poweron=0" {
		t.Errorf("stop of a server that ignores ACPI: %s, %s", status(deaf), got)
	}
}
