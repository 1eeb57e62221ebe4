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
	inst := c.byProviderID[providerID]
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
