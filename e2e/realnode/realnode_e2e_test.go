//go:build e2e

package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/wait"
	"github.com/prebake-dev/prebake/nodetimeline"
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
	var cols, sched []string
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
			// The node's boot check found every image the machine image's manifest lists.
			if ph, ok := boot.Status.Phase("images"); !ok || ph.Result != "ok" || len(boot.Status.MissingImages) > 0 || len(rep.MissingImages) > 0 {
				t.Errorf("prebaked node %s: images phase %+v (present %v), missing %v / %v; want every baked image present", node.Name, ph, ok, boot.Status.MissingImages, rep.MissingImages)
			}
			if node.Labels[providers.LabelImage] != img.ID {
				t.Errorf("prebaked node %s: label %s=%q, want %s", node.Name, providers.LabelImage, node.Labels[providers.LabelImage], img.ID)
			}
		}
		checkTimelineReport(t, s, node.Name, p.group, in, boot)
		run := Measure(in, boot)
		for _, m := range run {
			if m.Unmeasured() {
				t.Errorf("%s node %s: phase %q (%s → %s) was not measured", p.kind, node.Name, m.Phase, m.From, m.To)
			}
		}
		runs = append(runs, run)
		cols = append(cols, fmt.Sprintf("%s (%s)", p.kind, node.Name))
		sched = append(sched, s.scheduledNote(p.key, node.Name, in))
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

	// What a user sees: `prebake timeline` over both real nodes, kept for docs/timeline.md.
	tl := s.runTimeline("-o", "markdown")
	t.Logf("prebake timeline --cluster %s -o markdown:\n%s", s.cluster, tl)
	addReportText("prebake timeline over the real nodes of this run (`prebake timeline --cluster " + s.cluster + " -o markdown`):\n\n" + tl)

	c := Compare(fmt.Sprintf("Pending pod → pod Running on real nodes (docker provider, %s), measured:", w.HostDescription(s.ctx)), cols, runs...)
	c.Notes = append(c.Notes, fmt.Sprintf("prebaked image %s: built by `prebake images build` in %s (builder boot, install, pod images pulled, commit).", img.ID, img.Took.Round(time.Second)),
		"Binaries come from a file server on the Docker network's gateway (the stand-in for the upstream download, sha256-checked); Debian packages from Debian's mirror; pod images from a local registry.",
		"Where Node Ready → pod Running went (PodScheduled and the container's start, API times in whole seconds): "+strings.Join(sched, "; ")+".")
	t.Logf("\n%s", c.Markdown())
	addReport(c)

	// Scale down as CA's does: drain (CA's taint, then the pods evicted; the real kubelet
	// stops them), then DeleteNodes.
	for _, g := range []string{groupVanilla, groupPrebaked} {
		n := nodes[g]
		node, err := s.standin.Drain(s.ctx, n.name, 2*time.Minute)
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
	// No orphan anywhere: one containerd volume (the machine's), one Node of the group.
	left, err := Leftovers(s.ctx, w.Engine, s.cluster)
	if err != nil {
		t.Fatal(err)
	}
	var vols []string
	for _, l := range left {
		if strings.HasPrefix(l, "volume ") {
			vols = append(vols, l)
		}
	}
	if len(vols) != 1 || vols[0] != "volume "+booting+"-containerd" {
		t.Errorf("after the restart the engine holds %v; want only the volume of %s", vols, booting)
	}
	nodes, err := w.Kube.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + s.cluster})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 {
		t.Errorf("after the restart %d Nodes of cluster %s, want 1", len(nodes.Items), s.cluster)
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

// checkTimelineReport runs `prebake timeline` (the built binary, as a user would) on the real
// node: its row is a real machine's (nothing simulated), every moment from the Pending pod to
// the first pod Running is known, the phases add up and run forward, the install is skipped
// on a prebaked image and, on a vanilla one, lasted what the node's own status file says; its
// moments agree with what the stand-in saw.
func checkTimelineReport(t *testing.T, s *scenario, node, group string, in standin.Instance, boot Boot) {
	t.Helper()
	// prebake writes the first pod Running onto the Node once its pod watch saw it.
	if err := wait.Poll(s.ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := s.w.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		m, err := nodetimeline.ParseMoments(n.Annotations[nodetimeline.Annotation])
		return err == nil && !m.PodRunning.IsZero(), err
	}); err != nil {
		t.Fatalf("node %s: no first pod Running in its %s annotation: %v", node, nodetimeline.Annotation, err)
	}
	var rep nodetimeline.Report
	if err := json.Unmarshal([]byte(s.runTimeline("--node", node, "-o", "json")), &rep); err != nil {
		t.Fatalf("prebake timeline -o json: %v", err)
	}
	if len(rep.Nodes) != 1 {
		t.Fatalf("prebake timeline --node %s: %d rows, want 1", node, len(rep.Nodes))
	}
	row := rep.Nodes[0]
	if row.Simulated != "" || rep.Simulated != 0 {
		t.Errorf("timeline of %s: a real node marked simulated (%q)", node, row.Simulated)
	}
	bad := row.Inconsistencies(time.Second)
	if in.PodRunning.Before(in.Ready) {
		// The pod ran before its Node was Ready as CA counts it (Ready=True, no not-ready
		// taint), and the stand-in's own watch saw that order too: the report is right to
		// call that phase out of order. Seen on vanilla nodes in some runs. The likely cause,
		// read in kubernetes v1.35.4 and not proven by logs here: the node lifecycle
		// controller's NoSchedule pass (doNoScheduleTaintingPass) derives the taints from the
		// Node's conditions and removes the not-ready taint kube-apiserver put on the new
		// Node while the kubelet has posted no Ready condition yet, so kube-scheduler may bind
		// in that window (the race of kubernetes/kubernetes#72129).
		phase := nodetimeline.Ready + " → " + nodetimeline.PodRunning + ":"
		if i := slices.IndexFunc(bad, func(s string) bool { return strings.HasPrefix(s, phase) }); i >= 0 {
			t.Logf("timeline of %s: %s (the stand-in saw the pod Running %s before the Node Ready)", node, bad[i], in.Ready.Sub(in.PodRunning).Round(time.Millisecond))
			bad = slices.Delete(bad, i, i+1)
		}
	}
	if len(bad) > 0 {
		t.Errorf("timeline of %s does not add up: %q", node, bad)
	}
	for _, p := range row.Phases {
		if !p.Known {
			t.Errorf("timeline of %s: phase %s unknown (%s)", node, p.Name, p.Unknown)
		}
	}
	want := map[string]string{groupVanilla: "ran", groupPrebaked: "skipped"}[group]
	if row.Bootstrap.Install != want {
		t.Errorf("timeline of %s: install %q, want %q", node, row.Bootstrap.Install, want)
	}
	// The install's duration is the node's own figure, carried unchanged.
	inst, _ := boot.Status.Phase("install")
	for _, p := range row.Bootstrap.Phases {
		if p.Name != "install" {
			continue
		}
		if d := p.Ms - inst.Duration().Milliseconds(); d < -1 || d > 1 {
			t.Errorf("timeline of %s: install %d ms, the node's status file says %s", node, p.Ms, inst.Duration())
		}
		if group == groupVanilla && p.Ms < 1000 {
			t.Errorf("timeline of %s: a runtime install of %d ms: the report lost its duration", node, p.Ms)
		}
	}
	// The API's times have whole seconds; the stand-in's watch adds its delay.
	for _, m := range []struct {
		name string
		saw  time.Time
	}{{nodetimeline.Requested, in.IncreaseSent}, {nodetimeline.Registered, in.Registered}, {nodetimeline.Ready, in.Ready}, {nodetimeline.PodRunning, in.PodRunning}} {
		got := row.Moment(m.name)
		if !got.Known() {
			t.Errorf("timeline of %s: %s unknown", node, m.name)
			continue
		}
		if d := got.At.Sub(m.saw); d > 2*time.Second || d < -2*time.Second {
			t.Errorf("timeline of %s: %s at %s, the stand-in saw %s", node, m.name, got.At.Format(time.RFC3339Nano), m.saw.Format(time.RFC3339Nano))
		}
	}
	if saw := in.Ready.Sub(in.IncreaseSent); math.Abs(row.Total.Ms-float64(saw.Milliseconds())) > 3000 {
		t.Errorf("timeline of %s: %s %.0f ms, the stand-in measured %s", node, nodetimeline.PhaseTotal, row.Total.Ms, saw)
	}
}

// runTimeline runs the built `prebake timeline` against the world's cluster.
func (s *scenario) runTimeline(args ...string) string {
	s.t.Helper()
	cmd := exec.CommandContext(s.ctx, s.w.Prebake, append([]string{"timeline", "--kubeconfig", s.w.Cluster.Kubeconfig(), "--cluster", s.cluster, "--since", "1h"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("prebake timeline %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

// scheduledNote says when kube-scheduler bound the pod and when its container started,
// against the Node Ready the stand-in saw: the two parts of Node Ready → pod Running.
func (s *scenario) scheduledNote(key, node string, in standin.Instance) string {
	ns, name, _ := strings.Cut(key, "/")
	p, err := s.w.Kube.CoreV1().Pods(ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("%s: %v", node, err)
	}
	var bound, started time.Time
	for _, c := range p.Status.Conditions {
		if c.Type == "PodScheduled" && c.Status == "True" {
			bound = c.LastTransitionTime.Time
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil {
			started = c.State.Running.StartedAt.Time
		}
	}
	return fmt.Sprintf("%s: bound %s after Ready, container started %s after Ready", node,
		bound.Sub(in.Ready).Round(100*time.Millisecond), started.Sub(in.Ready).Round(100*time.Millisecond))
}
