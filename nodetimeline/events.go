package nodetimeline

import (
	"regexp"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// CA writes ScaledUpGroup on its status ConfigMap right before it calls IncreaseSize, and
// TriggeredScaleUp on each pod the scale-up is for right after: the messages name the group,
// its size before and after, and its max (ScaleUpInfo's String).
var (
	decisionMessage = regexp.MustCompile(`^Scale-up: setting group (\S+) size to (\d+) instead of (\d+)`)
	triggerInfo     = regexp.MustCompile(`\{(\S+) (\d+)->(\d+) \(max: \d+\)\}`)
)

// maxEventGap bounds how far CA's Events may lie from the IncreaseSize they go with: CA
// calls IncreaseSize right after its ScaledUpGroup Event and writes TriggeredScaleUp right
// after it returns (its grpc_timeout is 5 s by default).
const maxEventGap = time.Minute

type caEvent struct {
	group     string
	from, to  int
	times     []time.Time // the Event's first and last time, as kept
	res       int64       // ms
	message   string
	component string
	pod       types.NamespacedName
	podUID    types.UID
}

type eventIndex struct {
	decisions []caEvent
	triggers  []caEvent
}

type podIndex struct {
	onNode map[string][]*corev1.Pod
	byName map[types.NamespacedName]*corev1.Pod
}

func indexPods(pods []corev1.Pod) podIndex {
	x := podIndex{onNode: map[string][]*corev1.Pod{}, byName: map[types.NamespacedName]*corev1.Pod{}}
	for i := range pods {
		p := &pods[i]
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		if _, dup := x.byName[key]; dup {
			continue
		}
		x.byName[key] = p
		if p.Spec.NodeName != "" {
			x.onNode[p.Spec.NodeName] = append(x.onNode[p.Spec.NodeName], p)
		}
	}
	return x
}

func indexEvents(events []corev1.Event) eventIndex {
	var x eventIndex
	for i := range events {
		e := &events[i]
		times, res := eventTimes(e)
		if len(times) == 0 {
			continue
		}
		c := caEvent{times: times, res: res, message: e.Message, component: e.Source.Component}
		if c.component == "" {
			c.component = e.ReportingController
		}
		switch e.Reason {
		case ReasonScaledUpGroup:
			m := decisionMessage.FindStringSubmatch(e.Message)
			if m == nil {
				continue // "size set to": the confirmation after IncreaseSize returned
			}
			c.group = m[1]
			c.to, _ = strconv.Atoi(m[2])
			c.from, _ = strconv.Atoi(m[3])
			x.decisions = append(x.decisions, c)
		case ReasonTriggeredScaleUp:
			if e.InvolvedObject.Kind != "Pod" {
				continue
			}
			c.pod = types.NamespacedName{Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name}
			c.podUID = e.InvolvedObject.UID
			// One Event may name several groups (a balanced scale-up): one entry each.
			for _, m := range triggerInfo.FindAllStringSubmatch(e.Message, -1) {
				g := c
				g.group = m[1]
				g.from, _ = strconv.Atoi(m[2])
				g.to, _ = strconv.Atoi(m[3])
				x.triggers = append(x.triggers, g)
			}
		}
	}
	return x
}

// eventTimes are the moments an Event keeps of its occurrences: its eventTime (µs) when set,
// else its first and last timestamps (whole seconds). An aggregated Event keeps no others.
func eventTimes(e *corev1.Event) ([]time.Time, int64) {
	if !e.EventTime.IsZero() {
		out := []time.Time{e.EventTime.Time}
		if e.Series != nil && !e.Series.LastObservedTime.IsZero() {
			out = append(out, e.Series.LastObservedTime.Time)
		}
		return out, 1
	}
	var out []time.Time
	for _, t := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time} {
		if !t.IsZero() && !slices.ContainsFunc(out, t.Equal) {
			out = append(out, t)
		}
	}
	return out, 1000
}

type triggerMatch struct {
	Trigger
	moment Moment
}

// matchEvents finds the CA decision and the triggering pod of the scale-up that requested
// the node at requested (prebake's clock, ms). CA's clock is taken to agree with prebake's
// (both run in the cluster); Events whose times would need otherwise match nothing.
func matchEvents(group string, requested time.Time, x eventIndex, pods podIndex) (Moment, triggerMatch) {
	decision := Moment{Name: CADecision, Unknown: UnknownNoEvent}
	trig := triggerMatch{moment: Moment{Name: PodPending, Unknown: UnknownNoEvent}}
	if requested.IsZero() {
		decision.Unknown, trig.moment.Unknown = UnknownNeedsRequest, UnknownNeedsRequest
		return decision, trig
	}
	// The decision: the latest ScaledUpGroup of the group at or before the request, within
	// the gap. Whole-second times are truncated, so a true time before the request is too.
	var best *caEvent
	var bestAt time.Time
	for i := range x.decisions {
		d := &x.decisions[i]
		if d.group != group {
			continue
		}
		for _, t := range d.times {
			if !t.After(requested) && requested.Sub(t) <= maxEventGap && t.After(bestAt) {
				best, bestAt = d, t
			}
		}
	}
	if best != nil {
		decision = Moment{Name: CADecision, At: bestAt, ResolutionMs: best.res, Source: "Event " + ReasonScaledUpGroup + " by " + best.component, Clock: ClockCA}
		trig.Decision, trig.Component = best.message, best.component
	}
	// The triggers: TriggeredScaleUp Events of the group written at or after the request
	// (truncated to its second), the earliest scale-up's; with a decision, the one whose
	// sizes it names.
	floor := requested.Truncate(time.Second)
	type cand struct {
		e  *caEvent
		at time.Time
	}
	var cands []cand
	for i := range x.triggers {
		e := &x.triggers[i]
		if e.group != group || best != nil && (e.from != best.from || e.to != best.to) {
			continue
		}
		for _, t := range e.times {
			if !t.Before(floor) && t.Sub(requested) <= maxEventGap {
				cands = append(cands, cand{e, t})
				break
			}
		}
	}
	if len(cands) == 0 {
		return decision, trig
	}
	slices.SortFunc(cands, func(a, b cand) int { return a.at.Compare(b.at) })
	first := cands[0]
	var pending time.Time
	for _, c := range cands {
		if c.e.from != first.e.from || c.e.to != first.e.to || c.at.Sub(first.at) > maxEventGap {
			continue
		}
		trig.Pods++
		if trig.Component == "" {
			trig.Component = c.e.component
		}
		p := pods.byName[c.e.pod]
		if p == nil || c.e.podUID != "" && p.UID != c.e.podUID {
			continue
		}
		if created := p.CreationTimestamp.Time; pending.IsZero() || created.Before(pending) {
			pending = created
			trig.Pod = c.e.pod.String()
		}
	}
	if pending.IsZero() {
		trig.moment.Unknown = UnknownPodGone
		return decision, trig
	}
	trig.moment = Moment{Name: PodPending, At: pending, ResolutionMs: 1000, Source: "creationTimestamp of the pod CA's " + ReasonTriggeredScaleUp + " names", Clock: ClockAPI}
	return decision, trig
}
