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
	if inst.isStandby() {
		// A standby never has a Node; one that does joined (its marker
		// outlived its take): it is a node of its group from now on.
		c.log.Error("warm pool: a standby's machine registered a Node; it is a node of its group now", "group", g.spec.ID, "providerID", providerID, "node", name)
		inst.standby, inst.parking, inst.adopted = providers.StandbyNone, false, true
	}
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

// InstanceTimeline is what the core saw of one instance on its way up, on
// this process's clock. A zero time was not observed (yet).
type InstanceTimeline struct {
	Group     string
	ImageKind providers.ImageKind
	// Image is the catalog image the machine boots ("" for runtime install).
	Image string
	// Adopted instances were found by List, not requested by this process
	// (it restarted since): their timeline is unknown, every time is zero.
	Adopted bool
	// FromWarmPool: the machine was a warm-pool standby IncreaseSize took
	// and resumed; Requested is when it was taken, Accepted when Resume
	// returned.
	FromWarmPool bool
	// Requested is when IncreaseSize recorded the instance; Accepted when
	// the provider's Create returned; Running when a List first said
	// running (or its Node registered); Registered and Ready when the Node
	// watch first saw the Node and saw it Ready; PodRunning when the first
	// pod on the Node was seen Running.
	Requested, Accepted, Running, Registered, Ready, PodRunning time.Time
}

// Timeline returns the moments the core observed for the instance with this
// providerID; ok is false for one it does not know. It is what the Node
// watch copies onto the Node, so the timeline outlives this process.
func (c *Core) Timeline(providerID string) (InstanceTimeline, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	inst := c.index.byID(providerID)
	if inst == nil {
		return InstanceTimeline{}, false
	}
	t := InstanceTimeline{Group: inst.group.spec.ID, ImageKind: inst.imageKind, Image: inst.image, Adopted: inst.adopted, FromWarmPool: inst.fromPool}
	if inst.adopted {
		return t, true
	}
	t.Requested, t.Accepted, t.Running = inst.requestedAt, inst.acceptedAt, inst.runningAt
	t.Registered, t.Ready, t.PodRunning = inst.registeredAt, inst.readyAt, inst.podRunningAt
	return t, true
}

// ObservePodRunning feeds the timeline's last phase: the first pod on the
// Node of this providerID was seen Running. Later calls, adopted and unknown
// instances are ignored.
func (c *Core) ObservePodRunning(providerID string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inst := c.index.byID(providerID)
	if inst == nil || inst.adopted || !inst.podRunningAt.IsZero() {
		return
	}
	inst.podRunningAt = at
	c.metrics.observePhase(inst.group.spec.ID, inst.imageKind, phasePodRunning, at.Sub(inst.requestedAt))
}

// BootstrapPhase is one phase of the node script as the node reported it.
type BootstrapPhase struct {
	Name string
	// Result is ok, skipped or failed.
	Result   string
	Duration time.Duration
}

// ObserveBootstrap records the node script's report of the machine with this
// providerID (its phases and the whole script's duration) in the bootstrap
// histograms, once per instance. Adopted and unknown instances are ignored:
// a restarted plugin would count their boots twice.
func (c *Core) ObserveBootstrap(providerID string, phases []BootstrapPhase, total time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inst := c.index.byID(providerID)
	if inst == nil || inst.adopted || inst.bootstrapSeen {
		return
	}
	inst.bootstrapSeen = true
	g, kind := inst.group.spec.ID, inst.imageKind
	for _, p := range phases {
		c.metrics.observeBootstrap(g, kind, p.Name, p.Result, p.Duration)
	}
	c.metrics.observeBootstrap(g, kind, "total", "ok", total)
}
