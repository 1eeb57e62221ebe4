package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/nodetimeline"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// stubCore is a timelineCore whose timelines the test sets.
type stubCore struct {
	mu         sync.Mutex // guards the fields below
	timelines  map[string]autoscaling.InstanceTimeline
	podRunning map[string]time.Time
}

func (s *stubCore) Timeline(pid string) (autoscaling.InstanceTimeline, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tl, ok := s.timelines[pid]
	if p, seen := s.podRunning[pid]; seen {
		tl.PodRunning = p
	}
	return tl, ok
}

func (s *stubCore) ObservePodRunning(pid string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.podRunning == nil {
		s.podRunning = map[string]time.Time{}
	}
	s.podRunning[pid] = at
}

func (s *stubCore) ObserveBootstrap(string, []autoscaling.BootstrapPhase, time.Duration) {}

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func testNode(name, pid string, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: map[string]string{providers.LabelCluster: "t"}},
		Spec: corev1.NodeSpec{ProviderID: pid}}
}

func patches(c *kubefake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			n++
		}
	}
	return n
}

// The writer puts what the core saw on the Node, merges with what is there (a written moment
// keeps its value), writes nothing when nothing changed, and leaves adopted machines alone.
func TestTimelineWriterAnnotatesNodes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	core := &stubCore{timelines: map[string]autoscaling.InstanceTimeline{
		"fake://a": {Group: "g", Requested: t0, Accepted: t0.Add(40 * time.Millisecond), Registered: t0.Add(2 * time.Second)},
		// The core gives adopted machines no times; the writer skips them whatever it gets.
		"fake://b": {Group: "g", Adopted: true, Requested: t0},
	}}
	earlier := "requested=2026-12-02T09:59:59.000Z"
	a := testNode("a", "fake://a", map[string]string{nodetimeline.Annotation: earlier})
	b := testNode("b", "fake://b", nil)
	client := kubefake.NewClientset(a, b)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(a)
	_ = store.Add(b)
	w := newTimelineWriter(client, core, store, slog.New(slog.DiscardHandler))

	for _, name := range []string{"a", "b", "gone"} {
		if err := w.sync(ctx, name); err != nil {
			t.Fatalf("sync %s: %v", name, err)
		}
	}
	got, err := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "requested=2026-12-02T09:59:59.000Z accepted=2026-12-02T10:00:00.040Z registered=2026-12-02T10:00:02.000Z"
	if v := got.Annotations[nodetimeline.Annotation]; v != want {
		t.Errorf("annotation = %q, want %q (the written requested kept, the rest added)", v, want)
	}
	if n := patches(client); n != 1 {
		t.Fatalf("%d patches, want 1 (none for the adopted machine or a gone Node)", n)
	}
	// The watch's cache catches up: nothing to write.
	_ = store.Update(got)
	if err := w.sync(ctx, "a"); err != nil || patches(client) != 1 {
		t.Errorf("sync of an up-to-date Node: %v, %d patches; want no new patch", err, patches(client))
	}

	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "a", fmt.Errorf("cannot patch"))
	})
	core.mu.Lock()
	tl := core.timelines["fake://a"]
	tl.Ready = t0.Add(3 * time.Second)
	core.timelines["fake://a"] = tl
	core.mu.Unlock()
	if err := w.sync(ctx, "a"); !apierrors.IsForbidden(err) {
		t.Errorf("sync without patch on nodes: %v, want Forbidden", err)
	}
}

// A machine that was a resumed warm-pool standby says so on its Node: the word
// from=warm-pool, which `prebake timeline` shows.
func TestTimelineWriterMarksResumedStandbys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	core := &stubCore{timelines: map[string]autoscaling.InstanceTimeline{
		"fake://p": {Group: "g", FromWarmPool: true, Requested: t0, Accepted: t0.Add(30 * time.Millisecond)},
		"fake://c": {Group: "g", Requested: t0, Accepted: t0.Add(40 * time.Millisecond)},
	}}
	p, c := testNode("p", "fake://p", nil), testNode("c", "fake://c", nil)
	client := kubefake.NewClientset(p, c)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(p)
	_ = store.Add(c)
	w := newTimelineWriter(client, core, store, slog.New(slog.DiscardHandler))
	for node, want := range map[string]string{
		"p": "requested=2026-12-02T10:00:00.000Z accepted=2026-12-02T10:00:00.030Z from=warm-pool",
		"c": "requested=2026-12-02T10:00:00.000Z accepted=2026-12-02T10:00:00.040Z",
	} {
		if err := w.sync(ctx, node); err != nil {
			t.Fatal(err)
		}
		got, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v := got.Annotations[nodetimeline.Annotation]; v != want {
			t.Errorf("annotation of %s = %q, want %q", node, v, want)
		}
	}
}

