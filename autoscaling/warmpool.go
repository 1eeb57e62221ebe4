package autoscaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

// WarmPool is a group's pool of standby machines (docs/warm-pool.md):
// booted, bootstrapped up to just before the join, then parked. IncreaseSize
// takes a parked standby before it creates a machine.
type WarmPool struct {
	// Size is the most standbys the group keeps; 0 keeps none (and deletes
	// any a larger pool left).
	Size int
	// State is how a standby rests: one of the provider's
	// Capabilities.Standby.
	State providers.StandbyState
	// WarmingTimeout bounds how long a standby may stay warming (created,
	// its prepared report not seen yet) before it is deleted and replaced:
	// one whose report never comes would otherwise hold a slot of the pool,
	// and a machine, for good. 0 means DefaultWarmingTimeout.
	WarmingTimeout time.Duration
}

// DefaultWarmingTimeout is WarmPool.WarmingTimeout when it is 0: a cloud VM
// boots and runs the prepare-only script in a few minutes.
const DefaultWarmingTimeout = 10 * time.Minute

// warmingTimeout is wp.WarmingTimeout with its default applied.
func (wp WarmPool) warmingTimeout() time.Duration {
	if wp.WarmingTimeout == 0 {
		return DefaultWarmingTimeout
	}
	return wp.WarmingTimeout
}

// Reasons a standby is discarded, the values of the reason label of
// prebake_warm_pool_discarded_total. They are stable.
const (
	// DiscardStaleImage: the standby's image is no longer its channel's
	// head (a promote or a rollback); it is replaced, never resumed.
	DiscardStaleImage = "stale_image"
	// DiscardFailed: its provider lists it as failed (its prepare-only
	// script failed, or it halted).
	DiscardFailed = "failed"
	// DiscardCreateFailed: its creation failed; nothing was made.
	DiscardCreateFailed = "create_failed"
	// DiscardSurplus: the pool is larger than warmPool.size, or than the
	// room maxSize leaves beside the group's target.
	DiscardSurplus = "surplus"
	// DiscardWarmingTimeout: it stayed warming longer than
	// warmPool.warmingTimeout (its prepared report never came).
	DiscardWarmingTimeout = "warming_timeout"
)

func (i *instance) isStandby() bool { return i.standby != providers.StandbyNone }

// checkWarmPool is New's check of a group's warm pool against what its
// provider declares.
func (c *Core) checkWarmPool(g *group) error {
	wp := g.spec.WarmPool
	switch {
	case wp.Size < 0:
		return fmt.Errorf("node group %q: warmPool.size %d is negative; use 0 (no pool) or more", g.spec.ID, wp.Size)
	case wp.Size == 0:
		return nil
	case wp.Size > g.spec.MaxSize:
		return fmt.Errorf("node group %q: warmPool.size %d is more than maxSize %d: standbys count toward maxSize; lower warmPool.size", g.spec.ID, wp.Size, g.spec.MaxSize)
	case wp.WarmingTimeout < 0:
		return fmt.Errorf("node group %q: warmPool.warmingTimeout %s is negative; use more than 0, or 0 for %s", g.spec.ID, wp.WarmingTimeout, DefaultWarmingTimeout)
	}
	caps := g.provider.Capabilities()
	if !caps.Parks(wp.State) {
		can := "it can't park machines at all"
		if len(caps.Standby) > 0 {
			var states []string
			for _, s := range caps.Standby {
				states = append(states, string(s))
			}
			can = "it parks them " + strings.Join(states, " or ")
		}
		return fmt.Errorf("node group %q: warmPool.state %q: provider %s can't keep standbys %s (%s); remove warmPool or use another state",
			g.spec.ID, wp.State, g.provider.Name(), wp.State, can)
	}
	if !c.rendersUserData(g) {
		return fmt.Errorf("node group %q: warmPool needs the user-data prebake renders (the bootstrap block, no userDataFile): a standby is prepared by one script and joins with another", g.spec.ID)
	}
	return nil
}

