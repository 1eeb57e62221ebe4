package hcloud

import (
	"context"
	"fmt"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
)

// Powering a server off and on, for warm-pool standbys: Park stops one,
// Resume starts it again (standby.go).

// shutdownGrace bounds how long stopServer waits for a graceful shutdown
// before it cuts the power.
const shutdownGrace = 2 * time.Minute

// stopServer brings server id to off. First shutdown: an ACPI request, so
// the OS writes back what it holds (a standby's packages were just
// installed) and halts. Its action ends when the request is sent, not when
// the server is off, and an OS that ignores ACPI never stops (Hetzner API
// reference, "Shutdown a Server"), so the status is polled every poll; a
// server not off within grace gets poweroff, which cuts the power and is
// off when its action ends. An off server is left as it is.
func (p *Provider) stopServer(ctx context.Context, id int64, grace, poll time.Duration) error {
	s, err := p.serverByID(ctx, id)
	if err != nil || s.Status == hcloud.ServerStatusOff {
		return err
	}
	a, _, err := p.client.Server.Shutdown(ctx, s)
	if err == nil {
		err = p.client.Action.WaitFor(ctx, a)
	}
	if err != nil {
		return fmt.Errorf("hcloud: shut server %d down: %w", id, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if s, err = p.serverByID(ctx, id); err != nil || s.Status == hcloud.ServerStatusOff {
			return err
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("hcloud: server %d did not shut down (status %s): %w", id, s.Status, ctx.Err())
		case <-t.C:
		}
	}
	p.log.Warn("hcloud: server ignored the ACPI shutdown; cutting its power", "server", id, "grace", grace)
	a, _, err = p.client.Server.Poweroff(ctx, s)
	if err == nil {
		err = p.client.Action.WaitFor(ctx, a)
	}
	if err != nil {
		return fmt.Errorf("hcloud: power server %d off: %w", id, err)
	}
	return nil
}

// startServer powers server id on and waits for the action; a running
// server is left as it is.
func (p *Provider) startServer(ctx context.Context, id int64) error {
	s, err := p.serverByID(ctx, id)
	if err != nil || s.Status == hcloud.ServerStatusRunning {
		return err
	}
	a, _, err := p.client.Server.Poweron(ctx, s)
	if err == nil {
		err = p.client.Action.WaitFor(ctx, a)
	}
	if err != nil {
		return fmt.Errorf("hcloud: power server %d on: %w", id, err)
	}
	return nil
}

func (p *Provider) serverByID(ctx context.Context, id int64) (*hcloud.Server, error) {
	s, _, err := p.client.Server.GetByID(ctx, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("hcloud: get server %d: %w", id, err)
	case s == nil:
		return nil, fmt.Errorf("hcloud: server %d is gone", id)
	}
	return s, nil
}
