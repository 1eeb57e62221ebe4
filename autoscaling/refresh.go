package autoscaling

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

// Refresh is CA's call at the start of every loop. It never waits on a
// cloud: when a provider's snapshot is older than the TTL it asks the sync
// loop to re-list and answers from the snapshot at once (a List slower than
// CA's grpc_timeout would otherwise abort every CA loop). It fails only
// while a provider has never been listed: acting on an empty picture would
// create duplicates of machines that already exist.
func (c *Core) Refresh(ctx context.Context) error {
	if c.stale() {
		select {
		case c.kick <- struct{}{}:
		default: // a sync is already due
		}
	}
	if err := c.Ready(); err != nil {
		return fmt.Errorf("%w: %v; check the provider's credentials and endpoint (metric prebake_refresh_errors_total)", ErrUnavailable, err)
	}
	return nil
}

// stale reports whether some provider's snapshot is older than the TTL.
func (c *Core) stale() bool {
	now := c.now()
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name := range c.workers {
		if now.Sub(c.lastSync[name]) >= c.opts.RefreshInterval {
			return true
		}
	}
	return false
}

// Sync lists every provider whose snapshot is older than the TTL (all of
// them when force is set), in parallel, and reconciles the instances. One
// Sync runs at a time.
func (c *Core) Sync(ctx context.Context, force bool) {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.reloadCatalog(ctx)
	now := c.now()
	var due []providers.Provider
	c.mu.RLock()
	for _, name := range slices.Sorted(maps.Keys(c.workers)) {
		if force || now.Sub(c.lastSync[name]) >= c.opts.RefreshInterval {
			due = append(due, c.workers[name].provider)
		}
	}
	c.mu.RUnlock()
	var wg sync.WaitGroup
	for _, p := range due {
		wg.Go(func() { c.syncProvider(ctx, p) })
	}
	wg.Wait()
	if len(due) > 0 && c.poolsConfigured() {
		// Standbys may have moved on (prepared, failed). Without a pool the
		// loop's own tick is enough: a kick per Sync would take the core's
		// write lock for nothing on every refresh.
		c.kickPools()
	}
}

// syncLoop keeps the snapshot fresh: every TTL, and at once when Refresh
// finds it stale.
func (c *Core) syncLoop(ctx context.Context) {
	c.tickLoop(ctx, c.kick, func(ctx context.Context) { c.Sync(ctx, false) })
}

// tickLoop runs fn every refresh interval and whenever kick fires, until
// ctx ends: the shape of the sync and pool loops.
func (c *Core) tickLoop(ctx context.Context, kick <-chan struct{}, fn func(context.Context)) {
	t := time.NewTicker(c.opts.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		fn(ctx)
	}
}

func (c *Core) syncProvider(ctx context.Context, p providers.Provider) bool {
	start := c.now()
	lctx, cancel := context.WithTimeout(ctx, c.opts.Workers.CallTimeout)
	listed, err := p.List(lctx)
	cancel()
	c.metrics.refreshSeconds.WithLabelValues(p.Name()).Observe(c.now().Sub(start).Seconds())
	if err != nil {
		c.mu.Lock()
		c.listErr[p.Name()] = err
		c.mu.Unlock()
		c.metrics.refreshErrors.WithLabelValues(p.Name()).Inc()
		if !errors.Is(err, context.Canceled) {
			c.log.Warn("list failed; serving the last snapshot", "provider", p.Name(), "err", err)
		}
		return false
	}
	redelete := c.reconcile(p, listed, start)
	c.mu.Lock()
	c.lastSync[p.Name()] = c.now()
	c.mu.Unlock()
	for _, inst := range redelete {
		c.workers[p.Name()].enqueue(task{kind: taskDelete, inst: inst})
	}
	return true
}

// tombstone is when an instance of a provider was forgotten.
type tombstone struct {
	provider string
	at       time.Time
}

// forgottenSinceLocked reports whether li was forgotten at or after
// listStart.
func (c *Core) forgottenSinceLocked(li providers.Instance, listStart time.Time) bool {
	for _, key := range []string{li.ProviderID, "name/" + li.Name} {
		if ts, ok := c.forgotten[key]; ok && !ts.at.Before(listStart) {
			return true
		}
	}
	return false
}

// purgeTombstonesLocked drops p's tombstones older than listStart: Lists of
// p run one at a time, so every later one starts after them.
func (c *Core) purgeTombstonesLocked(p string, listStart time.Time) {
	for k, ts := range c.forgotten {
		if ts.provider == p && ts.at.Before(listStart) {
			delete(c.forgotten, k)
		}
	}
}

