package nodetimeline

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok"
)

// t0 is the start of the scale-ups below.
var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(math.Round(s*1000)) * time.Millisecond) }

// apiTime is how the API server keeps a metav1.Time: whole seconds.
func apiTime(s float64) metav1.Time { return metav1.NewTime(at(s).Truncate(time.Second)) }

func unixMs(s float64) string { return fmt.Sprint(at(s).UnixMilli()) }

// nodeOf builds a Node the way a cluster returns it: prebake's labels, the moments
// annotation, the node script's report, managedFields with the report's write, and a Ready
// condition from the kubelet.
type nodeOf struct {
	name, group, kind, image string
	created                  float64
	moments                  string
	report                   string
	reportWritten            float64
	readySince               float64 // 0: not Ready
	annotations              map[string]string
}

func (o nodeOf) build() corev1.Node {
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: o.name, CreationTimestamp: apiTime(o.created), Labels: map[string]string{
			providers.LabelGroup: o.group, providers.LabelCluster: "prod", providers.LabelImageKind: o.kind,
		}, Annotations: map[string]string{}},
		Spec: corev1.NodeSpec{ProviderID: "hcloud://" + strings.TrimPrefix(o.name, o.group+"-")},
	}
	if o.image != "" {
		n.Labels[providers.LabelImage] = o.image
	}
	if o.moments != "" {
		n.Annotations[Annotation] = o.moments
	}
	if o.report != "" {
		n.Annotations[bootstrap.NodeAnnotation] = o.report
		w := apiTime(o.reportWritten)
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: "kubectl-annotate", Operation: metav1.ManagedFieldsOperationUpdate, Time: &w,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:` + bootstrap.NodeAnnotation + `":{}}}}`)},
		})
	}
	for k, v := range o.annotations {
		n.Annotations[k] = v
	}
	if o.readySince > 0 {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: apiTime(o.readySince)}}
	}
	return n
}

func pod(ns, name, node string, created, started float64, daemonSet bool) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: apiTime(created)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	if daemonSet {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "kube-proxy"}}
	}
	if started > 0 {
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: apiTime(started)}}}}
	}
	return p
}

// caDecision and caTrigger are Events as cluster-autoscaler writes them (core/v1, whole
// seconds, source cluster-autoscaler).
func caDecision(group string, from, to int, s float64) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "kube-system", Name: fmt.Sprintf("cluster-autoscaler-status.%d", int(s*1000))},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "kube-system", Name: "cluster-autoscaler-status"},
		Reason:         ReasonScaledUpGroup, Source: corev1.EventSource{Component: "cluster-autoscaler"},
		Message:        fmt.Sprintf("Scale-up: setting group %s size to %d instead of %d (max: 10)", group, to, from),
		FirstTimestamp: apiTime(s), LastTimestamp: apiTime(s), Count: 1,
	}
}

func caTrigger(p corev1.Pod, group string, from, to int, s float64) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name + fmt.Sprintf(".%d", int(s*1000))},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         ReasonTriggeredScaleUp, Source: corev1.EventSource{Component: "cluster-autoscaler"},
		Message:        fmt.Sprintf("pod triggered scale-up: [{%s %d->%d (max: 10)}]", group, from, to),
		FirstTimestamp: apiTime(s), LastTimestamp: apiTime(s), Count: 1,
	}
}

// Two real-looking Hetzner nodes of one scale-up (0 → 2): one booted from a prebaked image,
// one a vanilla image that installed at boot; their bootstrap annotations are as node.sh
// writes them.
const (
	prebakedImage  = "prebake-ubuntu-2404-k8s-1-35-4-amd64-20261201t1000"
	prebakedReport = "prebaked=true total=9312ms start=%s manifest=3ms/ok plan=20ms/ok install=0ms/skipped configure=40ms/ok kubelet=5ms/ok join=9000ms/ok"
	vanillaReport  = "prebaked=false total=84210ms start=%s manifest=4ms/ok plan=61ms/ok install=80012ms/ok configure=210ms/ok kubelet=33ms/ok join=3790ms/ok podnetwork=9ms/ok"
)

