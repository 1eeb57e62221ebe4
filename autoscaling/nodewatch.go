package autoscaling

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/prebake-dev/prebake/providers"
)

// KubeNodes watches the workload cluster's Nodes that carry this cluster's
// ownership label and deletes Node objects of deleted machines.
type KubeNodes struct {
	client  kubernetes.Interface
	cluster string
}

// NewKubeNodes returns a NodeClient and node watcher over client.
func NewKubeNodes(client kubernetes.Interface, cluster string) *KubeNodes {
	return &KubeNodes{client: client, cluster: cluster}
}

// DeleteNode implements NodeClient.
func (k *KubeNodes) DeleteNode(ctx context.Context, name string) error {
	err := k.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	return nil
}

// Watch feeds c.ObserveNode until ctx ends. It returns once the informer's
// cache has synced; the informers run until the caller cancels ctx.
func (k *KubeNodes) Watch(ctx context.Context, c *Core) error {
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = providers.LabelCluster + "=" + k.cluster
		}))
	inf := factory.Core().V1().Nodes().Informer()
	observe := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || n.Spec.ProviderID == "" {
			return
		}
		c.ObserveNode(n.Name, n.Spec.ProviderID, nodeReady(n), c.now())
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
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("node watch: cache of %v did not sync", typ)
		}
	}
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return nil
}

// nodeReady is CA's rule: the Ready condition is True and none of the
// taints that keep pods off a starting node is left. (The API server adds
// node.kubernetes.io/not-ready to a new Node whatever its condition says,
// until the node lifecycle controller lifts it.)
func nodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeNetworkUnavailable:
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
