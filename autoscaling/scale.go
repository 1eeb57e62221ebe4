package autoscaling

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

// placeholderScheme prefixes the providerID of an instance whose real id is
// known only once the cloud accepts it. No Node ever carries it.
const placeholderScheme = "prebake-pending://"

// IncreaseSize raises the group's target by delta and returns: the
// instances are recorded (state creating, with their providerID) and
// queued; the provider's workers create them. Parked standbys of the
// group's warm pool are taken first (their workers resume them); machines
// are created only for the rest, and standbys that no longer fit under
// maxSize beside the new target are deleted.
func (c *Core) IncreaseSize(id string, delta int) error {
	g, err := c.group(id)
	if err != nil {
		return err
	}
	if delta <= 0 {
		return fmt.Errorf("%w: IncreaseSize delta must be positive, got %d", ErrInvalidArgument, delta)
	}
	now := c.now()
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return fmt.Errorf("%w: shutting down; retry against the new instance", ErrUnavailable)
	}
	if t := g.targetLocked(); t+delta > g.spec.MaxSize {
		c.mu.Unlock()
		return fmt.Errorf("%w: node group %q: target %d + %d exceeds maxSize %d", ErrFailedPrecondition, id, t, delta, g.spec.MaxSize)
	}
	var taken []*instance
	if c.refusal(g) == nil {
		// A refused group's new machines fail at once (newInstanceLocked);
		// its standbys stay parked for when the catalog passes again.
		taken = c.takeStandbysLocked(g, delta, now)
	}
	created := make([]*instance, 0, delta-len(taken))
	for range delta - len(taken) {
		inst := c.newInstanceLocked(g, now)
		created = append(created, inst)
	}
	var surplus poolActions
	if g.spec.WarmPool.Size > 0 || len(taken) > 0 {
		// Standbys count toward maxSize: keep target + pool within it now,
		// not a round later.
		c.trimPoolLocked(g, &surplus)
	}
	c.mu.Unlock()
	w := c.workers[g.provider.Name()]
	for _, inst := range taken {
		w.enqueue(task{kind: taskCreate, inst: inst})
	}
	for _, inst := range created {
		w.enqueue(task{kind: taskCreate, inst: inst})
	}
	for _, inst := range surplus.deletes {
		w.enqueue(task{kind: taskDelete, inst: inst})
	}
	if len(taken) > 0 {
		c.metrics.poolTaken.WithLabelValues(id).Add(float64(len(taken)))
		c.kickPools() // refill in the background
	}
	for _, inst := range created {
		if inst.fallback != nil {
			c.reportFallback(c.eventCtx(), *inst.fallback)
		}
		if inst.missing != nil {
			c.reportMissingImages(c.eventCtx(), *inst.missing)
		}
	}
	c.metrics.increaseSize.WithLabelValues(id).Add(float64(delta))
	c.log.Info("increase size", "group", id, "delta", delta, "fromWarmPool", len(taken))
	return nil
}

func (c *Core) newInstanceLocked(g *group, now time.Time) *instance {
	name := c.freeNameLocked(g)
	image, kind, fb, missing := c.resolveImage(g)
	inst := c.addInstanceLocked(g, c.createRequest(g, name, image, kind), now)
	if err := c.refusal(g); err != nil {
		// Not a fallback: the machine is not created at all.
		inst.refused, fb = err, nil
	}
	if fb != nil {
		fb.Machine = name
		inst.fallback = fb
	}
	if missing != nil {
		missing.Machine = name
		inst.missing = missing
	}
	return inst
}

// freeNameLocked picks a machine name of g that no instance has.
func (c *Core) freeNameLocked(g *group) string {
	for {
		name := g.spec.ID + "-" + c.opts.NameRand()
		if c.index.named(name) == nil {
			return name
		}
	}
}

// addInstanceLocked records a queued instance of g that req creates, under
// the providerID it will register with (or a placeholder).
func (c *Core) addInstanceLocked(g *group, req providers.CreateRequest, now time.Time) *instance {
	name := req.Name
	inst := &instance{name: name, group: g, req: req, phase: phaseQueued, state: providers.StateCreating,
		image: req.Image, imageKind: req.ImageKind, requestedAt: now}
	if id, known := g.provider.ProviderID(req); known {
		inst.providerID = id
	} else {
		inst.providerID = placeholderScheme + g.spec.ID + "/" + name
		inst.placeholder = true
	}
	inst.family = c.familyOf(g, req.Image)
	inst.manifest = c.manifestOf(req.Image)
	g.instances[name] = inst
	c.index.add(inst)
	return inst
}

// createRequest builds what the workers send to Create. image is the
// resolved catalog image ("" for runtime install); it becomes the
// prebake.dev/image label of the machine and of its Node.
func (c *Core) createRequest(g *group, name, image string, kind providers.ImageKind) providers.CreateRequest {
	shape := shapeOf(c.opts.Cluster, g, name, "", c.opts.Reserved, c.opts.GPULabel)
	shape.Image, shape.ImageKind = image, kind
	return providers.CreateRequest{
		Name:         name,
		Cluster:      c.opts.Cluster,
		Group:        g.spec.ID,
		MachineType:  g.spec.MachineType,
		Location:     g.spec.Zone,
		ImageChannel: g.spec.ImageChannel,
		Image:        image,
		ImageKind:    kind,
		NodeLabels:   providers.NodeLabels(shape),
		NodeTaints:   g.spec.Taints,
		UserData:     g.spec.UserData,
	}
}