// reconcile applies one List (started at listStart) to the instances of
// p's groups. It returns the instances whose delete must be retried.
func (c *Core) reconcile(p providers.Provider, listed []providers.Instance, listStart time.Time) (redelete []*instance) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.purgeTombstonesLocked(p.Name(), listStart)
	c.synced[p.Name()] = true
	delete(c.listErr, p.Name())
	seen := make(map[*instance]bool, len(listed))
	for _, li := range listed {
		g, ok := c.groups[li.Group]
		if !ok || g.provider != p {
			c.metrics.orphans.WithLabelValues(p.Name()).Inc()
			c.log.Warn("instance of a group that is not configured; leaving it alone", "provider", p.Name(), "group", li.Group, "providerID", li.ProviderID)
			continue
		}
		inst := c.index.listed(li.ProviderID, li.Name)
		if inst == nil {
			if c.forgottenSinceLocked(li, listStart) {
				// The List started before this instance was deleted and
				// forgotten: its answer is stale, not an orphan to adopt.
				continue
			}
			inst = c.adoptLocked(g, li, now)
		}
		seen[inst] = true
		inst.inCloud = true
		if inst.placeholder && li.ProviderID != "" {
			c.index.setProviderID(inst, li.ProviderID)
		}
		if !inst.adopted && inst.acceptedAt.After(listStart) {
			// The List started before the cloud accepted this machine (a
			// Create or a Resume returned since): it says nothing newer
			// than what the core holds. (A resumed standby may still show
			// its marker, or show halted between marker and start.)
			continue
		}
		if inst.isStandby() && inst.phase == phaseAccepted {
			c.reconcileStandbyLocked(inst, li)
		}
		switch {
		case inst.phase == phaseDeleting:
			if inst.deleteFailed {
				inst.deleteFailed = false
				redelete = append(redelete, inst)
			}
		case li.State == providers.StateDeleting:
			// Someone else deletes it: it leaves the target.
			inst.phase = phaseDeleting
		case inst.phase == phaseAccepted || inst.phase == phaseFailed && li.Error == nil:
			inst.phase = phaseAccepted
			inst.err = li.Error
			// A registered node's machine is running, whatever a cloud that
			// lags behind says.
			if inst.registeredAt.IsZero() || li.State == providers.StateRunning {
				inst.state = li.State
			}
			if li.Error != nil {
				inst.phase = phaseFailed
			}
		}
		if inst.state == providers.StateRunning && inst.runningAt.IsZero() && !inst.isStandby() {
			inst.runningAt = now
			if !inst.adopted {
				c.metrics.observePhase(g.spec.ID, inst.imageKind, phaseRunning, now.Sub(inst.requestedAt))
			}
		}
	}
	for _, g := range c.groups {
		if g.provider != p {
			continue
		}
		for _, inst := range g.instances {
			if seen[inst] {
				continue
			}
			switch inst.phase {
			case phaseQueued, phaseCreating, phaseFailed:
				// Not in the cloud (yet): the core's own state holds.
				continue
			}
			if inst.acceptedAt.IsZero() || inst.acceptedAt.Before(listStart) {
				// Gone from the cloud: a finished delete, or someone removed it.
				if inst.phase != phaseDeleting {
					c.log.Warn("instance vanished from the cloud; dropping it", "group", g.spec.ID, "providerID", inst.providerID)
				}
				c.forgetLocked(inst)
			}
		}
	}
	return redelete
}

// adoptLocked records li, a machine this process did not create, first
// listed at now.
func (c *Core) adoptLocked(g *group, li providers.Instance, now time.Time) *instance {
	name := li.Name
	if name == "" {
		name = li.ProviderID
	}
	inst := &instance{
		name: name, providerID: li.ProviderID, group: g, phase: phaseAccepted, state: li.State,
		err: li.Error, image: li.Image, imageKind: li.ImageKind, adopted: true,
		requestedAt: li.CreatedAt, acceptedAt: li.CreatedAt,
	}
	if inst.imageKind == "" {
		inst.imageKind = g.imageKind
	}
	if li.Error != nil {
		inst.phase = phaseFailed
	}
	if li.State == providers.StateDeleting {
		inst.phase = phaseDeleting
	}
	inst.inCloud = true
	if li.Standby.Phase != providers.StandbyNone {
		if node := c.nodeNames[li.ProviderID]; node != "" {
			// Its Node exists: it joined, whatever its marker says.
			c.log.Error("warm pool: a machine listed as a standby has a Node; adopting it as a node", "group", g.spec.ID, "providerID", li.ProviderID, "node", node)
		} else {
			inst.standby = li.Standby.Phase
			// Its warming began at its creation; a provider that does not
			// say when that was gets up to one more warmingTimeout, counted
			// from now.
			inst.warmingSince = li.CreatedAt
			if inst.warmingSince.IsZero() {
				inst.warmingSince = now
			}
		}
	}
	g.instances[name] = inst
	c.index.add(inst)
	c.log.Info("adopted instance from the cloud", "group", g.spec.ID, "providerID", li.ProviderID, "state", li.State, "standby", inst.standby)
	return inst
}

// reconcileStandbyLocked applies what a List says of a standby the core
// holds as one. Phases only move forward (a List that started before a
// Park returned still says prepared); a machine listed without its marker
// was taken (by a process that died before it could say so) and is a node
// of its group from now on.
func (c *Core) reconcileStandbyLocked(inst *instance, li providers.Instance) {
	if li.Standby.Phase == providers.StandbyNone {
		c.log.Warn("warm pool: a standby lost its marker (taken by an earlier process); it is a node of its group now",
			"group", inst.group.spec.ID, "providerID", inst.providerID)
		inst.standby, inst.parking = providers.StandbyNone, false
		return
	}
	inst.standby = max(inst.standby, li.Standby.Phase)
}

// Ready reports whether every provider has been listed at least once.
func (c *Core) Ready() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name := range c.workers {
		if !c.synced[name] {
			if err := c.listErr[name]; err != nil {
				return fmt.Errorf("provider %s not listed yet; last error: %w", name, err)
			}
			return fmt.Errorf("provider %s not listed yet", name)
		}
	}
	return nil
}
