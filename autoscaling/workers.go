package autoscaling

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/prebake-dev/prebake/providers"
)

type taskKind int

const (
	taskCreate taskKind = iota
	taskDelete
	// taskPark parks a prepared warm-pool standby.
	taskPark
)

type task struct {
	kind taskKind
	inst *instance
	// done, when set, is closed once a worker has run the task.
	done chan struct{}
}

// providerWorkers run one provider's creations and deletions: Parallelism
// workers share one FIFO queue and one rate limiter.
type providerWorkers struct {
	core     *Core
	provider providers.Provider
	limiter  *rate.Limiter

	// mu guards queue and busy; wake has room for one signal.
	mu    sync.Mutex
	queue []task
	busy  int
	wake  chan struct{}
	// idle is closed and replaced whenever the queue is empty and no task
	// is running; drain waits on it.
	idle chan struct{}
}

func newProviderWorkers(c *Core, p providers.Provider) *providerWorkers {
	o := c.opts.Workers
	return &providerWorkers{
		core:     c,
		provider: p,
		limiter:  rate.NewLimiter(rate.Limit(o.QPS), o.Burst),
		wake:     make(chan struct{}, 1),
		idle:     make(chan struct{}),
	}
}

func (w *providerWorkers) start(ctx context.Context) {
	for range w.core.opts.Workers.Parallelism {
		w.core.wg.Go(func() { w.loop(ctx) })
	}
}

