package standin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/prebake-dev/prebake/e2e/wait"
)

// TaintToBeDeleted is the taint CA puts on a node it is about to delete
// (cluster-autoscaler/utils/taints: ToBeDeletedByClusterAutoscaler, NoSchedule, the value the
// Unix time it was added), so that nothing new schedules there while it drains.
const TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"

// Drain empties node the way CA's scale-down does before it calls DeleteNodes
// (cluster-autoscaler/core/scaledown/actuation): it taints the node ToBeDeletedByClusterAutoscaler,
// then evicts every pod on it through the Eviction API, except mirror pods and DaemonSet pods,
// which CA leaves to the node's deletion; and waits until the evicted pods are gone, which on a
// real node means its kubelet stopped their containers. CA does not cordon
// (--cordon-node-before-terminating defaults to false), and neither does Drain. It returns the
// node as it is after the taint, for DeleteNodes.
func (s *StandIn) Drain(ctx context.Context, name string, bound time.Duration) (*corev1.Node, error) {
	nodes := s.o.Kube.CoreV1().Nodes()
	var node *corev1.Node
	// The taint goes on with an optimistic update, retried on a conflict (the kubelet updates
	// the Node's status, not its spec, but prebake's annotations land on the same object).
	if err := wait.Poll(ctx, bound, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, t := range n.Spec.Taints {
			if t.Key == TaintToBeDeleted {
				node = n
				return true, nil
			}
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintToBeDeleted, Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: corev1.TaintEffectNoSchedule})
		n, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err):
			return false, nil
		case err != nil:
			return false, err
		}
		node = n
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("drain %s: taint %s: %w", name, TaintToBeDeleted, err)
	}

	pods, err := s.o.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return nil, fmt.Errorf("drain %s: list its pods: %w", name, err)
	}
	var evicted []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName != name || !evictable(&p) {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		if err := s.o.Kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("drain %s: evict pod %s/%s: %w", name, p.Namespace, p.Name, err)
		}
		evicted = append(evicted, p)
	}
	if err := wait.Poll(ctx, bound, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, p := range evicted {
			got, err := s.o.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return false, err
			case got.UID == p.UID:
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("drain %s: %d evicted pod(s) still there: %w", name, len(evicted), err)
	}
	s.emit(Event{At: time.Now(), Kind: EventDrained, Subject: name, Detail: fmt.Sprintf("%d pod(s) evicted", len(evicted))})
	return node, nil
}

// evictable is what CA's drain evicts: not a mirror pod (the kubelet owns it), not a
// DaemonSet's pod, not one that already finished.
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return false
		}
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}
