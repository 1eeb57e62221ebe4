//go:build e2e

package kubetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestBackendEndToEnd builds (or reuses) the binaries, starts the backend chosen by
// PREBAKE_E2E_BACKEND, runs a pod on a kwok node and stops the cluster, checking that no
// process survives. Run it with:
//
//	go test -tags e2e -run . -v ./internal/kubetest/ -timeout 40m
func TestBackendEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	out := logWriter{t}

	began := time.Now()
	b, err := NewBackend(ctx, "", Options{Dir: t.TempDir(), Out: out})
	SkipIfUnavailable(t, err)
	t.Logf("TIMING build (or reuse) of %s backend: %.1fs", BackendName(), time.Since(began).Seconds())

	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", b.LogTails(30))
		}
		if !stopped {
			if err := b.Stop(context.Background()); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	began = time.Now()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING start: %.1fs", time.Since(began).Seconds())

	cfg, err := b.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	const nodeName = "e2e-kwok-0"
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	began = time.Now()
	if err := b.AddNode(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "node "+nodeName+" Ready", time.Minute, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	t.Logf("TIMING node Ready: %s", time.Since(began).Round(time.Millisecond))

	began = time.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-pod", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.invalid/app:0", // kwok never pulls it
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("500m"),
				corev1.ResourceMemory: resource.MustParse("256Mi"),
			}},
		}}},
	}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	poll(ctx, t, "pod e2e-pod Running", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		running = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if running.Spec.NodeName != nodeName || running.Status.PodIP == "" {
		t.Errorf("pod runs on %q with IP %q; want node %s and an IP", running.Spec.NodeName, running.Status.PodIP, nodeName)
	}
	t.Logf("TIMING pod scheduled and Running: %s (node %s, ip %s)", time.Since(began).Round(time.Millisecond), running.Spec.NodeName, running.Status.PodIP)

	if err := b.RemoveNode(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "node "+nodeName+" deleted", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err := b.RemoveNode(ctx, nodeName); err != nil {
		t.Errorf("RemoveNode of a missing node: %v", err)
	}

	h, isHermetic := b.(*Hermetic)
	var pids map[string]int
	if isHermetic {
		pids = h.PIDs()
		if len(pids) != 5 {
			t.Errorf("PIDs() = %v, want 5 components", pids)
		}
	}
	began = time.Now()
	stopped = true
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING stop: %.1fs", time.Since(began).Seconds())
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after Stop (kill -0: %v)", name, pid, err)
		}
	}
	if isHermetic {
		if left, _ := filepath.Glob(filepath.Join(h.dir, "pids", "*.pid")); len(left) > 0 {
			t.Errorf("pid files left after Stop: %v", left)
		}
		if procs := processesMentioning(h.dir); len(procs) > 0 {
			t.Errorf("processes left after Stop: %v", procs)
		}
	}
	if err := b.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestHermeticStartFailureCleansUp makes the last component fail and checks that Start
// returns the log tails and leaves no process behind.
func TestHermeticStartFailureCleansUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	bins, err := Build(ctx, BuildOptions{Out: logWriter{t}})
	SkipIfUnavailable(t, err)

	// kwok without stages exits at once ("no stages found"): a real component failure late
	// in Start, after etcd, the apiserver, KCM and the scheduler are running.
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("# no stages\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bins.KwokStages = empty
	h, err := NewHermetic(HermeticOptions{Binaries: bins, Dir: t.TempDir(), Out: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start(ctx)
	if err == nil {
		h.Stop(ctx)
		t.Fatal("Start with kwok lacking stages succeeded; want an error")
	}
	t.Logf("Start failed as intended:\n%s", firstLines(err.Error(), 3))
	if !strings.Contains(err.Error(), "kwok") || !strings.Contains(err.Error(), "----- last") {
		t.Errorf("error does not name kwok or lacks log tails:\n%s", err)
	}
	if pids := h.PIDs(); len(pids) != 0 {
		t.Errorf("processes still tracked after failed Start: %v", pids)
	}
	if left, _ := filepath.Glob(filepath.Join(h.dir, "pids", "*.pid")); len(left) > 0 {
		t.Errorf("pid files left after failed Start: %v", left)
	}
	if procs := processesMentioning(h.dir); len(procs) > 0 {
		t.Errorf("processes left after failed Start: %v", procs)
	}
}

// processesMentioning lists live processes whose command line contains dir.
func processesMentioning(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return found
}

// poll calls cond every 50 ms until it returns true, failing the test at the deadline.
func poll(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := cond(ctx)
		if ok {
			return
		}
		lastErr = err
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached within %s (last error: %v)", what, timeout, lastErr)
		case <-tick.C:
		}
	}
}

// logWriter sends progress lines to the test log, which -v streams live.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