func scaleUp() Input {
	web0 := pod("shop", "web-0", "cx-fsn1-ab3de", 0.4, 36.2, false)
	web1 := pod("shop", "web-1", "cx-fsn1-vq7kp", 0.9, 112.4, false)
	proxy := pod("kube-system", "kube-proxy-x8s2w", "cx-fsn1-ab3de", 31.9, 33.1, true)
	prebaked := nodeOf{
		name: "cx-fsn1-ab3de", group: "cx-fsn1", kind: "prebaked", image: prebakedImage, created: 31.8,
		moments: "requested=2026-12-02T10:00:02.512Z accepted=2026-12-02T10:00:03.104Z running=2026-12-02T10:00:14.020Z " +
			"registered=2026-12-02T10:00:31.870Z ready=2026-12-02T10:00:33.950Z podRunning=2026-12-02T10:00:36.210Z",
		report: fmt.Sprintf(prebakedReport, unixMs(23.5)), reportWritten: 33.2, readySince: 33.9,
	}
	vanilla := nodeOf{
		name: "cx-fsn1-vq7kp", group: "cx-fsn1", kind: "runtime-install", created: 107.6,
		moments: "requested=2026-12-02T10:00:02.512Z accepted=2026-12-02T10:00:03.380Z running=2026-12-02T10:00:14.020Z " +
			"registered=2026-12-02T10:01:47.702Z ready=2026-12-02T10:01:50.118Z podRunning=2026-12-02T10:01:52.560Z",
		report: fmt.Sprintf(vanillaReport, unixMs(23.9)), reportWritten: 108.3, readySince: 110.1,
	}
	return Input{
		Now:    at(600),
		Since:  time.Hour,
		Nodes:  []corev1.Node{vanilla.build(), prebaked.build()},
		Pods:   []corev1.Pod{web0, web1, proxy},
		Events: []corev1.Event{caDecision("cx-fsn1", 0, 2, 2.4), caTrigger(web0, "cx-fsn1", 0, 2, 2.6), caTrigger(web1, "cx-fsn1", 0, 2, 2.6)},
	}
}

