package nodetimeline

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok"
)

// The moments of a node's way up, in order. A phase lies between two consecutive ones.
const (
	PodPending = "pod Pending"
	CADecision = "CA decision"
	Requested  = "IncreaseSize received"
	Accepted   = "create accepted"
	Running    = "machine running"
	Registered = "Node registered"
	Ready      = "Node Ready"
	PodRunning = "first pod Running"
)

// Chain is the moments in order.
var Chain = []string{PodPending, CADecision, Requested, Accepted, Running, Registered, Ready, PodRunning}

// Names of the phases that span more than two neighbours.
const (
	PhaseTotal     = "IncreaseSize received → Node Ready"
	PhaseEndToEnd  = "pod Pending → first pod Running"
	PhaseVMBoot    = "create accepted → node script start"
	PhaseScript    = "node script (total)"
	scriptPhasePfx = "node script: "
)

// The clocks a moment can be read on.
const (
	ClockPrebake = "prebake"            // the host prebake serve runs on
	ClockAPI     = "API server"         // creationTimestamp, managedFields
	ClockCA      = "cluster-autoscaler" // the Events CA writes
	ClockKubelet = "kubelet"            // Node conditions, container starts: the machine's clock
	ClockMachine = "machine"            // the node script's report
)

// Short reasons a moment is unknown, as the cells show them; Legend explains each.
const (
	UnknownNoAnnotation = "no annotation"
	UnknownNoEvent      = "no CA event"
	UnknownPodGone      = "pod gone"
	UnknownNotReady     = "not Ready"
	UnknownNoPod        = "no pod Running"
	UnknownNeedsRequest = "no request time"
	UnknownNotReported  = "not reported"
	UnknownSkew         = "clock skew"
)

// Legend says what each unknown reason means.
var Legend = map[string]string{
	UnknownNoAnnotation: "the Node has no " + Annotation + " moment for it: made by another prebake or before this one ran, or the plugin restarted before it saw the moment (restarted plugins record nothing of machines they did not request)",
	UnknownNoEvent:      "no cluster-autoscaler Event (ScaledUpGroup on its status ConfigMap, TriggeredScaleUp on the pod) matches the request: Events expire after the API server's --event-ttl (1h by default), CA may run with --write-status-configmap=false, or an aggregated Event kept only other times",
	UnknownPodGone:      "CA's TriggeredScaleUp Event names a pod that no longer exists",
	UnknownNotReady:     "the Node is not Ready",
	UnknownNoPod:        "no pod (other than DaemonSet and static pods) has run on the Node",
	UnknownNeedsRequest: "CA's Events are matched to a node by the IncreaseSize time, which is unknown",
	UnknownNotReported:  "the node script did not annotate the Node (" + bootstrap.NodeAnnotation + ")",
	UnknownSkew:         "the machine's clock disagrees with the cluster's (see skew): its times can't be placed",
}

// Moment is one point of a node's timeline.
type Moment struct {
	Name string    `json:"name"`
	At   time.Time `json:"at,omitzero"`
	// ResolutionMs is how coarse At is: 1000 for API timestamps, 1 for prebake's annotation.
	ResolutionMs int64 `json:"resolutionMs,omitempty"`
	// Source says which field At comes from; Clock whose clock that is.
	Source string `json:"source,omitempty"`
	Clock  string `json:"clock,omitempty"`
	// Unknown is why At is not known (a key of Legend).
	Unknown   string `json:"unknown,omitempty"`
	Simulated bool   `json:"simulated,omitempty"`
}

// Known reports whether the moment's time is known.
func (m Moment) Known() bool { return !m.At.IsZero() }

// Phase is the time between two moments.
type Phase struct {
	Name  string `json:"name"`
	Known bool   `json:"known"`
	// Ms is To − From. With a coarse end, the true duration lies in [MinMs, MaxMs].
	Ms    float64 `json:"ms"`
	MinMs float64 `json:"minMs"`
	MaxMs float64 `json:"maxMs"`
	// Unknown is why the phase is not known (a key of Legend).
	Unknown   string `json:"unknown,omitempty"`
	Simulated bool   `json:"simulated,omitempty"`
	// OutOfOrder: the phase ends before it starts by more than the resolution allows: the
	// two clocks disagree.
	OutOfOrder bool `json:"outOfOrder,omitempty"`
}