// poolHeadLocked is the image a new machine of g would boot: a standby on
// another image is stale. known is false while the channel does not
// resolve (no catalog yet, an ambiguous channel): no standby is judged
// then.
func (c *Core) poolHeadLocked(g *group) (image string, known bool) {
	if g.spec.ImageChannel == "" {
		return "", true
	}
	image, _, fb, _ := c.resolveImage(g)
	return image, fb == nil
}

// takeStandbysLocked takes up to n parked standbys of g on the current
// image, oldest first, into the target: each becomes a queued instance
// whose create task resumes it (Resume, with user-data rendered for it)
// instead of creating a machine.
func (c *Core) takeStandbysLocked(g *group, n int, now time.Time) []*instance {
	head, known := c.poolHeadLocked(g)
	var parked []*instance
	for _, inst := range g.instances {
		if inst.standby == providers.StandbyParked && inst.phase == phaseAccepted && inst.err == nil &&
			(!known || inst.image == head) {
			parked = append(parked, inst)
		}
	}
	slices.SortFunc(parked, func(a, b *instance) int {
		if d := a.acceptedAt.Compare(b.acceptedAt); d != 0 {
			return d
		}
		return strings.Compare(a.name, b.name)
	})
	taken := parked[:min(n, len(parked))]
	for _, inst := range taken {
		inst.standby = providers.StandbyNone
		inst.resume, inst.fromPool, inst.adopted = true, true, false
		inst.phase, inst.state, inst.err = phaseQueued, providers.StateCreating, nil
		// Its timeline starts now, at CA's request, as a created machine's.
		inst.requestedAt, inst.acceptedAt, inst.runningAt = now, time.Time{}, time.Time{}
		if inst.imageKind == "" {
			inst.imageKind = g.imageKind
		}
		inst.req = c.createRequest(g, inst.name, inst.image, inst.imageKind)
		inst.family = c.familyOf(g, inst.image)
	}
	return taken
}

// returnStandbyLocked puts a taken standby whose resume has not started
// back into the pool (DecreaseTargetSize cancelled it).
func returnStandbyLocked(inst *instance) {
	inst.standby = providers.StandbyParked
	inst.resume, inst.fromPool = false, false
	inst.phase = phaseAccepted
}

// resumeFallbackLocked is a failed resume: the standby leaves the target
// (the caller deletes it) and a machine created afresh takes its place in
// the same scale-up, its timeline counted from the same request.
func (c *Core) resumeFallbackLocked(inst *instance) *instance {
	inst.phase = phaseDeleting
	inst.resume = false
	repl := c.newInstanceLocked(inst.group, inst.requestedAt)
	return repl
}

// poolActions are what tending one group's pool decided, carried out
// after c.mu is released.
type poolActions struct {
	creates, deletes, parks []*instance
}

// standbyRank orders standbys by how soon they can serve: parked, prepared,
// warming (being created included).
func standbyRank(i *instance) int {
	switch {
	case i.phase != phaseAccepted:
		return 0
	case i.standby == providers.StandbyParked:
		return 3
	case i.standby == providers.StandbyPrepared:
		return 2
	}
	return 1
}

// discardLocked takes a standby out of the pool for reason; it returns
// whether a cloud delete must follow.
func (c *Core) discardLocked(inst *instance, reason string) bool {
	id := inst.group.spec.ID
	c.metrics.poolDiscarded.WithLabelValues(id, reason).Inc()
	c.log.Info("warm pool: standby discarded", "group", id, "instance", inst.name, "providerID", inst.providerID, "reason", reason, "image", inst.image)
	return c.cancelLocked(inst)
}

// trimPoolLocked discards g's standbys beyond min(warmPool.size, maxSize -
// target), keeping those closest to serving, and returns the ones kept.
func (c *Core) trimPoolLocked(g *group, a *poolActions) []*instance {
	var pool []*instance
	for _, inst := range g.instances {
		if inst.isStandby() && inst.phase != phaseDeleting && !(inst.phase == phaseFailed && !inst.inCloud) {
			pool = append(pool, inst)
		}
	}
	room := g.poolRoomLocked()
	if len(pool) <= room {
		return pool
	}
	// Keep the ones closest to serving; among equals the older.
	slices.SortFunc(pool, func(a, b *instance) int {
		if d := standbyRank(b) - standbyRank(a); d != 0 {
			return d
		}
		return a.requestedAt.Compare(b.requestedAt)
	})
	for _, inst := range pool[room:] {
		if c.discardLocked(inst, DiscardSurplus) {
			a.deletes = append(a.deletes, inst)
		}
	}
	return pool[:room]
}

