package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/providers"
)

// KubeNodes watches the workload cluster's Nodes that carry this cluster's
// ownership label and deletes Node objects of deleted machines. It keeps each
// new machine's timeline on its Node (nodetimeline.Annotation), feeds the
// node script's report and the first pod Running into the core's histograms.
type KubeNodes struct {
	client  kubernetes.Interface
	cluster string

	mu      sync.Mutex // guards synced and lastErr
	synced  bool
	lastErr error
}

// NewKubeNodes returns an autoscaling.NodeClient and node watcher over
// client.
func NewKubeNodes(client kubernetes.Interface, cluster string) *KubeNodes {
	return &KubeNodes{client: client, cluster: cluster}
}

// DeleteNode implements autoscaling.NodeClient.
func (k *KubeNodes) DeleteNode(ctx context.Context, name string) error {
	err := k.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	return nil
}

// Watch starts feeding c.ObserveNode and returns at once: the cluster may
// be unreachable, or forbid the list, for as long as it likes without
// holding up the caller (a server that waits here never hears its SIGTERM).
// Synced says when the Node list has arrived, and otherwise what the watch
// waits for. Everything Watch starts stops when ctx ends.
func (k *KubeNodes) Watch(ctx context.Context, c *autoscaling.Core, log *slog.Logger) error {
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = providers.LabelCluster + "=" + k.cluster
		}))
	inf := factory.Core().V1().Nodes().Informer()
	writer := newTimelineWriter(k.client, c, inf.GetStore(), log)
	pods := newPodWatches(k.client, c, log, writer.enqueue)
	observe := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || n.Spec.ProviderID == "" {
			return
		}
		c.ObserveNode(n.Name, n.Spec.ProviderID, providers.NodeReady(n), time.Now())
		observeBootstrap(c, n, log)
		pods.ensure(ctx, n)
		writer.enqueue(n.Name)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				c.ForgetNode(n.Spec.ProviderID)
				pods.forget(n.Name)
			}
		},
	}); err != nil {
		return err
	}
	noteErr := func(err error) {
		if k.setErr(err) {
			log.Warn("node watch: can't list or watch Nodes; retrying", "err", err, "hint", watchHint(err))
		}
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		noteErr(err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return err
	}
	selector := providers.LabelCluster + "=" + k.cluster
	log.Info("node watch: waiting for the Node list", "labelSelector", selector)
	factory.Start(ctx.Done())
	go writer.run(ctx)
	go func() {
		// The informer retries a refused connection inside its watch
		// without reporting it; a one-object list until the API answers
		// says why the watch waits.
		for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
			_, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1})
			if err == nil || ctx.Err() != nil {
				break
			}
			noteErr(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
		for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() == nil {
					log.Error("node watch: cache did not sync", "type", fmt.Sprint(typ))
				}
				return
			}
		}
		k.mu.Lock()
		k.synced, k.lastErr = true, nil
		k.mu.Unlock()
		log.Info("node watch: synced")
	}()
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return nil
}

// setErr records the watch's latest error and reports whether it differs
// from the one before (so a retry loop logs each new reason once).
func (k *KubeNodes) setErr(err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := k.lastErr == nil || k.lastErr.Error() != err.Error()
	k.lastErr = err
	return changed
}

// Synced is nil once the Node list has arrived; before, it says what the
// watch waits for and its last error.
func (k *KubeNodes) Synced() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.synced:
		return nil
	case k.lastErr != nil:
		return fmt.Errorf("node watch: waiting for the Node list; last error: %w (%s)", k.lastErr, watchHint(k.lastErr))
	}
	return errors.New("node watch: waiting for the Node list")
}

// watchHint says what to do about a list or watch error.
func watchHint(err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return "grant prebake's ServiceAccount list and watch on nodes (deploy/base/prebake-rbac.yaml)"
	case apierrors.IsUnauthorized(err):
		return "the credentials of the kubeconfig or ServiceAccount are not accepted"
	}
	return "check that the API server in the kubeconfig is reachable and its CA matches"
}
