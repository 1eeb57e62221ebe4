package autoscaling

import (
	"context"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

// NodeClient is the core's narrow view of the workload cluster's Nodes.
type NodeClient interface {
	// DeleteNode deletes a Node object; a missing Node is not an error.
	DeleteNode(ctx context.Context, name string) error
}

// ObserveNode feeds the timeline from the workload cluster: a Node with
// this providerID registered (exists) and, if ready, turned Ready. The node
// watcher calls it on every add and update. Unknown providerIDs are
// ignored.
func (c *Core) ObserveNode(name, providerID string, ready bool, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodeNames[providerID] = name
	inst := c.index.byID(providerID)
	if inst == nil {
		return
	}
	g := inst.group
	if inst.registeredAt.IsZero() {
		inst.registeredAt = at
		if inst.state != providers.StateRunning && inst.phase == phaseAccepted {
			// A registered node's machine is running, whatever the last
			// List said.
			inst.state = providers.StateRunning
			if inst.runningAt.IsZero() {
				inst.runningAt = at
				if !inst.adopted {
					c.metrics.observePhase(g.spec.ID, inst.imageKind, phaseRunning, at.Sub(inst.requestedAt))
				}
			}
		}
		if !inst.adopted {
			c.metrics.observePhase(g.spec.ID, inst.imageKind, phaseNodeRegistered, at.Sub(inst.requestedAt))
			if c.rendersUserData(g) {
				c.revokeJoinTokensLater(inst.name)
			}
		}
	}
	if ready && inst.readyAt.IsZero() {
		inst.readyAt = at
		if !inst.adopted {
			c.metrics.observePhase(g.spec.ID, inst.imageKind, phaseNodeReady, at.Sub(inst.requestedAt))
		}
	}
}

// ForgetNode drops the name mapping of a deleted Node.
func (c *Core) ForgetNode(providerID string) {
	c.mu.Lock()
	delete(c.nodeNames, providerID)
	c.mu.Unlock()
}

// joinTokenRevokeTimeout bounds one revocation.
const joinTokenRevokeTimeout = 30 * time.Second

// revokeJoinTokensLater revokes the join tokens made for machine, off the
// caller's path. Once its Node registered, the kubelet holds a client
// certificate of its own; the token, which anyone on the machine can read
// from the cloud's metadata service, must not stay valid for the rest of its
// hour. A failure is logged: the token still expires by itself.
func (c *Core) revokeJoinTokensLater(machine string) {
	r, ok := c.opts.UserData.(JoinTokenRevoker)
	run := c.runCtx.Load()
	if !ok || run == nil {
		return
	}
	ctx := *run
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, joinTokenRevokeTimeout)
		defer cancel()
		n, err := r.RevokeJoinTokens(ctx, machine)
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.Warn("join token not revoked after the node registered; it expires by itself", "instance", machine, "err", err)
		case n > 0:
			c.metrics.joinTokensRevoked.Add(float64(n))
			c.log.Info("join token revoked: the node registered", "instance", machine, "tokens", n)
		}
	})
}