func TestBuildPrebakedAndVanillaNodes(t *testing.T) {
	t.Parallel()
	r := Build(scaleUp())
	if len(r.Nodes) != 2 || r.Nodes[0].Name != "cx-fsn1-ab3de" || r.Simulated != 0 {
		t.Fatalf("nodes %v (simulated %d), want cx-fsn1-ab3de then cx-fsn1-vq7kp, none simulated", names(r), r.Simulated)
	}
	pre, van := r.Nodes[0], r.Nodes[1]
	for _, n := range r.Nodes {
		if got := n.Inconsistencies(time.Second); len(got) != 0 {
			t.Errorf("%s: %q", n.Name, got)
		}
		for _, p := range n.Phases {
			if !p.Known || p.Ms < 0 || p.Simulated {
				t.Errorf("%s: phase %+v: want known, in order, measured", n.Name, p)
			}
		}
	}

	wantMs := map[string]float64{
		Requested + " → " + Accepted:   592,
		Accepted + " → " + Running:     10916,
		Running + " → " + Registered:   17850,
		Registered + " → " + Ready:     2080,
		Ready + " → " + PodRunning:     2260,
		PhaseTotal:                     31438, // 10:00:33.950 − 10:00:02.512
		CADecision + " → " + Requested: 512,   // the decision's second, 10:00:02, to 02.512
	}
	for name, want := range wantMs {
		if got := pre.Phase(name); got.Ms != want {
			t.Errorf("prebaked %s = %v ms, want %v", name, got.Ms, want)
		}
	}
	// CA's Events and the pod keep whole seconds: those phases are ranges.
	if p := pre.Phase(CADecision + " → " + Requested); p.Exact() || p.MinMs != 0 || p.MaxMs != 512 {
		t.Errorf("CA decision → IncreaseSize = %+v, want the range 0–512 ms (the Event keeps whole seconds)", p)
	}
	if p := pre.Phase(PodPending + " → " + CADecision); p.Ms != 2000 || p.MinMs != 1001 || p.MaxMs != 2999 {
		t.Errorf("pod Pending → CA decision = %+v, want 2 s within 1001–2999 ms", p)
	}
	if pre.Trigger.Pod != "shop/web-0" || pre.Trigger.Pods != 2 || !strings.Contains(pre.Trigger.Decision, "size to 2 instead of 0") ||
		pre.Trigger.Component != "cluster-autoscaler" {
		t.Errorf("trigger %+v: want web-0 (created first) of 2 pods, the 0->2 decision, by cluster-autoscaler", pre.Trigger)
	}
	if !pre.Moment(PodPending).At.Equal(at(0)) {
		t.Errorf("pod Pending at %s, want web-0's creation %s", pre.Moment(PodPending).At, at(0))
	}

	// The node script's report: install skipped on the prebaked image, timed on the vanilla.
	if b := pre.Bootstrap; !b.Reported || !b.Prebaked || b.Install != "skipped" || b.TotalMs != 9312 || len(b.Phases) != 6 {
		t.Errorf("prebaked bootstrap %+v: want reported, prebaked, install skipped, 9312 ms, 6 phases", b)
	}
	if b := van.Bootstrap; !b.Reported || b.Prebaked || b.Install != "ran" || b.Phases[2].Name != "install" || b.Phases[2].Ms != 80012 {
		t.Errorf("vanilla bootstrap %+v: want reported, not prebaked, install ran for 80012 ms", b)
	}
	// Phases sit back to back from the script's start on the machine's clock; the Node
	// registered during join.
	join := pre.Bootstrap.Phases[5]
	if !join.Start.Equal(at(23.568)) || !join.End.Equal(at(32.568)) {
		t.Errorf("join %s – %s, want 10:00:23.568 – 10:00:32.568", join.Start, join.End)
	}
	if reg := pre.Moment(Registered).At; reg.Before(join.Start) || reg.After(join.End) {
		t.Errorf("Node registered at %s, outside join (%s – %s)", reg, join.Start, join.End)
	}
	if v := pre.Bootstrap.VMBoot; !v.Known || v.Ms != 20396 { // 03.104 → 23.500
		t.Errorf("create accepted → node script start = %+v, want 20396 ms", v)
	}
	if pre.Skew.Detected || !strings.Contains(pre.Skew.Detail, "none detected") {
		t.Errorf("skew %+v, want none detected", pre.Skew)
	}
	if s := summary(r, scriptPhasePfx+"install"); s.N != 2 || s.MaxMs != 80012 || s.Note != "skipped on 1 of 2" {
		t.Errorf("install summary %+v: want 2 nodes, max 80012 ms, skipped on 1 of 2", s)
	}
	if s := summary(r, PhaseTotal); s.N != 2 || s.P50Ms != 31438 || s.MaxMs != 107606 {
		t.Errorf("total summary %+v, want n 2, p50 31438 ms, max 107606 ms", s)
	}
}

// Without prebake's annotation (a node made before this prebake, or a restarted one that
// adopted it) nothing is filled in: the API's own times stand, the rest says why it is
// unknown.
func TestBuildSaysWhatIsUnknown(t *testing.T) {
	t.Parallel()
	in := scaleUp()
	in.Events = nil
	old := nodeOf{name: "cx-fsn1-old01", group: "cx-fsn1", kind: "prebaked", created: 400, readySince: 402}.build()
	notReady := nodeOf{name: "cx-fsn1-nrdy1", group: "cx-fsn1", kind: "prebaked", created: 500,
		moments: "requested=2026-12-02T10:08:00.000Z accepted=2026-12-02T10:08:00.400Z"}.build()
	in.Nodes = append(in.Nodes, old, notReady)
	r := Build(in)
	n := find(t, r, "cx-fsn1-old01")
	for _, name := range []string{Requested, Accepted, Running} {
		if m := n.Moment(name); m.Known() || m.Unknown != UnknownNoAnnotation {
			t.Errorf("%s of a node without the annotation: %+v, want unknown (%s)", name, m, UnknownNoAnnotation)
		}
	}
	if m := n.Moment(Registered); !m.At.Equal(at(400)) || m.Clock != ClockAPI || m.ResolutionMs != 1000 {
		t.Errorf("registered %+v, want the Node's creationTimestamp on the API server's clock", m)
	}
	if m := n.Moment(Ready); !m.At.Equal(at(402)) || m.Clock != ClockKubelet {
		t.Errorf("ready %+v, want the Ready condition's transition on the kubelet's clock", m)
	}
	if n.Total.Known || n.Total.Unknown != UnknownNoAnnotation || n.Moment(CADecision).Unknown != UnknownNeedsRequest {
		t.Errorf("total %+v, decision %+v: want both unknown", n.Total, n.Moment(CADecision))
	}
	if b := n.Bootstrap; b.Reported || b.Unknown != UnknownNotReported {
		t.Errorf("bootstrap %+v, want not reported", b)
	}
	p := find(t, r, "cx-fsn1-ab3de")
	if m := p.Moment(CADecision); m.Known() || m.Unknown != UnknownNoEvent {
		t.Errorf("decision without Events: %+v, want %s", m, UnknownNoEvent)
	}
	if m := find(t, r, "cx-fsn1-nrdy1").Moment(Ready); m.Known() || m.Unknown != UnknownNotReady {
		t.Errorf("ready of a NotReady node: %+v", m)
	}
	// Nothing unknown is counted as a sample.
	if s := summary(r, PhaseTotal); s.N != 2 || s.Unknown != 2 {
		t.Errorf("total summary %+v, want 2 known, 2 unknown", s)
	}
}