// The pod watch waits for the first workload pod Running on its Node: a DaemonSet's pod, a
// pod of another node or a Pending one are not it.
func TestPodWatchFindsTheFirstWorkloadPodRunning(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	core := &stubCore{timelines: map[string]autoscaling.InstanceTimeline{"fake://n1": {Group: "g", Requested: t0}}}
	client := kubefake.NewClientset()
	var mu sync.Mutex
	var notified []string
	pw := newPodWatches(client, core, slog.New(slog.DiscardHandler), func(n string) { mu.Lock(); notified = append(notified, n); mu.Unlock() })
	n1 := testNode("n1", "fake://n1", nil)
	pw.ensure(ctx, n1)
	pw.ensure(ctx, n1) // one watch per Node

	mk := func(name, node string, phase corev1.PodPhase, ds bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if ds {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "kube-proxy"}}
		}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("kube-proxy-1", "n1", corev1.PodRunning, true)
	mk("other", "n2", corev1.PodRunning, false)
	mk("web-0", "n1", corev1.PodPending, false)
	// The fake's watch has no resourceVersion: what changes before it starts is lost.
	waitForWatch(t, client, "pods", "spec.nodeName=n1")
	mu.Lock()
	if len(notified) != 0 {
		t.Errorf("notified %v before a workload pod ran", notified)
	}
	mu.Unlock()
	before := time.Now()
	p, _ := client.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
	p.Status.Phase = corev1.PodRunning
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod Running observed", func() bool { tl, _ := core.Timeline("fake://n1"); return !tl.PodRunning.IsZero() })
	if tl, _ := core.Timeline("fake://n1"); tl.PodRunning.Before(before) {
		t.Errorf("pod Running at %s, before web-0 ran (%s): a skipped pod counted", tl.PodRunning, before)
	}
	waitFor(t, "the annotation enqueued and the watch ended", func() bool {
		mu.Lock()
		defer mu.Unlock()
		pw.mu.Lock()
		defer pw.mu.Unlock()
		return len(notified) == 1 && notified[0] == "n1" && pw.active["n1"] == nil && pw.finished["n1"]
	})
	pw.forget("n1")
	if pw.finished["n1"] {
		t.Error("forget kept the finished mark of a deleted Node")
	}
}

// Wired into the Node watch with a real core: a machine the core requested gets its moments
// on its Node, registration and readiness included, with no request in the path.
func TestNodeWatchWritesTheTimeline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := fake.New()
	core, err := autoscaling.New(ctx, autoscaling.Options{
		Cluster: "t", Providers: map[string]providers.Provider{p.Name(): p},
		Groups: []autoscaling.GroupSpec{{ID: "g", Provider: p.Name(), MaxSize: 3, MachineType: "m1", Zone: "z1"}},
		Nodes:  NewKubeNodes(kubefake.NewClientset(), "t"), Workers: autoscaling.WorkerOptions{RetryBase: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	client := kubefake.NewClientset()
	if err := NewKubeNodes(client, "t").Watch(ctx, core, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	// The Node made before the informer's watch began would never reach it.
	waitForWatch(t, client, "nodes", providers.LabelCluster+"=t")
	if err := core.IncreaseSize("g", 1); err != nil {
		t.Fatal(err)
	}
	views, _ := core.Nodes("g")
	pid := views[0].ProviderID
	waitFor(t, "create accepted", func() bool { tl, _ := core.Timeline(pid); return !tl.Accepted.IsZero() })
	n := testNode(strings.TrimPrefix(pid, "fake://"), pid, nil)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var m nodetimeline.Moments
	waitFor(t, "the timeline on the Node", func() bool {
		got, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		m, err = nodetimeline.ParseMoments(got.Annotations[nodetimeline.Annotation])
		return err == nil && !m.Ready.IsZero()
	})
	tl, _ := core.Timeline(pid)
	want := nodetimeline.Moments{Requested: tl.Requested, Accepted: tl.Accepted, Running: tl.Running, Registered: tl.Registered, Ready: tl.Ready}
	for _, pair := range [][2]time.Time{{m.Requested, want.Requested}, {m.Accepted, want.Accepted}, {m.Running, want.Running}, {m.Registered, want.Registered}, {m.Ready, want.Ready}} {
		if !pair[0].Equal(pair[1].Truncate(time.Millisecond)) {
			t.Errorf("annotation %+v, want the core's %+v to the ms", m, want)
			break
		}
	}
}

// waitForWatch returns once a watch on resource with this label or field selector ("" for
// any) has begun on the fake client. The fake's watch has no resourceVersion: what changes
// between an informer's list and its watch is lost, so a test makes its objects after this.
// The fake records the action and registers the watch under one lock, so the action seen
// means the watch is there.
func waitForWatch(t *testing.T, client *kubefake.Clientset, resource, selector string) {
	t.Helper()
	waitFor(t, "the watch on "+resource+" "+selector, func() bool {
		for _, a := range client.Actions() {
			w, ok := a.(k8stesting.WatchAction)
			if !ok || a.GetResource().Resource != resource {
				continue
			}
			r := w.GetWatchRestrictions()
			if selector == "" || r.Labels != nil && r.Labels.String() == selector || r.Fields != nil && r.Fields.String() == selector {
				return true
			}
		}
		return false
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
