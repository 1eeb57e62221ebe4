package standin

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/nodetimeline"
	"github.com/prebake-dev/prebake/providers"
)

// A loop's scale-up writes the Events CA writes, in CA's words, and `prebake timeline` reads
// them: the decision and the triggering pod of the node the scale-up made.
func TestScaleUpWritesCAEvents(t *testing.T) {
	tm := tmpl("1900m", map[string]string{"pool": "p"})
	b, err := tm.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProvider{template: b, groups: []string{"small"}, instances: map[string][]*protos.Instance{}}
	p := pod("web", "500m", map[string]string{"pool": "p"})
	p.UID = "uid-web"
	p.CreationTimestamp = metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
	}}}
	kube := fake.NewClientset(p)
	s, err := New(Options{Conn: dialFake(t, f), Kube: kube, Namespace: "ns", CAEventsNamespace: "kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.Loop(ctx)
	if err != nil || res.ScaleUp == nil {
		t.Fatalf("loop: %+v, %v; want a scale-up", res.ScaleUp, err)
	}
	var events []corev1.Event
	deadline := time.Now().Add(10 * time.Second)
	for len(events) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d Events written, want 2", len(events))
		}
		l, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		events = l.Items
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]corev1.Event{}
	for _, e := range events {
		got[e.Reason] = e
	}
	d, tr := got[nodetimeline.ReasonScaledUpGroup], got[nodetimeline.ReasonTriggeredScaleUp]
	if d.Namespace != "kube-system" || d.InvolvedObject.Name != StatusConfigMap || d.Message != "Scale-up: setting group small size to 1 instead of 0 (max: 5)" {
		t.Errorf("decision Event %s/%s about %s: %q", d.Namespace, d.Name, d.InvolvedObject.Name, d.Message)
	}
	if tr.Namespace != p.Namespace || tr.InvolvedObject.UID != p.UID || tr.Message != "pod triggered scale-up: [{small 0->1 (max: 5)}]" {
		t.Errorf("trigger Event %s/%s: %q", tr.Namespace, tr.Name, tr.Message)
	}

	// The next listing matches the instance with its IncreaseSize.
	if _, err := s.Loop(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	id := f.instances["small"][0].GetId()
	f.mu.Unlock()
	in, ok := s.Instance(id)
	if !ok || in.IncreaseSent.IsZero() {
		t.Fatalf("instance %+v not matched with its IncreaseSize", in)
	}
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "small-1", CreationTimestamp: metav1.Now(),
		Labels:      map[string]string{providers.LabelGroup: "small"},
		Annotations: map[string]string{nodetimeline.Annotation: nodetimeline.Moments{Requested: in.IncreaseSent.Add(time.Millisecond)}.Format()}}}
	r := nodetimeline.Build(nodetimeline.Input{Nodes: []corev1.Node{node}, Pods: []corev1.Pod{*p}, Events: events, Now: time.Now()})
	row := r.Nodes[0]
	if !row.Moment(nodetimeline.CADecision).Known() || row.Trigger.Pod != p.Namespace+"/"+p.Name || row.Trigger.Component != EventComponent ||
		!strings.Contains(row.Trigger.Decision, "small size to 1") {
		t.Errorf("the report of the stand-in's Events: decision %+v, trigger %+v", row.Moment(nodetimeline.CADecision), row.Trigger)
	}
}
