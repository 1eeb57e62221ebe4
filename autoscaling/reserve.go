package autoscaling

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// Reservation is a machine asked for outside CA's requests (the image
// canary's), made the way a scale-up makes one: recorded as IncreaseSize
// records it (it counts toward its group's target from Reserve to Release,
// here and in every prebake that lists it), created by its provider's worker
// queue (user-data with a fresh join token, rate limit, retries, error
// classes), and deleted by the worker delete path. Shutdown waits for every
// reservation to be released before it drains the workers.
type Reservation struct {
	c    *Core
	inst *instance
	// created is the create task's done channel once Create queued it;
	// Release waits for it, so a delete never races its own create.
	created chan struct{}
}

// Reserve records one machine of group booting image (a catalog image id),
// whose Node carries taints on top of the group's. It is refused while the
// group's provider has not been listed (its size is unknown), at the
// group's maxSize, and during Shutdown.
func (c *Core) Reserve(group, image string, taints ...providers.Taint) (*Reservation, error) {
	g, err := c.group(group)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, fmt.Errorf("%w: shutting down", ErrUnavailable)
	}
	if !c.synced[g.provider.Name()] {
		return nil, fmt.Errorf("%w: provider %s has not been listed (%v), so the group's size is unknown", ErrUnavailable, g.provider.Name(), c.listErr[g.provider.Name()])
	}
	if t := g.targetLocked(); t >= g.spec.MaxSize {
		return nil, fmt.Errorf("%w: node group %q is at maxSize %d (%d machines), and the reserved machine would count toward it: wait until the group has room, or raise maxSize",
			ErrFailedPrecondition, g.spec.ID, g.spec.MaxSize, t)
	}
	req := c.createRequest(g, c.freeNameLocked(g), image, providers.ImagePrebaked)
	req.NodeTaints = append(slices.Clone(req.NodeTaints), taints...)
	c.leases.Add(1)
	return &Reservation{c: c, inst: c.addInstanceLocked(g, req, c.now())}, nil
}

// Create queues the machine's creation on its provider's workers and waits
// until it is done: nil once the cloud accepted the machine, its creation
// error (a *CreateError) otherwise, or ctx's error.
func (r *Reservation) Create(ctx context.Context) error {
	if r.created != nil {
		return errors.New("Reservation.Create called twice")
	}
	t := task{kind: taskCreate, inst: r.inst, done: make(chan struct{})}
	r.created = t.done
	if err := r.c.run(ctx, t); err != nil {
		return err
	}
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	switch {
	case r.inst.phase == phaseFailed && r.inst.err != nil:
		return &CreateError{*r.inst.err}
	case r.inst.phase != phaseAccepted:
		return &CreateError{providers.InstanceError{Class: providers.ErrorOther, Code: "not_created", Message: fmt.Sprintf("the machine was not created (phase %d)", r.inst.phase)}}
	}
	return nil
}

// CreateError is a reserved machine's creation failure, as CA would be told
// of it: its class, code and message.
type CreateError struct{ providers.InstanceError }

func (e *CreateError) Error() string { return e.Code + ": " + e.Message }

// MachineView is what the core knows of a reserved machine.
type MachineView struct {
	Name string
	// ProviderID is "" while the cloud has not given the machine's id.
	ProviderID string
	State      providers.InstanceState
	// Gone is true once the machine's record is dropped (deleted, or lost
	// from the cloud's list).
	Gone  bool
	Error *providers.InstanceError
}

// Machine returns what the core knows of the machine now.
func (r *Reservation) Machine() MachineView {
	c := r.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	v := MachineView{Name: r.inst.name, State: r.inst.state, Gone: r.inst.gone}
	if !r.inst.placeholder {
		v.ProviderID = r.inst.providerID
	}
	if r.inst.err != nil {
		e := *r.inst.err
		v.Error = &e
	}
	return v
}

// Release deletes the machine through its provider's workers (a machine
// whose id the cloud never returned is looked for by name in a fresh List
// first: it may exist anyway), the Node the core saw for it, and the join
// tokens made for it (how many were revoked is returned); then the
// reservation no longer holds Shutdown. It waits until done or ctx ends;
// the error says what is left.
func (r *Reservation) Release(ctx context.Context) (tokensRevoked int, err error) {
	c, inst := r.c, r.inst
	defer c.leases.Done()
	var errs []error
	if r.created != nil {
		// The create may still be in flight when Create's ctx ended early:
		// delete what it made, not what was there before it.
		select {
		case <-r.created:
		case <-ctx.Done():
			return 0, fmt.Errorf("machine %s: its create is still in flight: %w", inst.name, ctx.Err())
		}
	}
	c.mu.Lock()
	queued := inst.phase == phaseQueued
	placeholder := inst.placeholder && !inst.gone
	switch {
	case queued:
		c.forgetLocked(inst) // never created: nothing in the cloud
	case !inst.gone:
		inst.phase = phaseDeleting
	}
	c.mu.Unlock()
	if !queued {
		if placeholder {
			// reconcile gives the record the machine's id if the List has it.
			c.Sync(ctx, true)
		}
		if err := c.run(ctx, task{kind: taskDelete, inst: inst}); err != nil {
			errs = append(errs, fmt.Errorf("delete machine %s: %w", inst.name, err))
		}
	}
	c.mu.RLock()
	gone, pid := inst.gone, inst.providerID
	c.mu.RUnlock()
	if !gone {
		errs = append(errs, fmt.Errorf("delete machine %s (%s) failed; the next sync retries it", inst.name, pid))
	}
	if rv, ok := c.opts.UserData.(JoinTokenRevoker); ok {
		n, err := rv.RevokeJoinTokens(ctx, inst.name)
		if err != nil {
			errs = append(errs, err)
		}
		tokensRevoked = n
	}
	return tokensRevoked, errors.Join(errs...)
}

// run queues t on its provider's workers and waits until a worker has run
// it, or ctx ends.
func (c *Core) run(ctx context.Context, t task) error {
	if t.done == nil {
		t.done = make(chan struct{})
	}
	c.workers[t.inst.group.provider.Name()].enqueue(t)
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GroupDetail is what a caller outside CA's protocol needs of a group.
type GroupDetail struct {
	GroupInfo
	Provider     string
	Capabilities providers.Capabilities
	// Image is the key of the catalog images the group boots: its arch, and
	// its OS release and k8s minor where it pins them.
	Image imagecatalog.Key
	// RendersUserData: its machines' user-data comes from the core's
	// UserDataSource (no userDataFile, a provider that takes user-data).
	RendersUserData bool
}

// Group describes group id.
func (c *Core) Group(id string) (GroupDetail, error) {
	g, err := c.group(id)
	if err != nil {
		return GroupDetail{}, err
	}
	return GroupDetail{
		GroupInfo: g.info(), Provider: g.provider.Name(), Capabilities: g.provider.Capabilities(), Image: g.imageQuery().Key,
		RendersUserData: c.rendersUserData(g),
	}, nil
}

// rendersUserData reports whether g's machines get their user-data from
// the core's UserDataSource: no userDataFile, and a provider whose machines
// take user-data.
func (c *Core) rendersUserData(g *group) bool {
	return c.opts.UserData != nil && len(g.spec.UserData) == 0 && g.provider.Capabilities().UserData != providers.UserDataNone
}

// Cluster is the cluster name the core's machines and Nodes are labelled
// with.
func (c *Core) Cluster() string { return c.opts.Cluster }
