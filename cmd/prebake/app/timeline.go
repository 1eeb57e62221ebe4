package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/workqueue"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/nodetimeline"
)

// timelineCore is what the timeline adapters need of the core.
type timelineCore interface {
	Timeline(providerID string) (autoscaling.InstanceTimeline, bool)
	ObservePodRunning(providerID string, at time.Time)
	ObserveBootstrap(providerID string, phases []autoscaling.BootstrapPhase, total time.Duration)
}

// timelineWriter copies the moments the core observed of a machine onto its Node, as
// nodetimeline.Annotation, so `prebake timeline` finds them after this process is gone. The
// Node watch enqueues names; one worker patches, off every request path. A moment once on
// the Node keeps its value.
type timelineWriter struct {
	client kubernetes.Interface
	core   timelineCore
	nodes  cache.Store // the Node watch's cache
	queue  workqueue.TypedRateLimitingInterface[string]
	log    *slog.Logger
	// forbidden is set once a patch was refused, so the hint is logged once.
	forbidden atomic.Bool
}

// timelinePatchRetries bounds the retries of one Node's patch; the next Node update
// enqueues it again.
const timelinePatchRetries = 5

func newTimelineWriter(client kubernetes.Interface, core timelineCore, nodes cache.Store, log *slog.Logger) *timelineWriter {
	return &timelineWriter{
		client: client, core: core, nodes: nodes, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "prebake-timeline"}),
	}
}

func (w *timelineWriter) enqueue(node string) { w.queue.Add(node) }

// run patches until ctx ends.
func (w *timelineWriter) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for {
		name, quit := w.queue.Get()
		if quit {
			return
		}
		err := w.sync(ctx, name)
		switch {
		case err == nil || ctx.Err() != nil:
			w.queue.Forget(name)
		case apierrors.IsForbidden(err):
			w.queue.Forget(name)
			if !w.forbidden.Swap(true) {
				w.log.Warn("timeline: can't annotate Nodes; prebake timeline will lack prebake's moments", "node", name, "err", err,
					"hint", "grant prebake's ServiceAccount patch on nodes (deploy/base/prebake-rbac.yaml)")
			}
		case w.queue.NumRequeues(name) < timelinePatchRetries:
			w.queue.AddRateLimited(name)
		default:
			w.queue.Forget(name)
			w.log.Warn("timeline: Node not annotated; retried on its next update", "node", name, "err", err)
		}
		w.queue.Done(name)
	}
}

// sync brings one Node's annotation up to what the core knows.
func (w *timelineWriter) sync(ctx context.Context, name string) error {
	obj, ok, err := w.nodes.GetByKey(name)
	if err != nil || !ok {
		return err // gone: nothing to write
	}
	n, ok := obj.(*corev1.Node)
	if !ok || n.Spec.ProviderID == "" {
		return nil
	}
	tl, ok := w.core.Timeline(n.Spec.ProviderID)
	if !ok || tl.Adopted {
		return nil // not requested by this process: it knows none of the moments
	}
	cur, present := n.Annotations[nodetimeline.Annotation]
	have, err := nodetimeline.ParseMoments(cur)
	if err != nil {
		w.log.Warn("timeline: replacing an unreadable annotation", "node", name, "err", err)
		have, present = nodetimeline.Moments{}, false
	}
	want := have.Merge(nodetimeline.Moments{
		Requested: tl.Requested, Accepted: tl.Accepted, Running: tl.Running,
		Registered: tl.Registered, Ready: tl.Ready, PodRunning: tl.PodRunning,
		FromWarmPool: tl.FromWarmPool,
	})
	if want.IsZero() || present && want == have {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodetimeline.Annotation: want.Format()}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = w.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "prebake"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// observeBootstrap hands the node script's report on n to the core's histograms (once per
// machine: the core ignores repeats).
func observeBootstrap(core timelineCore, n *corev1.Node, log *slog.Logger) {
	v, ok := n.Annotations[bootstrap.NodeAnnotation]
	if !ok {
		return
	}
	r, err := bootstrap.ParseNodeAnnotation(v)
	if err != nil {
		log.Debug("timeline: unreadable bootstrap report", "node", n.Name, "err", err)
		return
	}
	phases := make([]autoscaling.BootstrapPhase, 0, len(r.Phases))
	for _, p := range r.Phases {
		phases = append(phases, autoscaling.BootstrapPhase{Name: p.Name, Result: p.Result, Duration: p.Duration()})
	}
	core.ObserveBootstrap(n.Spec.ProviderID, phases, time.Duration(r.TotalMs)*time.Millisecond)
}

// podWatchBound is how long a new Node's pods are watched for the first Running one: CA's
// default --scale-down-unneeded-time (10 min) removes a node nothing runs on well before.
const podWatchBound = 30 * time.Minute

// podWatches find the first pod Running on each new Node: one watch per Node, on the pods
// with that spec.nodeName only, from the Node's registration until a pod (not a DaemonSet's,
// not a static pod) runs, the Node goes, or podWatchBound passes. Only Nodes of machines this
// process requested are watched, so the cost is one short watch per scale-up's node.
type podWatches struct {
	client    kubernetes.Interface
	core      timelineCore
	log       *slog.Logger
	onRunning func(node string)

	mu sync.Mutex // guards active and finished
	// active holds each Node's running watch; finished the Nodes whose watch ended (found a
	// pod, or gave up), until the Node is deleted.
	active   map[string]*podWatch
	finished map[string]bool
}

type podWatch struct{ cancel context.CancelFunc }

func newPodWatches(client kubernetes.Interface, core timelineCore, log *slog.Logger, onRunning func(string)) *podWatches {
	return &podWatches{client: client, core: core, log: log, onRunning: onRunning,
		active: map[string]*podWatch{}, finished: map[string]bool{}}
}

// ensure starts the watch for n if it needs one. Its goroutine stops with ctx.
func (p *podWatches) ensure(ctx context.Context, n *corev1.Node) {
	tl, ok := p.core.Timeline(n.Spec.ProviderID)
	if !ok || tl.Adopted || !tl.PodRunning.IsZero() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active[n.Name] != nil || p.finished[n.Name] {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, podWatchBound)
	w := &podWatch{cancel: cancel}
	p.active[n.Name] = w
	go p.watch(wctx, w, n.Name, n.Spec.ProviderID)
}

// forget stops n's watch; the Node is gone.
func (p *podWatches) forget(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.active[node]; w != nil {
		w.cancel()
	}
	delete(p.active, node)
	delete(p.finished, node)
}

func (p *podWatches) watch(ctx context.Context, w *podWatch, node, providerID string) {
	defer func() {
		w.cancel()
		p.mu.Lock()
		if p.active[node] == w { // not forgotten meanwhile
			delete(p.active, node)
			p.finished[node] = true
		}
		p.mu.Unlock()
	}()
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	pods := p.client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return pods.Watch(ctx, o)
		},
	}
	// The wrapper tells the reflector whether the client streams lists (a fake does not).
	_, err := watchtools.UntilWithSync(ctx, cache.ToListWatcherWithWatchListSemantics(lw, p.client), &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
		pod, ok := e.Object.(*corev1.Pod)
		return ok && e.Type != watch.Deleted && pod.Spec.NodeName == node && pod.Status.Phase == corev1.PodRunning && nodetimeline.Workload(pod), nil
	})
	if err != nil {
		if ctx.Err() == nil || ctx.Err() == context.DeadlineExceeded {
			p.log.Debug("timeline: no pod Running seen on the node", "node", node, "err", err)
		}
		return
	}
	p.core.ObservePodRunning(providerID, time.Now())
	p.onRunning(node)
}
