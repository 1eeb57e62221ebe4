package kubetest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SystemNodeName is the name of the Node that AddSystemNode creates.
const SystemNodeName = "system-0"

// SystemNodeTaint keeps every pod that doesn't tolerate it off the system Node, as on a
// control-plane node made by kubeadm.
var SystemNodeTaint = corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}

// SystemNode returns the Node that a real cluster running cluster-autoscaler always has
// (the one CA, prebake and CoreDNS run on), for a hermetic cluster that otherwise has none:
// no providerID, so no node group owns it, and tainted with SystemNodeTaint, so pods
// that don't tolerate the taint never land on it and still need a scale-up. kwok keeps it
// Ready once it is added with AddNode.
//
// Why a cluster needs one: with no Node at all, kube-scheduler fails each attempt with
// "no nodes are registered to the cluster" and no plugin to blame, so it puts the pod in
// its error backoff queue, which no Node event moves. The pod is tried again only when its
// backoff (1 s doubling to podMaxBackoffSeconds, 10 s) has run out, up to 11 s after
// the first Node turned Ready. With one Node that rejects the pod, the rejecting plugin's
// QueueingHint sends the pod back to the active queue as soon as a Node it fits on loses
// its not-ready taint: milliseconds. docs/performance.md has the measurements.
func SystemNode() *corev1.Node {
	room := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   SystemNodeName,
			Labels: map[string]string{SystemNodeTaint.Key: "", corev1.LabelHostname: SystemNodeName},
		},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{SystemNodeTaint}},
		Status: corev1.NodeStatus{Capacity: room, Allocatable: room.DeepCopy()},
	}
}

// AddSystemNode adds SystemNode to a hermetic cluster. A kind cluster has its own
// control-plane Node already, so it is left as it is.
func AddSystemNode(ctx context.Context, b Backend) error {
	if _, ok := b.(*Kind); ok {
		return nil
	}
	return b.AddNode(ctx, SystemNode())
}