// Exact reports whether both ends are fine-grained (the range is under 2 ms).
func (p Phase) Exact() bool { return p.MaxMs-p.MinMs < 2 }

// Trigger is what CA's Events say about the scale-up that made the node.
type Trigger struct {
	// Decision is the message of CA's ScaledUpGroup Event.
	Decision string `json:"decision,omitempty"`
	// Pod is the earliest created of the pods whose TriggeredScaleUp Event names the
	// scale-up (namespace/name); Pods is how many such Events there were.
	Pod  string `json:"pod,omitempty"`
	Pods int    `json:"pods,omitempty"`
	// Component is the Events' source (cluster-autoscaler, or a stand-in).
	Component string `json:"component,omitempty"`
}

// BootPhase is one phase of the node script, placed on the machine's clock.
type BootPhase struct {
	Name   string    `json:"name"`
	Result string    `json:"result"`
	Ms     int64     `json:"ms"`
	Start  time.Time `json:"start,omitzero"`
	End    time.Time `json:"end,omitzero"`
}

// Bootstrap is the node script's report on the Node.
type Bootstrap struct {
	Reported bool `json:"reported"`
	// Unknown says why there is no report (a key of Legend), Detail the specifics.
	Unknown string `json:"unknown,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Raw is the annotation's value.
	Raw      string `json:"raw,omitempty"`
	Prebaked bool   `json:"prebaked"`
	// Install is skipped, ran, failed, or "" when the script reported no install phase.
	Install string `json:"install,omitempty"`
	// Start is the script's start on the machine's clock (zero: an older script).
	Start   time.Time   `json:"start,omitzero"`
	TotalMs int64       `json:"totalMs"`
	Phases  []BootPhase `json:"phases,omitempty"`
	// Written is when the annotation was written, from the Node's managedFields (API clock).
	Written time.Time `json:"written,omitzero"`
	// VMBoot is create accepted → script start: the cloud's boot of the machine, its OS
	// and cloud-init, across two clocks (prebake's and the machine's).
	VMBoot Phase `json:"vmBoot"`
}

// Skew is what the report can tell of the machine's clock against the cluster's.
type Skew struct {
	// Detected: the machine's times can't be right; Direction is behind or ahead, by at
	// least AtLeastMs.
	Detected  bool   `json:"detected"`
	Direction string `json:"direction,omitempty"`
	AtLeastMs int64  `json:"atLeastMs,omitempty"`
	// Detail says what was compared.
	Detail string `json:"detail"`
}

// Node is one node's row.
type Node struct {
	Name       string    `json:"name"`
	ProviderID string    `json:"providerID,omitempty"`
	Group      string    `json:"group"`
	ImageKind  string    `json:"imageKind,omitempty"`
	Image      string    `json:"image,omitempty"`
	Created    time.Time `json:"created"`
	// Simulated says what of this node is simulated (kwok), "" for a real machine.
	Simulated string    `json:"simulated,omitempty"`
	Moments   []Moment  `json:"moments"`
	Phases    []Phase   `json:"phases"`
	Total     Phase     `json:"total"`
	EndToEnd  Phase     `json:"endToEnd"`
	Trigger   Trigger   `json:"trigger"`
	Bootstrap Bootstrap `json:"bootstrap"`
	Skew      Skew      `json:"skew"`
	// Problems are inconsistencies the report found (out-of-order phases, unreadable
	// annotations).
	Problems []string `json:"problems,omitempty"`
	// FromWarmPool: the machine was a warm-pool standby IncreaseSize took and resumed, not
	// a machine it created (the Annotation's from=warm-pool). Its create accepted moment is
	// the resume call's return, and its boot a restart of a prepared machine.
	FromWarmPool bool `json:"fromWarmPool,omitempty"`
}

// Moment returns the node's moment called name.
func (n Node) Moment(name string) Moment {
	for _, m := range n.Moments {
		if m.Name == name {
			return m
		}
	}
	return Moment{Name: name}
}

// Phase returns the node's phase called name (a chain phase, PhaseTotal or PhaseEndToEnd).
func (n Node) Phase(name string) Phase {
	switch name {
	case PhaseTotal:
		return n.Total
	case PhaseEndToEnd:
		return n.EndToEnd
	}
	for _, p := range n.Phases {
		if p.Name == name {
			return p
		}
	}
	return Phase{Name: name}
}

// Summary is one phase across the nodes.
type Summary struct {
	Phase string `json:"phase"`
	// N nodes have it known, Unknown do not; Simulated of the N are simulated.
	N         int     `json:"n"`
	Unknown   int     `json:"unknown"`
	Simulated int     `json:"simulated"`
	P50Ms     float64 `json:"p50Ms"`
	P90Ms     float64 `json:"p90Ms"`
	MaxMs     float64 `json:"maxMs"`
	Note      string  `json:"note,omitempty"`
}

// Report is the whole answer.
type Report struct {
	Generated time.Time `json:"generated"`
	// Since is the start of the window (zero: every node); Filter names --node, --group
	// and --cluster when given.
	Since   time.Time         `json:"since,omitzero"`
	Filter  map[string]string `json:"filter,omitempty"`
	Nodes   []Node            `json:"nodes"`
	Summary []Summary         `json:"summary"`
	// Simulated is the number of nodes with simulated phases.
	Simulated int      `json:"simulated"`
	Notes     []string `json:"notes,omitempty"`
	// Metrics is what prebake's /metrics says, when it was read.
	Metrics *Metrics `json:"prebakeMetrics,omitempty"`
}

// Input is what Build reads: API objects as the cluster returns them.
type Input struct {
	Nodes []corev1.Node
	// Pods are the pods on those nodes and the pods CA's Events name.
	Pods []corev1.Pod
	// Events are CA's TriggeredScaleUp and ScaledUpGroup Events (others are ignored).
	Events []corev1.Event
	Now    time.Time
	// Since bounds the window: nodes created at or after Now − Since (0: every node).
	Since time.Duration
	// Node, when set, selects that node only, whenever it was made.
	Node string
	// Group and Cluster select the nodes with that prebake.dev/group and
	// prebake.dev/cluster label.
	Group, Cluster string
}

// Event reasons cluster-autoscaler writes (cluster-autoscaler/core/scaleup/orchestrator
// executor.go and processors/status/eventing_scale_up_processor.go).
const (
	ReasonScaledUpGroup    = "ScaledUpGroup"
	ReasonTriggeredScaleUp = "TriggeredScaleUp"
)

// Build makes the report. It is a pure function of in: no clock, no I/O.
func Build(in Input) Report {
	r := Report{Generated: in.Now}
	if in.Since > 0 && in.Node == "" {
		r.Since = in.Now.Add(-in.Since)
	}
	for k, v := range map[string]string{"node": in.Node, "group": in.Group, "cluster": in.Cluster} {
		if v != "" {
			if r.Filter == nil {
				r.Filter = map[string]string{}
			}
			r.Filter[k] = v
		}
	}
	ev := indexEvents(in.Events)
	pods := indexPods(in.Pods)
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if !selected(n, in, r.Since) {
			continue
		}
		row := buildNode(n, ev, pods)
		if row.Simulated != "" {
			r.Simulated++
		}
		r.Nodes = append(r.Nodes, row)
	}
	slices.SortFunc(r.Nodes, func(a, b Node) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Name, b.Name))
	})
	r.Summary = summarise(r.Nodes)
	if in.Node != "" && len(r.Nodes) == 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("no Node %q matches (it needs the %s label, and --group/--cluster if given)", in.Node, providers.LabelGroup))
	}
	return r
}

func selected(n *corev1.Node, in Input, since time.Time) bool {
	group, ok := n.Labels[providers.LabelGroup]
	switch {
	case in.Node != "":
		if n.Name != in.Node {
			return false
		}
	case !ok:
		return false // not a node of a prebake group
	case !since.IsZero() && n.CreationTimestamp.Time.Before(since):
		return false
	}
	if in.Group != "" && group != in.Group {
		return false
	}
	return in.Cluster == "" || n.Labels[providers.LabelCluster] == in.Cluster
}

func buildNode(n *corev1.Node, ev eventIndex, pods podIndex) Node {
	row := Node{
		Name: n.Name, ProviderID: n.Spec.ProviderID, Group: n.Labels[providers.LabelGroup],
		ImageKind: n.Labels[providers.LabelImageKind], Image: n.Labels[providers.LabelImage],
		Created: n.CreationTimestamp.Time,
	}
	kwokNode := n.Annotations[kwok.AnnotationKwokNode] == "fake"
	simBoot, simulatedBoot := n.Annotations[kwok.AnnotationSimulatedBoot]
	switch {
	case kwokNode && simulatedBoot:
		row.Simulated = "kwok: the boot is SIMULATED (" + simBoot + " configured), Ready and pods are run by kwok; no machine exists"
	case kwokNode:
		row.Simulated = "kwok: Ready and pods are run by kwok; no kubelet exists"
	case simulatedBoot:
		row.Simulated = "the boot is SIMULATED (" + simBoot + " configured)"
	}

	var pm Moments
	if v, ok := n.Annotations[Annotation]; ok {
		var err error
		if pm, err = ParseMoments(v); err != nil {
			row.Problems = append(row.Problems, err.Error())
		}
	}
	row.FromWarmPool = pm.FromWarmPool
	fromPrebake := func(name string, at time.Time, key string) Moment {
		if at.IsZero() {
			return Moment{Name: name, Unknown: UnknownNoAnnotation}
		}
		return Moment{Name: name, At: at, ResolutionMs: 1, Source: Annotation + " " + key, Clock: ClockPrebake}
	}
	m := map[string]Moment{
		Requested: fromPrebake(Requested, pm.Requested, "requested"),
		Accepted:  fromPrebake(Accepted, pm.Accepted, "accepted"),
		Running:   fromPrebake(Running, pm.Running, "running"),
	}
	if a := m[Accepted]; pm.FromWarmPool && a.Known() {
		a.Source += " (the warm-pool standby's resume returned)"
		m[Accepted] = a
	}
	if !pm.Registered.IsZero() {
		m[Registered] = fromPrebake(Registered, pm.Registered, "registered")
	} else {
		m[Registered] = Moment{Name: Registered, At: n.CreationTimestamp.Time, ResolutionMs: 1000, Source: "Node creationTimestamp", Clock: ClockAPI}
	}
	m[Ready] = readyMoment(n, pm)
	m[PodRunning] = podRunningMoment(n, pm, pods)
	decision, trigger := matchEvents(row.Group, pm.Requested, ev, pods)
	m[CADecision], m[PodPending], row.Trigger = decision, trigger.moment, trigger.Trigger

	if row.Simulated != "" {
		for _, name := range []string{Ready, PodRunning} {
			mo := m[name]
			mo.Simulated = kwokNode
			m[name] = mo
		}
		for _, name := range []string{Running, Registered} {
			mo := m[name]
			mo.Simulated = simulatedBoot
			m[name] = mo
		}
	}
	for _, name := range Chain {
		row.Moments = append(row.Moments, m[name])
	}
	for i := 0; i+1 < len(row.Moments); i++ {
		a, b := row.Moments[i], row.Moments[i+1]
		p := span(a.Name+" → "+b.Name, a, b)
		if p.OutOfOrder {
			row.Problems = append(row.Problems, fmt.Sprintf("%s ends %s before it starts: %s (%s's clock) and %s (%s's clock) disagree",
				p.Name, fmtMs(-p.Ms), a.Source, a.Clock, b.Source, b.Clock))
		}
		row.Phases = append(row.Phases, p)
	}
	row.Total = span(PhaseTotal, m[Requested], m[Ready])
	row.EndToEnd = span(PhaseEndToEnd, m[PodPending], m[PodRunning])

	row.Bootstrap, row.Skew = bootstrapOf(n, m[Requested], m[Accepted], kwokNode, simBoot)
	if row.Skew.Detected {
		row.Problems = append(row.Problems, "machine clock "+row.Skew.Detail)
	}
	return row
}

// span is the phase from a to b.
func span(name string, a, b Moment) Phase {
	p := Phase{Name: name, Simulated: a.Simulated || b.Simulated}
	switch {
	case !a.Known():
		p.Unknown = a.Unknown
		return p
	case !b.Known():
		p.Unknown = b.Unknown
		return p
	}
	p.Known = true
	p.Ms = ms(b.At.Sub(a.At))
	// a's true time lies in [a, a+res), b's in [b, b+res).
	p.MinMs = math.Max(0, p.Ms-float64(max(a.ResolutionMs, 1)-1))
	p.MaxMs = p.Ms + float64(max(b.ResolutionMs, 1)-1)
	if p.MaxMs < 0 {
		p.OutOfOrder = true
		p.MinMs = p.Ms
	}
	return p
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

func readyMoment(n *corev1.Node, pm Moments) Moment {
	if !pm.Ready.IsZero() {
		return Moment{Name: Ready, At: pm.Ready, ResolutionMs: 1, Source: Annotation + " ready", Clock: ClockPrebake}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return Moment{Name: Ready, At: c.LastTransitionTime.Time, ResolutionMs: 1000,
				Source: "Node Ready condition lastTransitionTime (its last transition)", Clock: ClockKubelet}
		}
	}
	return Moment{Name: Ready, Unknown: UnknownNotReady}
}

func podRunningMoment(n *corev1.Node, pm Moments, pods podIndex) Moment {
	if !pm.PodRunning.IsZero() {
		return Moment{Name: PodRunning, At: pm.PodRunning, ResolutionMs: 1, Source: Annotation + " podRunning", Clock: ClockPrebake}
	}
	var first time.Time
	for _, p := range pods.onNode[n.Name] {
		if !Workload(p) {
			continue
		}
		if t := containerStart(p); !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	if first.IsZero() {
		return Moment{Name: PodRunning, Unknown: UnknownNoPod}
	}
	return Moment{Name: PodRunning, At: first, ResolutionMs: 1000, Source: "earliest container start of a pod on the Node", Clock: ClockKubelet}
}

// Workload reports whether p counts for "first pod Running": not a DaemonSet's pod and not a
// static (mirror) pod, which every node runs whatever it was made for.
func Workload(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// containerStart is when the pod's first container started, as its status says.
func containerStart(p *corev1.Pod) time.Time {
	var first time.Time
	for _, cs := range p.Status.ContainerStatuses {
		var t time.Time
		switch {
		case cs.State.Running != nil:
			t = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			t = cs.State.Terminated.StartedAt.Time
		}
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

func bootstrapOf(n *corev1.Node, requested, accepted Moment, kwokNode bool, simBoot string) (Bootstrap, Skew) {
	raw, ok := n.Annotations[bootstrap.NodeAnnotation]
	if !ok {
		b := Bootstrap{Unknown: UnknownNotReported, VMBoot: Phase{Name: PhaseVMBoot, Unknown: UnknownNotReported}}
		switch {
		case kwokNode && simBoot != "":
			b.Detail = "kwok runs no node script: the boot is SIMULATED (" + simBoot + ")"
		case kwokNode:
			b.Detail = "kwok runs no node script"
		default:
			b.Detail = "no " + bootstrap.NodeAnnotation + " annotation: a userDataFile of your own, a node without kubectl, or not joined yet"
		}
		return b, Skew{Detail: "unknown: no report from the machine"}
	}
	b := Bootstrap{Raw: raw, VMBoot: Phase{Name: PhaseVMBoot}}
	rep, err := bootstrap.ParseNodeAnnotation(raw)
	if err != nil {
		b.Unknown, b.Detail = UnknownNotReported, err.Error()
		b.VMBoot.Unknown = UnknownNotReported
		return b, Skew{Detail: "unknown: the report is unreadable"}
	}
	b.Reported, b.Prebaked, b.TotalMs, b.Start = true, rep.Prebaked, rep.TotalMs, rep.Start
	at := rep.Start
	for _, p := range rep.Phases {
		bp := BootPhase{Name: p.Name, Result: p.Result, Ms: p.Ms}
		if !at.IsZero() {
			bp.Start, at = at, at.Add(p.Duration())
			bp.End = at
		}
		b.Phases = append(b.Phases, bp)
		if p.Name == "install" {
			b.Install = map[string]string{"skipped": "skipped", "ok": "ran", "failed": "failed"}[p.Result]
			if b.Install == "" {
				b.Install = p.Result
			}
		}
	}
	b.Written = annotationWritten(n, bootstrap.NodeAnnotation)

	skew := Skew{Detail: "none detected"}
	if rep.Start.IsZero() {
		skew.Detail = "unknown: the report has no start (a node script older than this prebake)"
		b.VMBoot.Unknown = UnknownNotReported
		return b, skew
	}
	end := rep.Start.Add(time.Duration(rep.TotalMs) * time.Millisecond)
	var checks []string
	if requested.Known() {
		checks = append(checks, "started after IncreaseSize")
		if d := requested.At.Sub(rep.Start); d > 0 {
			skew = Skew{Detected: true, Direction: "behind", AtLeastMs: d.Milliseconds(),
				Detail: fmt.Sprintf("behind by at least %s: the node script started %s before IncreaseSize received the request", fmtMs(ms(d)), fmtMs(ms(d)))}
		}
	}
	if !b.Written.IsZero() && !skew.Detected {
		checks = append(checks, "ended before the annotation was written")
		// managedFields times are whole seconds.
		if d := end.Sub(b.Written.Add(time.Second)); d > 0 {
			skew = Skew{Detected: true, Direction: "ahead", AtLeastMs: d.Milliseconds(),
				Detail: fmt.Sprintf("ahead by at least %s: the node script ended %s after the API server stored its annotation", fmtMs(ms(d)), fmtMs(ms(d)))}
		}
	}
	switch {
	case skew.Detected:
		b.VMBoot.Unknown = UnknownSkew
	case len(checks) == 0:
		skew.Detail = "unknown: nothing to compare the machine's clock with"
		b.VMBoot = span(PhaseVMBoot, accepted, Moment{Name: "node script start", At: rep.Start, ResolutionMs: 1, Clock: ClockMachine})
	default:
		skew.Detail = "none detected (" + strings.Join(checks, ", ") + ")"
		b.VMBoot = span(PhaseVMBoot, accepted, Moment{Name: "node script start", At: rep.Start, ResolutionMs: 1, Clock: ClockMachine})
	}
	b.VMBoot.Name = PhaseVMBoot
	return b, skew
}

// annotationWritten is when the API server last stored the annotation key, from the Node's
// managedFields (whole seconds), or zero.
func annotationWritten(n *corev1.Node, key string) time.Time {
	var at time.Time
	for _, f := range n.ManagedFields {
		if f.FieldsV1 == nil || f.Time == nil || !strings.Contains(string(f.FieldsV1.Raw), `"f:`+key+`"`) {
			continue
		}
		if f.Time.Time.After(at) {
			at = f.Time.Time
		}
	}
	return at
}

// summarise computes each phase's statistics across nodes.
func summarise(nodes []Node) []Summary {
	var out []Summary
	add := func(name string, get func(Node) (Phase, bool)) {
		s := Summary{Phase: name}
		var samples []float64
		coarse := 0
		for _, n := range nodes {
			p, applies := get(n)
			if !applies {
				continue
			}
			if !p.Known || p.OutOfOrder {
				s.Unknown++
				continue
			}
			samples = append(samples, p.Ms)
			if p.Simulated {
				s.Simulated++
			}
			if !p.Exact() {
				coarse++
			}
		}
		s.N = len(samples)
		if coarse > 0 {
			s.Note = fmt.Sprintf("%d of %d to whole seconds (an API timestamp): within ±1s", coarse, s.N)
		}
		if s.N > 0 {
			slices.Sort(samples)
			s.P50Ms, s.P90Ms, s.MaxMs = quantile(samples, 0.5), quantile(samples, 0.9), samples[len(samples)-1]
		}
		out = append(out, s)
	}
	for i := 0; i+1 < len(Chain); i++ {
		name := Chain[i] + " → " + Chain[i+1]
		add(name, func(n Node) (Phase, bool) { return n.Phase(name), true })
	}
	add(PhaseTotal, func(n Node) (Phase, bool) { return n.Total, true })
	add(PhaseEndToEnd, func(n Node) (Phase, bool) { return n.EndToEnd, true })
	add(PhaseVMBoot, func(n Node) (Phase, bool) { return n.Bootstrap.VMBoot, n.Bootstrap.Reported })
	add(PhaseScript, func(n Node) (Phase, bool) {
		b := n.Bootstrap
		return Phase{Known: b.Reported, Ms: float64(b.TotalMs), Unknown: b.Unknown}, n.Simulated == "" || b.Reported
	})
	var names []string
	for _, n := range nodes {
		for _, p := range n.Bootstrap.Phases {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	for _, name := range names {
		add(scriptPhasePfx+name, func(n Node) (Phase, bool) {
			for _, p := range n.Bootstrap.Phases {
				if p.Name == name {
					return Phase{Known: true, Ms: float64(p.Ms)}, true
				}
			}
			return Phase{}, false
		})
		if name == "install" {
			skipped, all := 0, 0
			for _, n := range nodes {
				if n.Bootstrap.Install != "" {
					all++
					if n.Bootstrap.Install == "skipped" {
						skipped++
					}
				}
			}
			out[len(out)-1].Note = fmt.Sprintf("skipped on %d of %d", skipped, all)
		}
	}
	return out
}

// quantile is the nearest-rank q-quantile of sorted samples.
func quantile(sorted []float64, q float64) float64 {
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// Inconsistencies lists what breaks the arithmetic of n's row, for tests and the real-node
// scenarios: a phase that ends before it starts; known phases from IncreaseSize to Node
// Ready that don't add up to Total within tol; the node script's phases summing to more than
// its total, or to tol less; a machine clock the report found skewed. Empty means the row
// holds together.
func (n Node) Inconsistencies(tol time.Duration) []string {
	var out []string
	for _, p := range n.Phases {
		if p.OutOfOrder {
			out = append(out, fmt.Sprintf("%s: ends %s before it starts", p.Name, fmtMs(-p.Ms)))
		}
	}
	if n.Total.Known {
		from, to := slices.Index(Chain, Requested), slices.Index(Chain, Ready)
		var sum float64
		whole := true
		for _, p := range n.Phases[from:to] {
			whole = whole && p.Known
			sum += p.Ms
		}
		if d := math.Abs(sum - n.Total.Ms); whole && d > ms(tol) {
			out = append(out, fmt.Sprintf("the phases from %s to %s add up to %s, not %s", Requested, Ready, fmtMs(sum), fmtMs(n.Total.Ms)))
		}
	}
	if b := n.Bootstrap; b.Reported {
		var sum int64
		for _, p := range b.Phases {
			sum += p.Ms
		}
		if sum > b.TotalMs || b.TotalMs-sum > tol.Milliseconds() {
			out = append(out, fmt.Sprintf("the node script's phases add up to %s of its %s total", fmtMs(float64(sum)), fmtMs(float64(b.TotalMs))))
		}
	}
	if n.Skew.Detected {
		out = append(out, "machine clock "+n.Skew.Detail)
	}
	return out
}
