package standin

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Events cluster-autoscaler writes around a scale-up, which `prebake timeline` reads:
// ScaledUpGroup on its status ConfigMap right before IncreaseSize
// (core/scaleup/orchestrator/executor.go) and TriggeredScaleUp on each pod the scale-up is
// for once it returned (processors/status/eventing_scale_up_processor.go). The stand-in
// writes them with CA's reasons, messages and whole-second core/v1 timestamps, under its own
// component name, so nobody takes them for CA's.
const (
	// EventComponent is the source component of the stand-in's Events.
	EventComponent = "ca-standin"
	// StatusConfigMap is the ConfigMap CA's ScaledUpGroup Events are about.
	StatusConfigMap = "cluster-autoscaler-status"
	eventBuffer     = 1024
)

// caEvents writes Events off the loop, as CA's recorder does: a full buffer drops them.
type caEvents struct {
	ch      chan *corev1.Event
	dropped atomic.Int64
}

// startCAEvents starts the writer; it stops when ctx ends.
func (s *StandIn) startCAEvents(ctx context.Context) {
	if s.o.CAEventsNamespace == "" {
		return
	}
	s.caEvents = &caEvents{ch: make(chan *corev1.Event, eventBuffer)}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-s.caEvents.ch:
				if _, err := s.o.Kube.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
					s.log.Warn("CA event not written", "reason", e.Reason, "object", e.InvolvedObject.Name, "err", err)
				}
			}
		}
	}()
}

func (s *StandIn) caEvent(e *corev1.Event) {
	if s.caEvents == nil {
		return
	}
	select {
	case s.caEvents.ch <- e:
	default:
		s.caEvents.dropped.Add(1)
	}
}

// scaleUpInfo is CA's ScaleUpInfo as its String prints it.
type scaleUpInfo struct {
	group         string
	from, to, max int
}

func (i scaleUpInfo) String() string {
	return fmt.Sprintf("{%s %d->%d (max: %d)}", i.group, i.from, i.to, i.max)
}

func (s *StandIn) decisionEvent(i scaleUpInfo, at time.Time) {
	ns := s.o.CAEventsNamespace
	s.caEvent(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%x", StatusConfigMap, at.UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: ns, Name: StatusConfigMap},
		Reason:         "ScaledUpGroup",
		Message:        fmt.Sprintf("Scale-up: setting group %s size to %d instead of %d (max: %d)", i.group, i.to, i.from, i.max),
		Type:           corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: EventComponent},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	})
}

func (s *StandIn) triggerEvents(pods []*corev1.Pod, i scaleUpInfo, at time.Time) {
	for _, p := range pods {
		s.caEvent(&corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, Name: fmt.Sprintf("%s.%x", p.Name, at.UnixNano())},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			Reason:         "TriggeredScaleUp",
			Message:        "pod triggered scale-up: [" + i.String() + "]",
			Type:           corev1.EventTypeNormal,
			Source:         corev1.EventSource{Component: EventComponent},
			FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
		})
	}
}