func TestBuildWindowAndFilters(t *testing.T) {
	t.Parallel()
	in := scaleUp()
	in.Now = at(3600 + 60) // the vanilla node (107.6 s) is in the last hour, the prebaked one (31.8 s) is not
	in.Nodes = append(in.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "system-0", CreationTimestamp: apiTime(3000)}})
	if got := names(Build(in)); got != "cx-fsn1-vq7kp" {
		t.Errorf("--since 1h: %s, want the vanilla node only (not the older one, nor a node of no group)", got)
	}
	in.Node = "cx-fsn1-ab3de"
	if got := names(Build(in)); got != "cx-fsn1-ab3de" {
		t.Errorf("--node: %s, want it whenever it was made", got)
	}
	in.Node, in.Since, in.Group = "", 0, "other"
	if r := Build(in); len(r.Nodes) != 0 {
		t.Errorf("--group other: %s", names(r))
	}
}

// kwok's nodes are simulated, and the report says so on every phase kwok makes up.
func TestBuildLabelsKwokSimulated(t *testing.T) {
	t.Parallel()
	n := nodeOf{name: "small-7hq2x", group: "small", kind: "prebaked", created: 5, readySince: 5,
		moments: "requested=2026-12-02T10:00:02.100Z accepted=2026-12-02T10:00:02.104Z running=2026-12-02T10:00:04.140Z " +
			"registered=2026-12-02T10:00:04.140Z ready=2026-12-02T10:00:04.181Z podRunning=2026-12-02T10:00:05.020Z",
		annotations: map[string]string{kwok.AnnotationKwokNode: "fake", kwok.AnnotationSimulatedBoot: "2s"}}.build()
	r := Build(Input{Now: at(60), Since: time.Hour, Nodes: []corev1.Node{n}})
	row := r.Nodes[0]
	if r.Simulated != 1 || !strings.Contains(row.Simulated, "SIMULATED (2s") {
		t.Fatalf("simulated %d %q, want the node labelled with its simulated boot", r.Simulated, row.Simulated)
	}
	for name, want := range map[string]bool{
		Requested + " → " + Accepted: false, Accepted + " → " + Running: true, Running + " → " + Registered: true,
		Registered + " → " + Ready: true, Ready + " → " + PodRunning: true, PhaseTotal: true,
	} {
		if got := row.Phase(name).Simulated; got != want {
			t.Errorf("%s simulated = %v, want %v", name, got, want)
		}
	}
	if b := row.Bootstrap; b.Reported || !strings.Contains(b.Detail, "SIMULATED") {
		t.Errorf("bootstrap %+v, want none, saying kwok simulates the boot", b)
	}
	if s := summary(r, PhaseTotal); s.Simulated != 1 {
		t.Errorf("summary %+v, want it counted simulated", s)
	}
}