// poolRoomLocked is how many standbys g may hold now: warmPool.size, less
// what maxSize leaves beside the target.
func (g *group) poolRoomLocked() int {
	return max(0, min(g.spec.WarmPool.Size, g.spec.MaxSize-g.targetLocked()))
}

// warmingTooLongLocked reports whether inst, a standby in the cloud, has
// been warming longer than its group's warmPool.warmingTimeout, and for
// how long.
func warmingTooLongLocked(inst *instance, now time.Time) (bool, time.Duration) {
	if inst.standby != providers.StandbyWarming || inst.phase != phaseAccepted || inst.warmingSince.IsZero() {
		return false, 0
	}
	d := now.Sub(inst.warmingSince)
	return d > inst.group.spec.WarmPool.warmingTimeout(), d
}

// tendPoolLocked decides what g's pool needs: discard what is stale,
// failed or warming too long, trim what is surplus, park what is
// prepared, and create standbys up to poolRoomLocked. It changes only the
// core's records; the caller queues the cloud calls.
func (c *Core) tendPoolLocked(g *group, now time.Time, a *poolActions) {
	head, known := c.poolHeadLocked(g)
	createFailed := false
	for _, inst := range g.instances {
		if !inst.isStandby() || inst.phase == phaseDeleting {
			continue
		}
		reason := ""
		tooLong, warmed := warmingTooLongLocked(inst, now)
		switch {
		case inst.phase == phaseFailed && !inst.inCloud:
			createFailed, reason = true, DiscardCreateFailed
		case inst.err != nil:
			reason = DiscardFailed
		case known && inst.image != head && inst.phase != phaseQueued && inst.phase != phaseCreating:
			reason = DiscardStaleImage
		case tooLong:
			// Replaced in this round: unlike a failed create, the next
			// attempt can't fail fast, it takes a whole warmingTimeout.
			reason = DiscardWarmingTimeout
			c.log.Warn("warm pool: standby still warming after warmPool.warmingTimeout; deleting it and creating another (its console or node script status says why it never reported prepared)",
				"group", g.spec.ID, "instance", inst.name, "providerID", inst.providerID,
				"warming", warmed.Round(time.Second), "warmingTimeout", g.spec.WarmPool.warmingTimeout())
		}
		if reason != "" && c.discardLocked(inst, reason) {
			a.deletes = append(a.deletes, inst)
		}
	}
	pool := c.trimPoolLocked(g, a)
	for _, inst := range pool {
		if inst.phase == phaseAccepted && inst.standby == providers.StandbyPrepared && !inst.parking {
			inst.parking = true
			a.parks = append(a.parks, inst)
		}
	}
	if createFailed || c.refusal(g) != nil {
		// Back off until the next round rather than fail again at once; a
		// group the catalog check refuses gets no standby it would render
		// the wrong way.
		return
	}
	for range g.poolRoomLocked() - len(pool) {
		a.creates = append(a.creates, c.newStandbyLocked(g, now))
	}
}

// newStandbyLocked records a standby of g to create: it boots the image
// a new machine would, with user-data that prepares it only.
func (c *Core) newStandbyLocked(g *group, now time.Time) *instance {
	name := c.freeNameLocked(g)
	image, kind, _, _ := c.resolveImage(g)
	req := c.createRequest(g, name, image, kind)
	req.Standby = g.spec.WarmPool.State
	inst := c.addInstanceLocked(g, req, now)
	inst.standby = providers.StandbyWarming
	return inst
}

