package app

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/autoscaling"
)

func TestKubeEventsWritesAFallbackEvent(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	k := NewKubeEvents(client, nil)
	k.ImageFallback(t.Context(), autoscaling.Fallback{Group: "small", Machine: "small-abc12", Channel: "stable", Reason: autoscaling.FallbackNotFound, Message: "resolve channel stable: not found"})
	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("%d events, want 1", len(evs.Items))
	}
	ev := evs.Items[0]
	if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "small-abc12" || ev.Reason != ReasonImageFallback ||
		ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, `node group "small"`) || !strings.Contains(ev.Message, autoscaling.FallbackNotFound) {
		t.Errorf("event = %+v", ev)
	}
}