// A machine whose clock is behind reports a script start before IncreaseSize; one ahead, an
// end after the API server stored the report. Either is shown, and the boot is not placed.
func TestBuildDetectsClockSkew(t *testing.T) {
	t.Parallel()
	moments := "requested=2026-12-02T10:00:02.512Z accepted=2026-12-02T10:00:03.104Z running=2026-12-02T10:00:14.020Z " +
		"registered=2026-12-02T10:00:31.870Z ready=2026-12-02T10:00:33.950Z"
	behind := nodeOf{name: "g-behind", group: "g", created: 31.8, moments: moments, readySince: 33.9,
		report: fmt.Sprintf(prebakedReport, unixMs(-4.2)), reportWritten: 33.2}.build()
	ahead := nodeOf{name: "g-ahead", group: "g", created: 31.8, moments: moments, readySince: 33.9,
		report: fmt.Sprintf(prebakedReport, unixMs(40)), reportWritten: 33.2}.build()
	r := Build(Input{Now: at(60), Nodes: []corev1.Node{behind, ahead}})
	b := find(t, r, "g-behind")
	if !b.Skew.Detected || b.Skew.Direction != "behind" || b.Skew.AtLeastMs != 6712 || b.Bootstrap.VMBoot.Known || b.Bootstrap.VMBoot.Unknown != UnknownSkew {
		t.Errorf("behind: skew %+v, VM boot %+v; want behind by ≥ 6712 ms and no boot placed", b.Skew, b.Bootstrap.VMBoot)
	}
	a := find(t, r, "g-ahead")
	// ends 10:00:49.312, stored by 10:00:34 (33 s + 1 s of resolution)
	if !a.Skew.Detected || a.Skew.Direction != "ahead" || a.Skew.AtLeastMs != 15312 {
		t.Errorf("ahead: skew %+v, want ahead by ≥ 15312 ms", a.Skew)
	}
	if len(b.Inconsistencies(time.Second)) == 0 || len(a.Problems) == 0 {
		t.Error("skew not listed among the inconsistencies and problems")
	}
}

// A fallback time on another clock that contradicts prebake's is flagged, never clamped.
func TestBuildFlagsOutOfOrderPhases(t *testing.T) {
	t.Parallel()
	// No ready moment: the kubelet's Ready condition, 5 s before prebake saw the Node.
	n := nodeOf{name: "g-late", group: "g", created: 31.8, readySince: 26.9,
		moments: "requested=2026-12-02T10:00:02.512Z accepted=2026-12-02T10:00:03.104Z running=2026-12-02T10:00:14.020Z registered=2026-12-02T10:00:31.870Z"}.build()
	row := Build(Input{Now: at(60), Nodes: []corev1.Node{n}}).Nodes[0]
	p := row.Phase(Registered + " → " + Ready)
	if !p.OutOfOrder || p.Ms != -5870 {
		t.Fatalf("registered → ready = %+v, want out of order by 5870 ms", p)
	}
	if got := row.Inconsistencies(time.Second); len(got) == 0 || !strings.Contains(got[0], "before it starts") {
		t.Errorf("inconsistencies %q", got)
	}
	if !strings.Contains(strings.Join(row.Problems, " "), "kubelet's clock") {
		t.Errorf("problems %q: want the clocks named", row.Problems)
	}
}

// The scale-up a node belongs to is the one of its request time: a later scale-up of the
// same group, and a decision after the request, are not it.
func TestMatchEventsPicksTheRequestsScaleUp(t *testing.T) {
	t.Parallel()
	in := scaleUp()
	web5 := pod("shop", "web-5", "", 300, 0, false)
	in.Pods = append(in.Pods, web5)
	in.Events = append(in.Events, caDecision("cx-fsn1", 2, 3, 299.7), caTrigger(web5, "cx-fsn1", 2, 3, 300.4), caDecision("cx-fsn1", 0, 2, 2.7))
	row := find(t, Build(in), "cx-fsn1-ab3de")
	// 2.7 s truncates to 10:00:02, the same as 2.4: both are at or before the request.
	if !strings.Contains(row.Trigger.Decision, "size to 2 instead of 0") || row.Trigger.Pod != "shop/web-0" {
		t.Errorf("trigger %+v, want the 0->2 scale-up and web-0", row.Trigger)
	}
	// Two scale-ups of a group a second apart: the earlier one's TriggeredScaleUp falls in
	// the same second as the later request; the decision's sizes tell them apart.
	web0, web7 := pod("shop", "web-0", "", 0.4, 0, false), pod("shop", "web-7", "", 1.8, 0, false)
	second := nodeOf{name: "cx-fsn1-2nd01", group: "cx-fsn1", created: 31.8,
		moments: "requested=2026-12-02T10:00:02.512Z accepted=2026-12-02T10:00:03.104Z"}.build()
	row = find(t, Build(Input{Now: at(60), Nodes: []corev1.Node{second}, Pods: []corev1.Pod{web0, web7}, Events: []corev1.Event{
		caDecision("cx-fsn1", 0, 2, 1.2), caTrigger(web0, "cx-fsn1", 0, 2, 2.1),
		caDecision("cx-fsn1", 2, 3, 2.4), caTrigger(web7, "cx-fsn1", 2, 3, 3.2),
	}}), "cx-fsn1-2nd01")
	if !strings.Contains(row.Trigger.Decision, "size to 3 instead of 2") || row.Trigger.Pod != "shop/web-7" || row.Trigger.Pods != 1 {
		t.Errorf("trigger %+v, want the 2->3 scale-up and web-7 alone", row.Trigger)
	}
	// The pod CA named is gone: the pod Pending cell says so.
	in = scaleUp()
	in.Pods = in.Pods[2:]
	if m := find(t, Build(in), "cx-fsn1-ab3de").Moment(PodPending); m.Known() || m.Unknown != UnknownPodGone {
		t.Errorf("pod Pending with the pods gone: %+v, want %s", m, UnknownPodGone)
	}
}

