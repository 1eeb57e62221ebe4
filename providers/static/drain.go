package static

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
)

// defaultDrainPoll is how often drain retries evictions a
// PodDisruptionBudget refused and looks for pods still on the node.
const defaultDrainPoll = 2 * time.Second

// mirrorPodAnnotation marks static pods' mirrors, which can't be evicted.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// drain cordons the Node(s) with providerID and evicts their pods, within
// p.drainTimeout. DaemonSet pods and mirror pods stay: the reset stops
// them. No Node is not an error: the machine may never have joined.
func (p *Provider) drain(ctx context.Context, providerID string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, p.drainTimeout)
	defer cancel()
	nodes, err := p.nodesOf(ctx, providerID)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range nodes {
		if err := p.drainNode(ctx, n, log); err != nil {
			errs = append(errs, fmt.Errorf("drain node %q: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// nodesOf returns the names of the Nodes whose spec.providerID is id.
func (p *Provider) nodesOf(ctx context.Context, id string) ([]string, error) {
	var out []string
	opts := metav1.ListOptions{Limit: listPageSize}
	for {
		l, err := p.client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		for _, n := range l.Items {
			if n.Spec.ProviderID == id {
				out = append(out, n.Name)
			}
		}
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

func (p *Provider) drainNode(ctx context.Context, node string, log *slog.Logger) error {
	_, err := p.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("cordon: %w", err)
	}
	log.Info("node cordoned", "node", node)
	for {
		left, err := p.evictPods(ctx, node)
		if err != nil {
			return err
		}
		if left == 0 {
			log.Info("node drained", "node", node)
			return nil
		}
		t := time.NewTimer(p.drainPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%d pods still on the node after %s: %w", left, p.drainTimeout, ctx.Err())
		case <-t.C:
		}
	}
}

// evictPods asks the API server to evict every pod on node that drain
// moves, and returns how many such pods are still there.
func (p *Provider) evictPods(ctx context.Context, node string) (left int, err error) {
	pods, err := p.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return 0, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !evictable(pod) {
			continue
		}
		left++
		if pod.DeletionTimestamp != nil {
			continue // already going
		}
		err := p.client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget says not now; try again next round.
		default:
			return left, fmt.Errorf("evict pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return left, nil
}

// evictable: not finished, not a mirror pod, not a DaemonSet's.
func evictable(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; mirror {
		return false
	}
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	return true
}