// DecreaseTargetSize lowers the target by -delta by cancelling instances
// that have not come up: queued ones are dropped, in-flight or booting ones
// are deleted. It never touches a running instance.
func (c *Core) DecreaseTargetSize(id string, delta int) error {
	g, err := c.group(id)
	if err != nil {
		return err
	}
	if delta >= 0 {
		return fmt.Errorf("%w: DecreaseTargetSize delta must be negative, got %d", ErrInvalidArgument, delta)
	}
	c.mu.Lock()
	var pending []*instance
	for _, inst := range g.instances {
		if inst.phase != phaseDeleting && !inst.isStandby() && inst.viewState() == providers.StateCreating {
			pending = append(pending, inst)
		}
	}
	if len(pending) < -delta {
		t := g.targetLocked()
		c.mu.Unlock()
		return fmt.Errorf("%w: node group %q: can't decrease target %d by %d: only %d instances are still pending, the rest are running (use DeleteNodes)",
			ErrFailedPrecondition, id, t, -delta, len(pending))
	}
	// Cancel the least advanced first: queued, then failed, then in flight,
	// then booting; newest first within each.
	slices.SortFunc(pending, func(a, b *instance) int {
		if ra, rb := cancelRank(a), cancelRank(b); ra != rb {
			return ra - rb
		}
		return b.requestedAt.Compare(a.requestedAt)
	})
	var deletes []*instance
	for _, inst := range pending[:-delta] {
		if d := c.cancelLocked(inst); d {
			deletes = append(deletes, inst)
		}
	}
	c.mu.Unlock()
	c.enqueueDeletes(g, deletes)
	c.log.Info("decrease target size", "group", id, "delta", delta)
	return nil
}

func cancelRank(i *instance) int {
	switch i.phase {
	case phaseQueued:
		return 0
	case phaseFailed:
		return 1
	case phaseCreating:
		return 2
	}
	return 3
}

// cancelLocked takes inst out of the target. It reports whether a cloud
// delete must follow.
func (c *Core) cancelLocked(inst *instance) (needsDelete bool) {
	switch {
	case inst.phase == phaseQueued && inst.resume:
		// A taken standby not resumed yet: back into the pool. Its queued
		// task finds it no longer queued and skips it.
		returnStandbyLocked(inst)
		return false
	case inst.phase == phaseFailed && inst.inCloud:
		// Listed as failed (a halted machine): it exists, delete it.
		inst.phase = phaseDeleting
		return true
	}
	switch inst.phase {
	case phaseQueued, phaseFailed:
		// Nothing exists in the cloud: forget it. A queued task finds it
		// gone and skips it.
		c.forgetLocked(inst)
		return false
	case phaseCreating:
		// The worker deletes what its Create returns.
		inst.cancelled = true
		inst.phase = phaseDeleting
		return false
	default:
		inst.phase = phaseDeleting
		return true
	}
}

func (c *Core) forgetLocked(inst *instance) {
	ts := tombstone{provider: inst.group.provider.Name(), at: c.now()}
	c.forgotten[inst.providerID] = ts
	c.forgotten["name/"+inst.name] = ts
	inst.gone = true
	delete(inst.group.instances, inst.name)
	c.index.remove(inst)
}

// DeleteNodes deletes exactly the named nodes' machines and lowers the
// target by their number. Real nodes, fake nodes (name = providerID) and
// failed creations are all accepted. It fails, deleting nothing, when a
// node belongs to another group or the group would go below its minimum.
// Deleting a node that is already being deleted is a no-op.
func (c *Core) DeleteNodes(id string, nodes []Node) error {
	g, err := c.group(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	var victims []*instance
	var foreign []string
	seen := map[*instance]bool{}
	for _, n := range nodes {
		inst := c.lookupLocked(n)
		if inst == nil || inst.group != g || inst.isStandby() {
			foreign = append(foreign, nodeRef(n))
			continue
		}
		if inst.phase == phaseDeleting || seen[inst] {
			continue
		}
		seen[inst] = true
		victims = append(victims, inst)
	}
	if len(foreign) > 0 {
		c.mu.Unlock()
		return fmt.Errorf("%w: node group %q has no node %s; nothing was deleted", ErrInvalidArgument, id, strings.Join(foreign, ", "))
	}
	// Failed creations never existed in the cloud: removing them is always
	// allowed (CA retries them every loop until they are gone). The
	// minimum guards machines that exist.
	existing := 0
	for _, inst := range victims {
		if inst.phase != phaseFailed {
			existing++
		}
	}
	if t := g.targetLocked(); existing > 0 && t-len(victims) < g.spec.MinSize {
		c.mu.Unlock()
		return fmt.Errorf("%w: node group %q: deleting %d nodes would take target %d below minSize %d; nothing was deleted",
			ErrFailedPrecondition, id, len(victims), t, g.spec.MinSize)
	}
	var deletes []*instance
	for _, inst := range victims {
		if c.cancelLocked(inst) {
			deletes = append(deletes, inst)
		}
	}
	c.mu.Unlock()
	c.enqueueDeletes(g, deletes)
	c.log.Info("delete nodes", "group", id, "count", len(victims))
	return nil
}

func (c *Core) enqueueDeletes(g *group, insts []*instance) {
	w := c.workers[g.provider.Name()]
	for _, inst := range insts {
		w.enqueue(task{kind: taskDelete, inst: inst})
	}
}

func nodeRef(n Node) string {
	switch {
	case n.Name != "" && n.ProviderID != "" && n.Name != n.ProviderID:
		return fmt.Sprintf("%q (providerID %q)", n.Name, n.ProviderID)
	case n.ProviderID != "":
		return fmt.Sprintf("%q", n.ProviderID)
	}
	return fmt.Sprintf("%q", n.Name)
}
