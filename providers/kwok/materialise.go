package kwok

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok/providerid"
)

// materialiseWorkers bounds the Node creations in flight at once.
const materialiseWorkers = 8

// Run implements providers.Provider. It owns the materialiser: it resumes the
// machines whose records say they are still booting, then creates each
// machine's Node when its simulated boot ends, retrying API errors with
// backoff. It returns nil when ctx ends, after its workers have stopped.
func (p *Provider) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("kwok: Run is already running for this provider")
	}
	defer p.running.Store(false)

	var workers sync.WaitGroup
	defer workers.Wait()
	slots := make(chan struct{}, materialiseWorkers)

	if !p.resume(ctx) {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for _, it := range p.queue.popDue(p.now()) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			workers.Go(func() {
				defer func() { <-slots }()
				p.materialise(ctx, it)
			})
		}
		var fire <-chan time.Time
		if due, ok := p.queue.next(); ok {
			timer.Reset(max(due.Sub(p.now()), 0))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.queue.wake:
		case <-fire:
		}
		timer.Stop()
	}
}

// resume queues every recorded machine that has no Node yet, retrying the
// lists until they succeed. It returns false if ctx ended first.
func (p *Provider) resume(ctx context.Context) bool {
	for attempt := 0; ; attempt++ {
		n, err := p.resumeOnce(ctx)
		if err == nil {
			if n > 0 {
				p.log.Info("resumed machines still booting", "count", n)
			}
			return true
		}
		delay := p.backoff(attempt)
		p.log.Warn("listing machine records to resume them failed; retrying", "attempt", attempt+1, "retryIn", delay, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

func (p *Provider) resumeOnce(ctx context.Context) (int, error) {
	leases, err := p.listLeases(ctx)
	if err != nil {
		return 0, err
	}
	nodes, err := p.listNodes(ctx)
	if err != nil {
		return 0, err
	}
	hasNode := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		hasNode[n.Name] = true
	}
	resumed := 0
	for i := range leases {
		l := &leases[i]
		if hasNode[l.Name] || l.DeletionTimestamp != nil {
			continue
		}
		rec, err := recordFromLease(l)
		if err != nil {
			p.log.Error("can't resume machine: its record is damaged; delete it", "group", l.Labels[providers.LabelGroup], "instance", l.Name, "err", err)
			continue
		}
		p.queue.add(bootItem{name: rec.Name, group: rec.Group, due: rec.BootEndsAt})
		resumed++
	}
	return resumed, nil
}

// materialise creates the Node of a machine whose boot has ended and
// requeues it with backoff if that failed.
func (p *Provider) materialise(ctx context.Context, it bootItem) {
	log := p.log.With("group", it.group, "instance", it.name, "providerID", providerid.Format(it.name))
	changed, err := p.materialiseOnce(ctx, it.name, log)
	switch {
	case err == nil:
		if changed {
			log.Info("simulated boot ended; node created")
		}
	case ctx.Err() != nil:
		// Shutting down; the next Run resumes the machine from its record.
	default:
		delay := p.backoff(it.attempt)
		log.Warn("creating node failed; retrying", "attempt", it.attempt+1, "retryIn", delay, "err", err)
		it.due, it.attempt = p.now().Add(delay), it.attempt+1
		p.queue.add(it)
	}
}

// materialiseOnce makes the machine's Node match its record: present if the
// record is, absent if the record is gone or being deleted. An error is
// worth retrying; a damaged record is logged and dropped.
func (p *Provider) materialiseOnce(ctx context.Context, name string, log *slog.Logger) (changed bool, err error) {
	leases := p.client.CoordinationV1().Leases(p.namespace)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Deleted before its boot ended; make sure no Node was left by a
		// create that raced with the delete.
		return p.deleteNode(ctx, name)
	case err != nil:
		return false, fmt.Errorf("get lease %s/%s: %w", p.namespace, name, err)
	case lease.Labels[providers.LabelCluster] != p.cluster:
		log.Error("machine record belongs to another cluster; not creating its node", "owner", lease.Labels[providers.LabelCluster])
		return false, nil
	case lease.DeletionTimestamp != nil:
		return p.deleteNode(ctx, name)
	}
	rec, err := recordFromLease(lease)
	if err != nil {
		log.Error("can't create node: machine record is damaged; delete the machine", "err", err)
		return false, nil
	}
	node, err := p.node(rec)
	if err != nil {
		log.Error("can't create node", "err", err)
		return false, nil
	}
	_, err = p.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		existing, err := p.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get node %q: %w", name, err)
		}
		if why := p.notOurs(existing); why != "" {
			log.Error("can't create node: a node of that name exists and isn't ours; delete the machine", "reason", why)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create node %q: %w", name, err)
	}
	// Delete removes the record before the Node. If it ran between our Get
	// and Create, its Node deletion came too early: look again.
	lease, err = leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && lease.DeletionTimestamp != nil:
		_, err := p.deleteNode(ctx, name)
		return false, err
	case err != nil:
		// The retry looks again.
		return true, fmt.Errorf("check lease %s/%s after creating the node: %w", p.namespace, name, err)
	}
	return true, nil
}

// backoff is the delay before retry attempt+1: exponential, capped, with
// jitter so a burst of failures doesn't retry in lockstep.
func (p *Provider) backoff(attempt int) time.Duration {
	d := p.retryMax
	if attempt < 30 {
		d = min(p.retryBase<<attempt, p.retryMax)
	}
	return d/2 + rand.N(d/2+1)
}

// bootItem is one machine waiting for its simulated boot to end.
type bootItem struct {
	name    string
	group   string // for logs
	due     time.Time
	attempt int // failed Node creations so far
	index   int // in bootQueue.items
}

// bootQueue orders the machines still booting by the time their boot ends.
// Create and Delete change it; Run's loop pops from it.
type bootQueue struct {
	mu     sync.Mutex // guards items and byName
	items  bootHeap
	byName map[string]*bootItem
	// wake tells Run's loop to look at the queue again; it holds at most
	// one signal.
	wake chan struct{}
}

func newBootQueue() *bootQueue {
	return &bootQueue{byName: make(map[string]*bootItem), wake: make(chan struct{}, 1)}
}

// add queues a machine for its due time. A machine already queued keeps
// the earlier time.
func (q *bootQueue) add(it bootItem) {
	q.mu.Lock()
	if old, ok := q.byName[it.name]; ok {
		if it.due.Before(old.due) {
			old.due = it.due
			heap.Fix(&q.items, old.index)
		}
		old.attempt = max(old.attempt, it.attempt)
	} else {
		heap.Push(&q.items, &it)
		q.byName[it.name] = &it
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *bootQueue) remove(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if it, ok := q.byName[name]; ok {
		heap.Remove(&q.items, it.index)
		delete(q.byName, name)
	}
}

// popDue removes and returns the machines due by now.
func (q *bootQueue) popDue(now time.Time) []bootItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []bootItem
	for len(q.items) > 0 && !q.items[0].due.After(now) {
		it := heap.Pop(&q.items).(*bootItem)
		delete(q.byName, it.name)
		out = append(out, *it)
	}
	return out
}

// next returns the earliest due time.
func (q *bootQueue) next() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return time.Time{}, false
	}
	return q.items[0].due, true
}

func (q *bootQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// bootHeap implements heap.Interface; bootQueue.mu guards it.
type bootHeap []*bootItem

func (h bootHeap) Len() int           { return len(h) }
func (h bootHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h bootHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *bootHeap) Push(x any) {
	it := x.(*bootItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *bootHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
