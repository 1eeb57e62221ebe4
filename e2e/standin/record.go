package standin

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Instance is the timeline of one instance as the stand-in saw it. Zero times mean "not
// (yet) seen".
type Instance struct {
	ID    string // as NodeGroupNodes lists it: the providerID its Node must carry
	Group string
	// ImageKind is the group template's prebake.dev/image-kind label, for reports.
	ImageKind string
	// Requested is false for instances this stand-in did not ask for (found on the first
	// listing, or after a restart whose IncreaseSize it never saw).
	Requested bool
	// Pods are the pending pods (namespace/name) the scale-up placed on this instance.
	Pods []string

	// PodPendingSeen is the earliest moment one of Pods was seen PodScheduled=False/
	// Unschedulable; zero for an IncreaseSize made by hand.
	PodPendingSeen   time.Time
	IncreaseSent     time.Time
	IncreaseReturned time.Time
	// IncreaseLoop is the number of the loop that sent IncreaseSize (0: by hand).
	IncreaseLoop int
	// Listed is when NodeGroupNodes first returned the instance.
	Listed time.Time
	// Error is the creation error NodeGroupNodes reported, if any.
	Error *CreateError

	// NodeName is the Node whose spec.providerID equals ID.
	NodeName   string
	Registered time.Time
	// Ready is when the Node was first seen Ready=True without the not-ready taint.
	Ready time.Time
	// PodBound is when that first pod to run on NodeName was first seen bound to it
	// (spec.nodeName set): what lies between PodBound and PodRunning is the node's own work
	// (sandbox, image pull, container start), not the scheduler's.
	PodBound time.Time
	// PodRunning is when the first pod on NodeName was seen Running.
	PodRunning time.Time
}

// CreateError is an errorInfo of an instance in state creating (CA backs the group off and deletes them as fake nodes: cluster-autoscaler/clusterstate).
type CreateError struct {
	Class   int32 // 1 = OutOfResources, 99 = Other
	Code    string
	Message string
	SeenAt  time.Time
	// Loop is the number of the loop whose NodeGroupNodes first showed it.
	Loop int
}

// EventKind names what happened.
type EventKind string

// The events the stand-in reports to Options.OnEvent.
const (
	EventPodPending     EventKind = "pod pending"
	EventScaleUp        EventKind = "IncreaseSize"
	EventListed         EventKind = "instance listed"
	EventCreateError    EventKind = "creation error"
	EventBackoff        EventKind = "group backed off"
	EventDrained        EventKind = "node drained"
	EventDeleteNodes    EventKind = "DeleteNodes"
	EventNodeRegistered EventKind = "node registered"
	EventNodeReady      EventKind = "node Ready"
	EventNodeDeleted    EventKind = "node deleted"
	EventPodRunning     EventKind = "pod Running"
)

// Event is one step of a scale-up, for live output.
type Event struct {
	At   time.Time
	Kind EventKind
	// Subject is the pod, group, instance id or node the event is about.
	Subject string
	// Detail adds the rest in words.
	Detail string
}

func (e Event) String() string {
	if e.Detail == "" {
		return fmt.Sprintf("%-16s %s", e.Kind, e.Subject)
	}
	return fmt.Sprintf("%-16s %s  (%s)", e.Kind, e.Subject, e.Detail)
}

// slot is one node of an IncreaseSize waiting to be matched with the instance id that
// NodeGroupNodes will list for it.
type slot struct {
	pods        []string
	pendingSeen time.Time
	sent        time.Time
	returned    time.Time
	loop        int
	imageKind   string
}

// podSeen is what the pod watch saw of one pod.
type podSeen struct {
	key         string // namespace/name
	pendingSeen time.Time
	bound       time.Time
	running     time.Time
	node        string
}

