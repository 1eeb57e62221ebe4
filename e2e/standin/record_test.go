package standin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPodBoundBeforeRunning: the watch's first sight of spec.nodeName is the pod's PodBound,
// kept apart from its Running, and both reach the instance whose Node the pod runs on.
func TestPodBoundBeforeRunning(t *testing.T) {
	s := &StandIn{trigger: make(chan struct{}, 1), pods: map[types.UID]*podSeen{}, nodes: map[string]*nodeSeen{},
		instances: map[string]*Instance{"p://1": {ID: "p://1"}}, order: []string{"p://1"}}
	s.onNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{ProviderID: "p://1"}})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1"}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	s.onPod(pod)
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "n1"
	bound.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	s.onPod(bound)
	in, _ := s.Instance("p://1")
	if !in.PodRunning.IsZero() {
		t.Fatalf("a bound pod that does not run yet: PodRunning %v, want zero", in.PodRunning)
	}
	running := bound.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	s.onPod(running)
	s.onPod(running) // a later update changes neither moment
	in, _ = s.Instance("p://1")
	ps := s.pods["u1"]
	if in.PodBound.IsZero() || in.PodRunning.IsZero() || in.PodBound.After(in.PodRunning) {
		t.Fatalf("PodBound %v, PodRunning %v: want the bind seen first, both recorded", in.PodBound, in.PodRunning)
	}
	if !in.PodBound.Equal(ps.bound) || !in.PodRunning.Equal(ps.running) {
		t.Errorf("instance PodBound %v / PodRunning %v, the pod's %v / %v", in.PodBound, in.PodRunning, ps.bound, ps.running)
	}
}