func TestMomentsFormatParseMerge(t *testing.T) {
	t.Parallel()
	m := Moments{Requested: t0.Add(2512900 * time.Microsecond), Ready: at(33.95)} // truncated to the ms
	v := m.Format()
	if v != "requested=2026-12-02T10:00:02.512Z ready=2026-12-02T10:00:33.950Z" {
		t.Fatalf("Format = %q", v)
	}
	got, err := ParseMoments(v + " future=2027-01-01T00:00:00Z")
	if err != nil || !got.Requested.Equal(at(2.512)) || !got.Ready.Equal(at(33.95)) || !got.Accepted.IsZero() {
		t.Fatalf("ParseMoments = %+v, %v", got, err)
	}
	merged := got.Merge(Moments{Requested: at(99), Accepted: at(3)})
	if !merged.Requested.Equal(at(2.512)) || !merged.Accepted.Equal(at(3)) {
		t.Errorf("Merge = %+v: a written moment keeps its value, a missing one is filled", merged)
	}
	for _, bad := range []string{"requested", "requested=yesterday"} {
		if _, err := ParseMoments(bad); err == nil || !strings.Contains(err.Error(), Annotation) {
			t.Errorf("ParseMoments(%q) = %v, want an error naming the annotation", bad, err)
		}
	}
	if (Moments{}).Format() != "" || !(Moments{}).IsZero() {
		t.Error("zero Moments")
	}

	pooled := Moments{Requested: at(2.512), FromWarmPool: true}
	if v := pooled.Format(); v != "requested=2026-12-02T10:00:02.512Z from=warm-pool" {
		t.Errorf("Format of a resumed standby = %q", v)
	}
	for value, want := range map[string]bool{
		"requested=2026-12-02T10:00:02.512Z from=warm-pool": true,
		"from=warm-pool requested=2026-12-02T10:00:02.512Z": true,
		"requested=2026-12-02T10:00:02.512Z from=elsewhere": false, // a from this reader doesn't know
		"requested=2026-12-02T10:00:02.512Z":                false,
	} {
		got, err := ParseMoments(value)
		if err != nil || got.FromWarmPool != want || !got.Requested.Equal(at(2.512)) {
			t.Errorf("ParseMoments(%q) = %+v, %v; want FromWarmPool %v", value, got, err, want)
		}
	}
	if !(Moments{}).Merge(pooled).FromWarmPool || !pooled.Merge(Moments{}).FromWarmPool {
		t.Error("Merge lost from=warm-pool: once written it stays")
	}
}

func names(r Report) string {
	var out []string
	for _, n := range r.Nodes {
		out = append(out, n.Name)
	}
	return strings.Join(out, ",")
}

func find(t *testing.T, r Report, name string) Node {
	t.Helper()
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in %s", name, names(r))
	return Node{}
}

func summary(r Report, phase string) Summary {
	for _, s := range r.Summary {
		if s.Phase == phase {
			return s
		}
	}
	return Summary{Phase: phase}
}

