package static

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prebake-dev/prebake/providers"
)

func testPod(name string, mod func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: "node-x"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if mod != nil {
		mod(pod)
	}
	return pod
}

// evictions makes the fake clientset act on evictions like the API server:
// the pod goes away, unless refuse says a PodDisruptionBudget forbids it.
// It returns the names of the pods it was asked to evict.
func evictions(cs *fake.Clientset, refuse func(pod string) bool) *[]string {
	var asked []string
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		asked = append(asked, name)
		if refuse != nil && refuse(name) {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace(), name)
	})
	return &asked
}

func TestDeleteDrainsResetsReleases(t *testing.T) {
	t.Parallel()
	yes := true
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-x"}, Spec: corev1.NodeSpec{ProviderID: "static://host-0"}}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-y"}, Spec: corev1.NodeSpec{ProviderID: "static://host-1"}}
	cs := fake.NewClientset(node, other,
		testPod("web", nil),
		testPod("pdb-guarded", nil),
		testPod("agent", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", Controller: &yes}}
		}),
		testPod("static-etcd", func(p *corev1.Pod) { p.Annotations = map[string]string{mirrorPodAnnotation: "x"} }),
		testPod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
	)
	refusals := 0
	asked := evictions(cs, func(pod string) bool {
		if pod == "pdb-guarded" && refusals < 2 {
			refusals++
			return true
		}
		return false
	})
	sh := newFakeShell()
	p := newTestProvider(t, cs, sh, pool(2), nil)
	p.drainPoll = time.Millisecond
	in, err := p.Create(t.Context(), request("metal-1", "metal"))
	if err != nil {
		t.Fatal(err)
	}
	if in.ProviderID != "static://host-0" {
		// The name decides the first machine tried; the test's Node is on host-0.
		t.Fatalf("claimed %s, want static://host-0", in.ProviderID)
	}
	if err := p.Delete(t.Context(), in.ProviderID); err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(t.Context(), "node-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable {
		t.Error("node-x is not cordoned")
	}
	if n, _ := cs.CoreV1().Nodes().Get(t.Context(), "node-y", metav1.GetOptions{}); n.Spec.Unschedulable {
		t.Error("node-y, another machine's, was cordoned")
	}
	left, err := cs.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range left.Items {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"agent", "done", "static-etcd"}, names); diff != "" {
		t.Errorf("pods left after the drain (-want +got):\n%s", diff)
	}
	if refusals != 2 {
		t.Errorf("the PDB refused %d evictions, want 2 (drain retries)", refusals)
	}
	if got := *asked; len(got) != 4 {
		t.Errorf("evictions asked: %v, want web once and pdb-guarded three times", got)
	}
	if diff := cmp.Diff([]string{"#!/bin/sh\necho bootstrap metal-1\n", "reset-the-machine\n"}, sh.scripts("host-0")); diff != "" {
		t.Errorf("scripts on host-0 (-want +got):\n%s", diff)
	}
	if n := len(claims(t, cs)); n != 0 {
		t.Errorf("%d claims after Delete, want 0", n)
	}
}

// TestDeleteDrainBounded: pods that can't be evicted hold the drain only
// for DrainTimeout; the machine is reset and released anyway.
func TestDeleteDrainBounded(t *testing.T) {
	t.Parallel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-x"}, Spec: corev1.NodeSpec{ProviderID: "static://host-0"}}
	cs := fake.NewClientset(node, testPod("stuck", nil))
	evictions(cs, func(string) bool { return true })
	sh := newFakeShell()
	p := newTestProvider(t, cs, sh, pool(1), func(o *Options) { o.DrainTimeout = 50 * time.Millisecond })
	p.drainPoll = time.Millisecond
	if _, err := p.Create(t.Context(), request("metal-1", "metal")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(t.Context(), "static://host-0"); err != nil {
		t.Fatal(err)
	}
	if n := len(sh.scripts("host-0")); n != 2 {
		t.Errorf("host-0 ran %d scripts, want bootstrap and reset", n)
	}
	if n := len(claims(t, cs)); n != 0 {
		t.Errorf("%d claims after Delete, want 0", n)
	}
}

// TestDeleteResetFailureKeepsClaim: a machine whose reset failed is not
// handed out again; it is listed as deleting until a Delete succeeds.
func TestDeleteResetFailureKeepsClaim(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	sh := newFakeShell()
	p := newTestProvider(t, cs, sh, pool(1), nil)
	if _, err := p.Create(t.Context(), request("metal-1", "metal")); err != nil {
		t.Fatal(err)
	}
	sh.failHost("host-0", &DialError{Host: "host-0", Addr: "192.0.2.1:22", Err: errors.New("connection refused")})
	err := p.Delete(t.Context(), "static://host-0")
	if err == nil || !strings.Contains(err.Error(), "stays claimed") {
		t.Fatalf("Delete with a failing reset: %v", err)
	}
	listed, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].State != providers.StateDeleting {
		t.Errorf("List = %+v, want the machine deleting", listed)
	}
	if _, err := p.Create(t.Context(), request("metal-2", "metal")); p.Classify(err).Class != providers.ErrorOutOfResources {
		t.Errorf("Create while the only machine is releasing: %v, want OutOfResources", err)
	}
	if _, err := p.Create(t.Context(), request("metal-1", "metal")); err == nil || !strings.Contains(err.Error(), "being released") {
		t.Errorf("retried Create of the releasing machine: %v", err)
	}
	sh.failHost("host-0", nil)
	if err := p.Delete(t.Context(), "static://host-0"); err != nil {
		t.Fatalf("Delete once the machine answers: %v", err)
	}
	if n := len(claims(t, cs)); n != 0 {
		t.Errorf("%d claims, want 0", n)
	}
}

func TestDeleteRejectsBadProviderIDs(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), newFakeShell(), pool(1), nil)
	for _, id := range []string{"", "kwok://a", "static://", "static://Bad_Host"} {
		if err := p.Delete(t.Context(), id); err == nil || !strings.Contains(err.Error(), "providerID") {
			t.Errorf("Delete(%q) = %v, want an error naming the providerID", id, err)
		}
	}
}
