//go:build e2e

package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/bootstrap"
)

// runName is unique per test run: the engine's labels and the network name carry it.
func runName(t *testing.T) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "prebake-realnode-" + hex.EncodeToString(b)
}

// TestRealNodeJoinsAndRunsAPod boots one vanilla node (runtime install) and follows it to a
// Running pod, printing the measured phases.
func TestRealNodeJoinsAndRunsAPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	e := setup(ctx, t, runName(t))
	images := podImagesTar(t)

	name := e.name + "-n1"
	n := e.bootNode(ctx, name, nil)
	nctx, ncancel := context.WithTimeout(ctx, 15*time.Minute)
	registered, ready, err := e.waitNode(nctx, n)
	ncancel()
	if err != nil {
		t.Fatal(err)
	}
	node, err := e.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["prebake.dev/group"] != "real" || node.Spec.PodCIDR == "" {
		t.Errorf("node labels %v podCIDR %q: want prebake.dev/group=real and a podCIDR", node.Labels, node.Spec.PodCIDR)
	}

	if err := e.importImages(ctx, n, images); err != nil {
		t.Fatal(err)
	}
	podCreated := time.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": name},
			Containers:   []corev1.Container{{Name: "hello", Image: HelloImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := e.kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, got, err := e.waitPodRunning(ctx, pod.Namespace, pod.Name, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != name || got.Status.PodIP == "" || !podIPIn(got.Status.PodIP, node.Spec.PodCIDR) {
		t.Errorf("pod on %q with IP %q; want node %s and an IP in its podCIDR %s", got.Spec.NodeName, got.Status.PodIP, name, node.Spec.PodCIDR)
	}

	st, ok, err := e.status(ctx, n)
	if err != nil || !ok || st.Result != "ok" || st.Prebaked {
		t.Fatalf("node status: %+v ok=%v err=%v; want result ok on a vanilla image", st, ok, err)
	}
	if ph, _ := st.Phase("install"); ph.Result != "ok" {
		t.Errorf("install phase %+v, want ok (runtime install)", ph)
	}
	e.printTimeline(ctx, n, st, registered, ready, podCreated, running)
}

// TestRealNodeWrongCAHashFailsWithTheNodesError renders the user-data with a CA pin that
// is not the cluster's: kubeadm join must refuse the cluster, and the failure the test sees
// is the node's own (its status error and kubeadm's output from cloud-init's log).
func TestRealNodeWrongCAHashFailsWithTheNodesError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	e := setup(ctx, t, runName(t))
	wrong := "sha256:" + strings.Repeat("0", 64)
	n := e.bootNode(ctx, e.name+"-badca", func(in *bootstrap.Input) { in.Cluster.CACertHashes = []string{wrong} })
	nctx, ncancel := context.WithTimeout(ctx, 15*time.Minute)
	_, _, err := e.waitNode(nctx, n)
	ncancel()
	if err == nil {
		t.Fatal("a node pinned to the wrong CA joined")
	}
	t.Logf("the node's error, as a scenario reports it:\n%v", err)
	// kubeadm names the key it found (the cluster's) and refuses it for not being pinned.
	for _, want := range []string{"join: kubeadm join", `none of the public keys "` + e.caHash + `" are pinned`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q (the node's own words)", want)
		}
	}
}

func (e *env) waitPodRunning(ctx context.Context, ns, name string, bound time.Duration) (time.Time, *corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		p, err := e.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return time.Now(), p, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, p, fmt.Errorf("pod %s/%s not Running: %w; last status %+v", ns, name, ctx.Err(), statusOf(p))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func statusOf(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

func podIPIn(ip, cidr string) bool {
	prefix := strings.Join(strings.Split(cidr, ".")[:3], ".") + "."
	return strings.HasSuffix(cidr, "/24") && strings.HasPrefix(ip, prefix)
}

// printTimeline logs the phases of one boot. Each time is measured: the engine's start, the
// node's own clocks (systemd, cloud-init's status, the bootstrap status file; the container
// shares this host's clock), and when this test saw the Node and the pod change.
func (e *env) printTimeline(ctx context.Context, n *node, st bootstrap.Status, registered, ready, podCreated, running time.Time) {
	t := e.t
	var b strings.Builder
	rel := func(at time.Time) string { return fmt.Sprintf("%7.1f s", at.Sub(n.started).Seconds()) }
	row := func(what string, at time.Time, source string) {
		if at.IsZero() {
			fmt.Fprintf(&b, "| %s | – | %s |\n", what, source)
			return
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", what, rel(at), source)
	}
	fmt.Fprintf(&b, "\n| event (node %s) | since container start | measured by |\n|---|---:|---|\n", n.name)
	row("container started", n.started, "Engine API ContainerStart returned")
	// systemd's start: its monotonic timestamp (µs) against the node's uptime and wall clock.
	out, _, err := e.engine.exec(ctx, n.id, "sh", "-c",
		"echo $(systemctl show -p UserspaceTimestampMonotonic --value) $(cut -d' ' -f1 /proc/uptime) $(date +%s.%N)")
	var mono, up, now float64
	if _, serr := fmt.Sscan(out, &mono, &up, &now); err == nil && serr == nil {
		row("systemd started (PID 1)", time.Unix(0, int64((now-up+mono/1e6)*1e9)), "systemd UserspaceTimestampMonotonic")
	}
	if stages, err := e.cloudInitStages(ctx, n); err == nil {
		for _, s := range []string{"init-local", "init", "modules-config", "modules-final"} {
			if v, ok := stages[s]; ok {
				row("cloud-init "+s+" start", time.Unix(0, int64(v[0]*1e9)), "/run/cloud-init/status.json")
			}
		}
	}
	if end, err := e.unixExec(ctx, n, "stat", "-c", "%.9Y", bootstrap.DefaultStatusPath); err == nil {
		at := end.Add(-time.Duration(st.TotalMs) * time.Millisecond)
		row("node script start", at, "bootstrap status totalMs")
		for _, p := range st.Phases {
			at = at.Add(p.Duration())
			row(fmt.Sprintf("  %s done (%.1f s, %s)", p.Name, p.Duration().Seconds(), p.Result), at, "bootstrap status phases")
		}
	}
	row("Node registered (providerID "+n.providerID+")", registered, "API, polled every 1 s")
	row("Node Ready", ready, "API, polled every 1 s")
	row("pod created (images imported)", podCreated, "test")
	row("pod Running", running, "API, polled every 0.5 s")
	if ph, ok := st.Phase("install"); ok {
		fmt.Fprintf(&b, "\ninstall: %s (installed %s)\n", ph.Detail, strings.Join(st.Installed, " "))
	}
	t.Log(b.String())
}
