package standin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Drain taints the node as CA does and evicts, through the Eviction API, exactly the pods CA
// would: not the DaemonSet's, not the mirror pod, not a pod on another node.
func TestDrainEvictsWhatCAWouldEvict(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	onNode := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	web, other := onNode("web", "n1"), onNode("elsewhere", "n2")
	ds := onNode("agent", "n1")
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", APIVersion: "apps/v1"}}
	mirror := onNode("static", "n1")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	done := onNode("job", "n1")
	done.Status.Phase = corev1.PodSucceeded
	kube := fake.NewClientset(node, web, other, ds, mirror, done)
	var evicted []string
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		evicted = append(evicted, name)
		// The kubelet stops the pod and the API removes it.
		return true, nil, kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "ns", name)
	})
	s := &StandIn{o: Options{Kube: kube}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := s.Drain(ctx, "n1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(evicted) != 1 || evicted[0] != "web" {
		t.Errorf("evicted %v, want only web", evicted)
	}
	tainted := false
	for _, tt := range got.Spec.Taints {
		tainted = tainted || (tt.Key == TaintToBeDeleted && tt.Effect == corev1.TaintEffectNoSchedule)
	}
	if !tainted || got.Spec.Unschedulable {
		t.Errorf("node after the drain: taints %v, unschedulable %v; want CA's %s taint and no cordon", got.Spec.Taints, got.Spec.Unschedulable, TaintToBeDeleted)
	}
	// A second drain adds no second taint.
	again, err := s.Drain(ctx, "n1", 10*time.Second)
	if err != nil || len(again.Spec.Taints) != 1 {
		t.Errorf("second drain: taints %v, %v; want the one taint", again.Spec.Taints, err)
	}
}