// nodeSeen is what the node watch saw of the Node carrying one providerID.
type nodeSeen struct {
	name       string
	registered time.Time
	ready      time.Time
	deleted    time.Time
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func isUnschedulable(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// isReady is CA's readiness of a node (its GetReadinessState): Ready=True, and without the
// not-ready, network-unavailable or unreachable taint. The API server's TaintNodesByCondition admission puts the not-ready
// taint on every new Node, and the node lifecycle controller lifts it when it handles the
// Node's add or update event with Ready=True (tens to hundreds of milliseconds on the
// hermetic cluster); until then the scheduler won't use the node even though its Ready
// condition is True.
func isReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeNotReady, corev1.TaintNodeNetworkUnavailable, corev1.TaintNodeUnreachable:
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// IsReady reports whether n is Ready as the stand-in (and CA) counts it.
func IsReady(n *corev1.Node) bool { return isReady(n) }

func (s *StandIn) inScope(ns string) bool { return s.o.Namespace == "" || ns == s.o.Namespace }

// onPod records the first moment a pod was seen unschedulable and Running.
func (s *StandIn) onPod(p *corev1.Pod) {
	now := time.Now()
	unsched := isUnschedulable(p)
	bound := p.Spec.NodeName != ""
	running := p.Status.Phase == corev1.PodRunning && bound
	if !unsched && !bound {
		return
	}
	var evs []Event
	s.mu.Lock()
	ps := s.pods[p.UID]
	if ps == nil {
		ps = &podSeen{key: podKey(p)}
		s.pods[p.UID] = ps
	}
	scoped := s.inScope(p.Namespace)
	if unsched && ps.pendingSeen.IsZero() {
		ps.pendingSeen = now
		if scoped {
			evs = append(evs, Event{At: now, Kind: EventPodPending, Subject: ps.key, Detail: "PodScheduled=False/Unschedulable"})
		}
	}
	if bound && ps.bound.IsZero() {
		ps.bound = now
	}
	if running && ps.running.IsZero() {
		ps.running, ps.node = now, p.Spec.NodeName
		if scoped {
			evs = append(evs, Event{At: now, Kind: EventPodRunning, Subject: ps.key, Detail: "on " + p.Spec.NodeName})
		}
	}
	s.mu.Unlock()
	if unsched && scoped && len(evs) > 0 {
		s.poke()
	}
	s.emit(evs...)
}

func (s *StandIn) onPodDeleted(uid types.UID) {
	s.mu.Lock()
	delete(s.pods, uid)
	s.mu.Unlock()
}

// onNode records the first moment a Node with a providerID was seen, and Ready.
func (s *StandIn) onNode(n *corev1.Node) {
	pid := n.Spec.ProviderID
	if pid == "" {
		return
	}
	now := time.Now()
	var evs []Event
	s.mu.Lock()
	ns := s.nodes[pid]
	if ns == nil {
		ns = &nodeSeen{name: n.Name, registered: now}
		s.nodes[pid] = ns
		evs = append(evs, Event{At: now, Kind: EventNodeRegistered, Subject: n.Name, Detail: "providerID " + pid + s.matchNote(pid)})
	}
	if isReady(n) && ns.ready.IsZero() {
		ns.ready = now
		evs = append(evs, Event{At: now, Kind: EventNodeReady, Subject: n.Name})
	}
	s.mu.Unlock()
	s.emit(evs...)
}

// matchNote says whether a providerID matches a listed instance; s.mu is held.
func (s *StandIn) matchNote(pid string) string {
	if _, ok := s.instances[pid]; ok {
		return ", matches a listed instance"
	}
	return ""
}

func (s *StandIn) onNodeDeleted(n *corev1.Node) {
	if n.Spec.ProviderID == "" {
		return
	}
	now := time.Now()
	s.mu.Lock()
	ns := s.nodes[n.Spec.ProviderID]
	if ns != nil && ns.deleted.IsZero() {
		ns.deleted = now
	}
	s.mu.Unlock()
	s.emit(Event{At: now, Kind: EventNodeDeleted, Subject: n.Name, Detail: "providerID " + n.Spec.ProviderID})
}

func (s *StandIn) emit(evs ...Event) {
	if s.o.OnEvent == nil {
		return
	}
	for _, e := range evs {
		s.o.OnEvent(e)
	}
}

// poke asks Run for a loop now.
func (s *StandIn) poke() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// noteListing matches newly listed instance ids with the IncreaseSize slots of their group
// and records creation errors. listStart is when the NodeGroupNodes call began: every slot
// whose IncreaseSize had returned by then must have been listed, so leftovers are dropped
// (their creation was lost, e.g. by a plugin killed before it recorded them).
func (s *StandIn) noteListing(group string, insts []listed, listStart, now time.Time, loop int) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var evs []Event
	for _, li := range insts {
		rec := s.instances[li.id]
		if rec == nil {
			rec = &Instance{ID: li.id, Group: group, Listed: now}
			if q := s.slots[group]; len(q) > 0 {
				sl := q[0]
				s.slots[group] = q[1:]
				rec.Requested = true
				rec.Pods, rec.PodPendingSeen = sl.pods, sl.pendingSeen
				rec.IncreaseSent, rec.IncreaseReturned, rec.IncreaseLoop = sl.sent, sl.returned, sl.loop
				rec.ImageKind = sl.imageKind
			}
			s.instances[li.id] = rec
			s.order = append(s.order, li.id)
			evs = append(evs, Event{At: now, Kind: EventListed, Subject: li.id, Detail: "group " + group + ", " + li.state})
		}
		if li.err != nil && rec.Error == nil {
			e := *li.err
			e.SeenAt, e.Loop = now, loop
			rec.Error = &e
			evs = append(evs, Event{At: now, Kind: EventCreateError, Subject: li.id,
				Detail: fmt.Sprintf("class %d (%s), code %s: %s", e.Class, className(e.Class), e.Code, e.Message)})
		}
	}
	s.slots[group] = slices.DeleteFunc(s.slots[group], func(sl slot) bool { return sl.returned.Before(listStart) })
	return evs
}

func className(c int32) string {
	switch c {
	case 1:
		return "OutOfResources"
	case 99:
		return "Other"
	}
	return "unknown"
}

// Instances returns the timeline of every instance listed so far, in the order they were
// first listed.
func (s *StandIn) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.order))
	for _, id := range s.order {
		rec := *s.instances[id]
		rec.Pods = slices.Clone(rec.Pods)
		if rec.Error != nil {
			e := *rec.Error
			rec.Error = &e
		}
		if ns := s.nodes[id]; ns != nil {
			rec.NodeName, rec.Registered, rec.Ready = ns.name, ns.registered, ns.ready
			for _, ps := range s.pods {
				if ps.node == ns.name && !ps.running.IsZero() && (rec.PodRunning.IsZero() || ps.running.Before(rec.PodRunning)) {
					rec.PodRunning, rec.PodBound = ps.running, ps.bound
				}
			}
		}
		out = append(out, rec)
	}
	return out
}

// Instance returns the timeline of one instance, by id.
func (s *StandIn) Instance(id string) (Instance, bool) {
	for _, in := range s.Instances() {
		if in.ID == id {
			return in, true
		}
	}
	return Instance{}, false
}

// PodTimes returns when the pod namespace/name was first seen unschedulable and Running.
func (s *StandIn) PodTimes(key string) (pendingSeen, running time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ps := range s.pods {
		if ps.key == key {
			return ps.pendingSeen, ps.running, true
		}
	}
	return time.Time{}, time.Time{}, false
}

func joinPods(pods [][]*corev1.Pod) string {
	var names []string
	for _, node := range pods {
		for _, p := range node {
			names = append(names, podKey(p))
		}
	}
	if len(names) > 4 {
		return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
	}
	return strings.Join(names, ", ")
}
