//go:build e2e

package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestHermeticSchedulerOptionsAndSystemNode starts a hermetic cluster with a tuned
// kube-scheduler and checks that the scheduler runs with the backoff asked for, and that
// with the system Node a pending pod is rejected by a plugin (whose QueueingHints requeue
// it on Node events) rather than failing on "no nodes available" (which only its backoff
// retries).
func TestHermeticSchedulerOptionsAndSystemNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	bins, err := Build(ctx, BuildOptions{Out: logWriter{t}})
	SkipIfUnavailable(t, err)
	dir := t.TempDir()
	h, err := NewHermetic(HermeticOptions{Binaries: bins, Dir: dir, Out: logWriter{t}, Scheduler: SchedulerOptions{
		// -v=2 makes the scheduler log the configuration it runs with.
		Verbosity: 2, PodInitialBackoff: 2 * time.Second, PodMaxBackoff: 3 * time.Second,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", h.LogTails(30))
		}
		if err := h.Stop(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// The scheduler has logged its configuration by the time /healthz answers.
	log, err := os.ReadFile(filepath.Join(dir, "logs", compScheduler+".log"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(log), "Using component config")
	if i < 0 {
		t.Fatalf("kube-scheduler's log has no \"Using component config\" line at -v=2")
	}
	// klog writes the multi-line value as `config=<`, its lines indented by a tab, ` >`.
	used, _, _ := strings.Cut(string(log[i:]), "\n >")
	for _, want := range []string{"\n\tpodInitialBackoffSeconds: 2\n", "\n\tpodMaxBackoffSeconds: 3\n"} {
		if !strings.Contains(used, want) {
			t.Errorf("kube-scheduler runs without %q:\n%s", want, used)
		}
	}

	cfg, err := h.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := AddSystemNode(ctx, h); err != nil {
		t.Fatal(err)
	}
	// Ready and without the not-ready taint, so that only the system Node's own taint is
	// left to keep the pod off it.
	poll(ctx, t, "node "+SystemNodeName+" Ready without the not-ready taint", time.Minute, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, SystemNodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == corev1.TaintNodeNotReady {
				return false, nil
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.invalid/app:0", // kwok never pulls it
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"),
			}},
		}}},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cond corev1.PodCondition
	poll(ctx, t, "pod pending Unschedulable", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod was bound to %s; the system Node must keep pods off it", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				cond = c
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(cond.Message, "untolerated taint") || strings.Contains(cond.Message, "no nodes available") {
		t.Errorf("PodScheduled = %q; want a rejection by the system Node's taint, not \"no nodes available\"", cond.Message)
	}
}