// A node booted without prebake serve (as e2e/realnode's are) has no prebake.dev/timeline:
// its row has the API's registration, the kubelet's Ready and container start, and the
// node script's report, which still shows install skipped or timed and checks the clock
// against the annotation's write.
func TestBuildNodeBootedWithoutPrebakeServe(t *testing.T) {
	t.Parallel()
	n := nodeOf{name: "real-n1", group: "real", created: 95.2, readySince: 97.4,
		report: fmt.Sprintf(vanillaReport, unixMs(10.1)), reportWritten: 95.9}.build()
	web := pod("default", "hello", "real-n1", 120, 123.5, false)
	proxy := pod("kube-system", "kube-proxy-7xk2q", "real-n1", 95.3, 98.1, true) // runs first on every node: not it
	row := Build(Input{Now: at(200), Nodes: []corev1.Node{n}, Pods: []corev1.Pod{proxy, web}, Node: "real-n1"}).Nodes[0]
	if got := row.Inconsistencies(time.Second); len(got) != 0 {
		t.Errorf("inconsistencies %q", got)
	}
	if b := row.Bootstrap; !b.Reported || b.Install != "ran" || b.Prebaked || b.VMBoot.Known {
		t.Errorf("bootstrap %+v: want the vanilla report, install ran, and no VM boot (no accepted time)", b)
	}
	if row.Skew.Detected || !strings.Contains(row.Skew.Detail, "ended before the annotation was written") {
		t.Errorf("skew %+v: want the one check it can make", row.Skew)
	}
	if p := row.Phase(Registered + " → " + Ready); !p.Known || p.MinMs != 1001 || p.MaxMs != 2999 {
		t.Errorf("registered → ready %+v, want 1–3 s from whole-second API and kubelet times", p)
	}
	if p := row.Phase(Ready + " → " + PodRunning); !p.Known || p.Ms != 26000 {
		t.Errorf("ready → first pod Running %+v, want 26 s: hello's start, not kube-proxy's", p)
	}
	if row.Total.Known {
		t.Errorf("total %+v known without a request time", row.Total)
	}
}

// realPrebakedReport is what node.sh wrote on a prebaked image in a Debian root filesystem
// (bootstrap's system test TestInstallVanillaThenPrebaked, kubectl a shim that logs its
// arguments): install skipped, 210 ms of the 354 ms spent between phases.
const realPrebakedReport = "prebaked=true total=354ms start=1796174331388 manifest=16ms/ok plan=61ms/ok install=2ms/skipped configure=19ms/ok kubelet=34ms/ok join=12ms/ok"

func TestBuildReadsARealNodeScriptReport(t *testing.T) {
	t.Parallel()
	start := time.UnixMilli(1796174331388).UTC()
	ms := func(d float64) string {
		return start.Add(time.Duration(d * float64(time.Millisecond))).Format(annotationTimeLayout)
	}
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", CreationTimestamp: metav1.NewTime(start.Add(300 * time.Millisecond).Truncate(time.Second)),
		Labels: map[string]string{providers.LabelGroup: "g", providers.LabelImageKind: "prebaked"},
		Annotations: map[string]string{
			bootstrap.NodeAnnotation: realPrebakedReport,
			Annotation:               "requested=" + ms(-21000) + " accepted=" + ms(-20950) + " running=" + ms(-9000) + " registered=" + ms(280) + " ready=" + ms(1400),
		}}}
	row := Build(Input{Now: start.Add(time.Minute), Nodes: []corev1.Node{n}}).Nodes[0]
	b := row.Bootstrap
	if !b.Reported || !b.Prebaked || b.Install != "skipped" || b.TotalMs != 354 || len(b.Phases) != 6 || !b.Start.Equal(start) {
		t.Fatalf("bootstrap %+v: want the real report read whole", b)
	}
	if end := b.Phases[5].End; !end.Equal(start.Add(144 * time.Millisecond)) {
		t.Errorf("join ends %s, want start + the phases' 144 ms", end)
	}
	if got := row.Inconsistencies(time.Second); len(got) != 0 {
		t.Errorf("inconsistencies %q", got)
	}
	if got := row.Inconsistencies(100 * time.Millisecond); len(got) != 1 || !strings.Contains(got[0], "144ms of its 354ms") {
		t.Errorf("with 100 ms of tolerance: %q, want the script's 210 ms between phases named", got)
	}
	if v := b.VMBoot; !v.Known || v.Ms != 20950 || row.Skew.Detected {
		t.Errorf("VM boot %+v, skew %+v: want 20950 ms and no skew", v, row.Skew)
	}
}
