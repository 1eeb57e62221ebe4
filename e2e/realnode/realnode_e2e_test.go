//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/wait"
	"github.com/prebake-dev/prebake/providers"
)

const (
	groupVanilla  = "vanilla"
	groupPrebaked = "prebaked"
)

// TestPrebakedAndVanillaScaleUp is the product's path on real nodes, twice in one run: a
// vanilla group (the base image: runtime install) and a prebaked group (the image `prebake
// images build` made from the same components). For each, a Pending pod makes the stand-in
// call IncreaseSize; prebake's docker provider starts a container; cloud-init runs the node
// script, which installs (vanilla) or skips the install (prebaked); kubeadm joins; the Node
// registers with the providerID NodeGroupNodes lists, goes Ready, and the pod runs. The
// Nodes must match their templates. Then DeleteNodes removes both machines: containers,
// volumes and Nodes. The phase table is measured from the nodes' own reports and the API.
func TestPrebakedAndVanillaScaleUp(t *testing.T) {
	w := needWorld(t)
	img := needPrebaked(t, w)
	t.Logf("prebaked image %s built by `prebake images build` in %s", img.Ref, img.Took.Round(time.Second))
	for _, c := range w.Components {
		if got := img.Manifest.Components[c.Name]; got != c.Version {
			t.Errorf("the image's manifest has %s %q, the nodes run %q", c.Name, got, c.Version)
		}
	}
	taint := providers.Taint{Key: "prebake.dev/e2e", Value: "real", Effect: "NoSchedule"}
	s := newScenario(t, w, "up", 40*time.Minute, ConfigOptions{Catalog: img.Catalog, Groups: []Group{
		{ID: groupVanilla, MaxSize: 1, Labels: map[string]string{"team": "e2e"}},
		{ID: groupPrebaked, MaxSize: 1, Prebaked: true, Labels: map[string]string{"team": "e2e"}, Taints: []providers.Taint{taint}},
	}})
	vanillaPod := s.createPod("on-vanilla", groupVanilla, nil)
	prebakedPod := s.createPod("on-prebaked", groupPrebaked, []providers.Taint{taint})

	errs := make(chan error, 2)
	for _, p := range []struct{ key, group string }{{vanillaPod, groupVanilla}, {prebakedPod, groupPrebaked}} {
		go func() { errs <- s.waitPodRunning(p.key, p.group, 25*time.Minute) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	var runs [][]Measured
	var cols []string
	nodes := map[string]*nodeAndID{}
	for _, p := range []struct{ key, group, kind string }{{vanillaPod, groupVanilla, "runtime-install"}, {prebakedPod, groupPrebaked, "prebaked"}} {
		in := s.waitInstance(p.key, func(in standin.Instance) bool { return !in.PodRunning.IsZero() && !in.Ready.IsZero() })
		if in.Group != p.group || in.ImageKind != p.kind {
			t.Errorf("instance %s: group %s kind %s, want %s %s", in.ID, in.Group, in.ImageKind, p.group, p.kind)
		}
		node := s.nodeByProviderID(in.ID)
		listed := s.listed(p.group)
		if len(listed) != 1 || listed[0].GetId() != in.ID {
			t.Errorf("NodeGroupNodes %s = %v, want only %s", p.group, listed, in.ID)
		}
		s.checkAgainstTemplate(node, s.template(p.group), in.ID)
		ct, err := s.containerOf(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		boot, err := ReadBoot(s.ctx, w.Engine, ct.ID)
		if err != nil {
			t.Fatal(err)
		}
		rep := nodeReport(t, node)
		inst, _ := boot.Status.Phase("install")
		switch p.group {
		case groupVanilla:
			if rep.Prebaked || !rep.RanInstall() || boot.Status.Prebaked || inst.Result != "ok" {
				t.Errorf("vanilla node %s: annotation %+v, install phase %+v; want a runtime install", node.Name, rep, inst)
			}
		case groupPrebaked:
			if !rep.Prebaked || rep.RanInstall() || !boot.Status.Prebaked || inst.Result != "skipped" || len(boot.Status.Installed) > 0 {
				t.Errorf("prebaked node %s: annotation %+v, install phase %+v, installed %v; want the install skipped", node.Name, rep, inst, boot.Status.Installed)
			}
			if node.Labels[providers.LabelImage] != img.ID {
				t.Errorf("prebaked node %s: label %s=%q, want %s", node.Name, providers.LabelImage, node.Labels[providers.LabelImage], img.ID)
			}
		}
		runs = append(runs, Measure(in, boot))
		cols = append(cols, fmt.Sprintf("%s (%s)", p.kind, node.Name))
		nodes[p.group] = &nodeAndID{name: node.Name, id: in.ID, container: ct.ID, volume: strings.TrimPrefix(ct.Name, "/") + "-containerd"}
		t.Logf("%s node %s: install %s (%s); installed %v", p.kind, node.Name, inst.Result, inst.Detail, boot.Status.Installed)
	}
	// The pod images: the vanilla node pulled them from the local registry, the prebaked
	// node had them (kubelet's own words in the pods' events).
	if ev := s.podEvents("on-vanilla", "Pulled"); len(ev) == 0 || !strings.Contains(strings.Join(ev, "\n"), "Successfully pulled") {
		t.Errorf("vanilla pod's Pulled events %q: want a pull from the registry", ev)
	}
	if ev := s.podEvents("on-prebaked", "Pulled"); len(ev) == 0 || !strings.Contains(strings.Join(ev, "\n"), "already present on machine") {
		t.Errorf("prebaked pod's Pulled events %q: want the image already present (baked)", ev)
	}

	c := Compare(fmt.Sprintf("Pending pod → pod Running on real nodes (docker provider, %s), measured:", w.HostDescription(s.ctx)), cols, runs...)
	c.Notes = append(c.Notes, fmt.Sprintf("prebaked image %s: built by `prebake images build` in %s (builder boot, install, pod images pulled, commit).", img.ID, img.Took.Round(time.Second)),
		"Binaries come from a file server on the Docker network's gateway (the stand-in for the upstream download, sha256-checked); Debian packages from Debian's mirror; pod images from a local registry.")
	t.Logf("\n%s", c.Markdown())
	addReport(c)

	// Scale down: DeleteNodes through the stand-in, as CA after a drain.
	for _, g := range []string{groupVanilla, groupPrebaked} {
		n := nodes[g]
		if err := w.Kube.CoreV1().Pods(s.cluster).DeleteCollection(s.ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name}); err != nil {
			t.Fatal(err)
		}
		node, err := w.Kube.CoreV1().Nodes().Get(s.ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.standin.DeleteNodes(s.ctx, g, node); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.Poll(s.ctx, 5*time.Minute, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			if _, err := w.Engine.ContainerInspect(ctx, n.container); !cerrdefs.IsNotFound(err) {
				return false, nil
			}
			if _, err := w.Engine.VolumeInspect(ctx, n.volume); !cerrdefs.IsNotFound(err) {
				return false, nil
			}
			if _, err := w.Kube.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("after DeleteNodes the containers, their volumes and the Nodes must go: %v", err)
	}
	for _, g := range []string{groupVanilla, groupPrebaked} {
		if n := s.targetSize(g); n != 0 {
			t.Errorf("target size of %s after DeleteNodes = %d, want 0", g, n)
		}
	}
	if cs, err := containersOf(s.ctx, w.Engine, s.cluster); err != nil || len(cs) != 0 {
		t.Errorf("containers of %s after DeleteNodes: %d (%v), want none", s.cluster, len(cs), err)
	}
}

type nodeAndID struct{ name, id, container, volume string }

// TestRestartWhileNodesBoot kills `prebake serve` (SIGKILL: no shutdown) while a real node
// boots, and starts it again: the node joins, its pod runs, and there is exactly one
// container, the one NodeGroupNodes lists: no duplicate, no orphan.
func TestRestartWhileNodesBoot(t *testing.T) {
	w := needWorld(t)
	s := newScenario(t, w, "rs", 30*time.Minute, ConfigOptions{Groups: []Group{{ID: groupVanilla, MaxSize: 2}}})
	pod := s.createPod("survives", groupVanilla, nil)
	// Wait until the machine is booting: its container runs, its Node is not there yet.
	var booting string
	if err := wait.Poll(s.ctx, 5*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		cs, err := s.groupContainers(ctx, groupVanilla)
		if err != nil || len(cs) == 0 {
			return false, nil
		}
		booting = strings.TrimPrefix(cs[0].Names[0], "/")
		return cs[0].State == "running", nil
	}); err != nil {
		t.Fatalf("no container of %s started: %v", groupVanilla, err)
	}
	if _, err := w.Kube.CoreV1().Nodes().Get(s.ctx, strings.TrimPrefix(booting, s.cluster+"-"), metav1.GetOptions{}); err == nil {
		t.Fatalf("node %s registered before prebake serve could be killed; the test proves nothing", booting)
	}
	pid := s.serve.PID()
	s.serve.Kill()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("prebake serve (pid %d) still runs after kill -9", pid)
	}
	t.Logf("killed prebake serve (pid %d) while %s boots", pid, booting)
	if err := s.serve.Restart(s.ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.waitPodRunning(pod, groupVanilla, 20*time.Minute); err != nil {
		t.Fatal(err)
	}
	cs, err := s.groupContainers(s.ctx, groupVanilla)
	if err != nil {
		t.Fatal(err)
	}
	listed := s.listed(groupVanilla)
	if len(cs) != 1 || len(listed) != 1 || listed[0].GetId() != "docker://"+strings.TrimPrefix(cs[0].Names[0], "/") {
		var names []string
		for _, c := range cs {
			names = append(names, c.Names[0])
		}
		t.Fatalf("after the restart: containers %v, NodeGroupNodes %v; want one container, the one listed", names, listed)
	}
	if n := s.targetSize(groupVanilla); n != 1 {
		t.Errorf("target size after the restart = %d, want 1", n)
	}
	if strings.TrimPrefix(cs[0].Names[0], "/") != booting {
		t.Errorf("the node that runs the pod is %s, not %s that booted across the restart", cs[0].Names[0], booting)
	}
}

// TestWrongCAHashFailsWithTheNodesError renders the nodes' user-data with a CA pin that is
// not the cluster's (bootstrap.caCertHashes): kubeadm join refuses the cluster, and the
// scenario fails with the node's own error, kubeadm's words from the container.
func TestWrongCAHashFailsWithTheNodesError(t *testing.T) {
	w := needWorld(t)
	wrong := "sha256:" + strings.Repeat("0", 64)
	s := newScenario(t, w, "ca", 30*time.Minute, ConfigOptions{CACertHashes: []string{wrong}, Groups: []Group{{ID: groupVanilla, MaxSize: 1}}})
	pod := s.createPod("never", groupVanilla, nil)
	err := s.waitPodRunning(pod, groupVanilla, 15*time.Minute)
	if err == nil {
		t.Fatal("a node pinned to the wrong CA joined and ran the pod")
	}
	t.Logf("the node's error, as the scenario reports it:\n%v", err)
	// kubeadm names the key it found (the cluster's) and refuses it for not being pinned.
	for _, want := range []string{"join: kubeadm join", `none of the public keys "` + w.CAHash + `" are pinned`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q (the node's own words)", want)
		}
	}
}
