package static

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/providers/static/statictest"
)

// TestDeleteDrainsRealNode drains a kwok-run Node on a real API server: the
// Node is cordoned, a plain pod is evicted through the eviction API, a pod a
// PodDisruptionBudget protects is refused (429) until DrainTimeout, and the
// machine is reset and released anyway.
func TestDeleteDrainsRealNode(t *testing.T) {
	t.Parallel()
	kc := statictest.StartCluster(t)
	client, err := kubernetes.NewForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sh := newFakeShell()
	p := newTestProvider(t, client, sh, pool(1), func(o *Options) { o.DrainTimeout = 5 * time.Second })
	p.drainPoll = 100 * time.Millisecond
	in, err := p.Create(ctx, request("metal-1", "metal"))
	if err != nil {
		t.Fatal(err)
	}

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "metal-node", Annotations: map[string]string{kubetest.KwokNodeAnnotation: kubetest.KwokNodeAnnotationValue}},
		Spec:       corev1.NodeSpec{ProviderID: in.ProviderID},
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{
				NodeName:   "metal-node",
				Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}},
			},
		}
	}
	for _, name := range []string{"web", "guarded"} {
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &one,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}
	if _, err := client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if took := time.Since(began); took < 5*time.Second {
		t.Errorf("Delete returned after %s, before the drain timeout: was the guarded pod evicted?", took)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "metal-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable {
		t.Error("the node was not cordoned")
	}
	web, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err == nil && web.DeletionTimestamp == nil {
		t.Error("pod web is still on the node, not evicted")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	guarded, err := client.CoreV1().Pods("default").Get(ctx, "guarded", metav1.GetOptions{})
	if err != nil || guarded.DeletionTimestamp != nil {
		t.Errorf("the PDB-protected pod was evicted (err %v)", err)
	}
	if got := sh.scripts("host-0"); len(got) != 2 || got[1] != "reset-the-machine\n" {
		t.Errorf("scripts on host-0 = %q, want the bootstrap then the reset", got)
	}
	if _, err := client.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "host-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("claim after Delete: %v, want NotFound", err)
	}
}