// TendPools tends every group's warm pool once and queues what that needs
// on the providers' workers: creations of standbys, parks of prepared
// ones, deletions of discarded ones. It skips a provider not listed yet
// (the pool's size is unknown) and does nothing during Shutdown. The pool
// loop calls it every refresh interval, after every sync and after a
// scale-up took standbys; it never runs on CA's request path.
func (c *Core) TendPools(ctx context.Context) {
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	now := c.now()
	acts := map[*group]*poolActions{}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	for _, id := range c.groupOrder {
		g := c.groups[id]
		if !c.synced[g.provider.Name()] {
			continue
		}
		a := &poolActions{}
		c.tendPoolLocked(g, now, a)
		acts[g] = a
	}
	c.mu.Unlock()
	for g, a := range acts {
		w := c.workers[g.provider.Name()]
		for _, inst := range a.deletes {
			w.enqueue(task{kind: taskDelete, inst: inst})
		}
		for _, inst := range a.parks {
			w.enqueue(task{kind: taskPark, inst: inst})
		}
		for _, inst := range a.creates {
			w.enqueue(task{kind: taskCreate, inst: inst})
		}
		if n := len(a.creates); n > 0 {
			c.log.Info("warm pool: creating standbys", "group", g.spec.ID, "count", n, "state", g.spec.WarmPool.State)
		}
	}
}

// kickPools asks the pool loop for an early round.
func (c *Core) kickPools() {
	select {
	case c.poolKick <- struct{}{}:
	default:
	}
}

// poolsConfigured reports whether any group has a warm pool. The groups are
// fixed once New returns, so it needs no lock.
func (c *Core) poolsConfigured() bool {
	for _, g := range c.groups {
		if g.spec.WarmPool.Size > 0 {
			return true
		}
	}
	return false
}

// poolLoop tends the warm pools every refresh interval and when kicked.
// Its ticks also clean up standbys a restarted prebake adopted after their
// group's pool was removed from the config.
func (c *Core) poolLoop(ctx context.Context) {
	c.tickLoop(ctx, c.poolKick, c.TendPools)
}

// park is the worker's Park of a prepared standby.
func (w *providerWorkers) park(ctx context.Context, inst *instance) {
	c := w.core
	c.mu.Lock()
	if inst.gone || inst.phase != phaseAccepted || inst.standby != providers.StandbyPrepared {
		inst.parking = false
		c.mu.Unlock()
		return
	}
	pid, state, group := inst.providerID, inst.group.spec.WarmPool.State, inst.group.spec.ID
	c.mu.Unlock()
	cls, err := w.call(ctx, func(ctx context.Context) error { return w.provider.Park(ctx, pid, state) })
	c.mu.Lock()
	inst.parking = false
	if err == nil && inst.phase == phaseAccepted && inst.standby == providers.StandbyPrepared {
		inst.standby = providers.StandbyParked
	}
	c.mu.Unlock()
	if err != nil {
		c.metrics.poolParkErrors.WithLabelValues(group, cls.Code).Inc()
		c.log.Warn("warm pool: park failed; the next round retries", "group", group, "providerID", pid, "state", state, "code", cls.Code, "err", err)
		return
	}
	c.log.Info("warm pool: standby parked", "group", group, "providerID", pid, "state", state)
}

// PoolView is one group's warm pool as the core sees it.
type PoolView struct {
	// Size is warmPool.size.
	Size int
	// Warming, Prepared and Parked count the standbys by phase (Warming
	// includes those being created).
	Warming, Prepared, Parked int
	// Standbys are their providerIDs, sorted.
	Standbys []string
}

// Pool returns group id's warm pool.
func (c *Core) Pool(id string) (PoolView, error) {
	g, err := c.group(id)
	if err != nil {
		return PoolView{}, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	v := PoolView{Size: g.spec.WarmPool.Size}
	for _, inst := range g.instances {
		if !inst.isStandby() || inst.phase == phaseDeleting {
			continue
		}
		switch standbyRank(inst) {
		case 3:
			v.Parked++
		case 2:
			v.Prepared++
		default:
			v.Warming++
		}
		v.Standbys = append(v.Standbys, inst.providerID)
	}
	slices.Sort(v.Standbys)
	return v, nil
}