func (w *providerWorkers) enqueue(t task) {
	w.mu.Lock()
	w.queue = append(w.queue, t)
	depth := len(w.queue)
	w.mu.Unlock()
	w.core.metrics.queueDepth.WithLabelValues(w.provider.Name()).Set(float64(depth))
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next pops a task, or reports false when the queue is empty.
func (w *providerWorkers) next() (task, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return task{}, false
	}
	t := w.queue[0]
	w.queue[0] = task{}
	w.queue = w.queue[1:]
	w.busy++
	w.core.metrics.queueDepth.WithLabelValues(w.provider.Name()).Set(float64(len(w.queue)))
	if len(w.queue) > 0 {
		// Let another worker pick up the rest.
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return t, true
}

func (w *providerWorkers) done() {
	w.mu.Lock()
	w.busy--
	if w.busy == 0 && len(w.queue) == 0 {
		close(w.idle)
		w.idle = make(chan struct{})
	}
	w.mu.Unlock()
}

func (w *providerWorkers) loop(ctx context.Context) {
	for {
		t, ok := w.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		switch t.kind {
		case taskCreate:
			w.create(ctx, t.inst)
		case taskDelete:
			w.delete(ctx, t.inst)
		case taskPark:
			w.park(ctx, t.inst)
		}
		if t.done != nil {
			close(t.done)
		}
		w.done()
	}
}

// drain waits until the queue is empty and no task runs, or ctx ends.
func (w *providerWorkers) drain(ctx context.Context) error {
	for {
		w.mu.Lock()
		empty := w.busy == 0 && len(w.queue) == 0
		idle := w.idle
		left := len(w.queue) + w.busy
		w.mu.Unlock()
		if empty {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("provider %s: %d creations or deletions still pending at shutdown: %w", w.provider.Name(), left, ctx.Err())
		}
	}
}

// call runs fn with the rate limiter, a per-call timeout, and retries of
// retryable errors with exponential backoff.
func (w *providerWorkers) call(ctx context.Context, fn func(ctx context.Context) error) (cls providers.Classification, err error) {
	o := w.core.opts.Workers
	backoff := o.RetryBase
	for attempt := 0; ; attempt++ {
		if err := w.limiter.Wait(ctx); err != nil {
			return providers.Classification{Class: providers.ErrorOther, Code: "shutdown"}, err
		}
		cctx, cancel := context.WithTimeout(ctx, o.CallTimeout)
		err = fn(cctx)
		cancel()
		if err == nil {
			return providers.Classification{}, nil
		}
		cls = w.provider.Classify(err)
		if !cls.Retryable || attempt >= o.Retries || ctx.Err() != nil {
			return cls, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return cls, err
		case <-t.C:
		}
		backoff *= 2
	}
}

// create runs a queued instance's Create, or, for a standby IncreaseSize
// took, its Resume; a resume that fails falls back to a create.
func (w *providerWorkers) create(ctx context.Context, inst *instance) {
	c := w.core
	c.mu.Lock()
	if inst.gone || inst.phase != phaseQueued {
		c.mu.Unlock()
		return
	}
	inst.phase = phaseCreating
	g, req, refused, resume, pid := inst.group, inst.req, inst.refused, inst.resume, inst.providerID
	c.mu.Unlock()

	var got providers.Instance
	var ud []byte
	var err error
	cls := providers.Classification{Class: providers.ErrorOther, Code: "user_data"}
	if refused != nil {
		err, cls.Code = refused, CodeMixedRenderers
	} else {
		ud, err = c.userDataFor(ctx, inst)
	}
	if err == nil {
		// Rendered for this attempt only: the join token in it is a
		// secret, so it is not kept on the instance.
		req.UserData = ud
		cls, err = w.call(ctx, func(ctx context.Context) error {
			var err error
			if resume {
				got, err = w.provider.Resume(ctx, pid, ud)
			} else {
				got, err = w.provider.Create(ctx, req)
			}
			return err
		})
	}
	now := c.now()

	c.mu.Lock()
	if err != nil {
		if inst.cancelled {
			c.mu.Unlock()
			if resume {
				// The standby exists whatever its resume did: delete it.
				w.delete(ctx, inst)
				return
			}
			// Cancelled while in flight and the create failed: nothing to
			// clean up.
			c.mu.Lock()
			c.forgetLocked(inst)
			c.mu.Unlock()
			return
		}
		if resume && ctx.Err() == nil {
			repl := c.resumeFallbackLocked(inst)
			c.mu.Unlock()
			code := cls.Code
			if code == "" {
				code = "resume_failed"
			}
			c.metrics.poolFallbacks.WithLabelValues(g.spec.ID, code).Inc()
			c.log.Warn("warm pool: resume failed; creating a machine instead", "group", g.spec.ID, "instance", inst.name,
				"providerID", pid, "replacement", repl.name, "code", code, "err", err)
			w.enqueue(task{kind: taskDelete, inst: inst})
			w.enqueue(task{kind: taskCreate, inst: repl})
			if repl.fallback != nil {
				c.reportFallback(c.eventCtx(), *repl.fallback)
			}
			return
		}
		code := cls.Code
		if code == "" {
			code = "create_failed"
		}
		inst.phase = phaseFailed
		inst.err = &providers.InstanceError{Class: cls.Class, Code: code, Message: err.Error()}
		standby := inst.isStandby()
		c.mu.Unlock()
		if standby {
			// CA never sees it; the pool's next round counts and drops it.
			c.log.Warn("warm pool: standby create failed", "group", g.spec.ID, "instance", inst.name, "code", code, "err", err)
			return
		}
		c.metrics.createErrors.WithLabelValues(g.spec.ID, classLabel(cls.Class), code).Inc()
		c.log.Warn("create failed", "group", g.spec.ID, "instance", inst.name, "class", classLabel(cls.Class), "code", code, "err", err)
		return
	}
	if got.ProviderID != "" && got.ProviderID != inst.providerID {
		c.index.setProviderID(inst, got.ProviderID)
	}
	inst.acceptedAt = now
	inst.inCloud = true
	if inst.cancelled {
		c.mu.Unlock()
		w.delete(ctx, inst)
		return
	}
	inst.phase = phaseAccepted
	if got.State != 0 {
		inst.state = got.State
	}
	standby := inst.isStandby()
	if standby {
		inst.warmingSince = now
	}
	c.mu.Unlock()
	if standby {
		c.log.Info("warm pool: standby accepted", "group", g.spec.ID, "instance", inst.name, "providerID", got.ProviderID)
		return
	}
	c.metrics.observePhase(g.spec.ID, inst.imageKind, phaseAPIAccepted, now.Sub(inst.requestedAt))
	c.log.Info("instance accepted", "group", g.spec.ID, "instance", inst.name, "providerID", got.ProviderID, "resumed", resume)
}

func (w *providerWorkers) delete(ctx context.Context, inst *instance) {
	c := w.core
	c.mu.RLock()
	pid, placeholder := inst.providerID, inst.placeholder
	c.mu.RUnlock()
	if placeholder {
		// The cloud never returned an id: nothing to delete by id. A later
		// List adopts and a DeleteNodes removes it if it exists after all.
		c.mu.Lock()
		c.forgetLocked(inst)
		c.mu.Unlock()
		return
	}
	cls, err := w.call(ctx, func(ctx context.Context) error { return w.provider.Delete(ctx, pid) })
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		// Keep it as deleting; the next Sync retries.
		c.metrics.deleteErrors.WithLabelValues(inst.group.spec.ID, cls.Code).Inc()
		c.log.Warn("delete failed; will retry on next sync", "group", inst.group.spec.ID, "providerID", pid, "err", err)
		c.mu.Lock()
		inst.deleteFailed = true
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	c.forgetLocked(inst)
	nodeName := c.nodeNames[pid]
	delete(c.nodeNames, pid)
	c.mu.Unlock()
	if c.opts.Nodes != nil && nodeName != "" {
		if err := c.opts.Nodes.DeleteNode(ctx, nodeName); err != nil {
			c.log.Warn("deleting Node object failed", "node", nodeName, "providerID", pid, "err", err)
		}
	}
	c.log.Info("instance deleted", "group", inst.group.spec.ID, "providerID", pid)
}

func classLabel(c providers.ErrorClass) string {
	switch c {
	case providers.ErrorOutOfResources:
		return "OutOfResources"
	case providers.ErrorOther:
		return "Other"
	}
	return fmt.Sprintf("%d", int(c))
}
