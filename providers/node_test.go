package providers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeReady(t *testing.T) {
	t.Parallel()
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	tests := []struct {
		name string
		node corev1.Node
		want bool
	}{
		{"ready", corev1.Node{Status: corev1.NodeStatus{Conditions: ready}}, true},
		{"no condition", corev1.Node{}, false},
		{"condition false", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}}, false},
		{"not-ready taint left", corev1.Node{
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: ready}}, false},
		{"user taint only", corev1.Node{
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "team", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: ready}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := NodeReady(&tc.node); got != tc.want {
				t.Fatalf("NodeReady = %v, want %v", got, tc.want)
			}
		})
	}
}
