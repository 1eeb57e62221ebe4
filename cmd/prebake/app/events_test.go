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

func TestKubeEventsWritesAMissingContainerImagesEvent(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	k := NewKubeEvents(client, nil)
	k.ImageMissingContainerImages(t.Context(), autoscaling.MissingImages{Group: "small", Machine: "small-abc12", Channel: "stable", Image: "img-a",
		Missing: []string{"registry.example/app:1.2", "registry.example/worker:3"}})
	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("%d events, want 1", len(evs.Items))
	}
	ev := evs.Items[0]
	if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "small-abc12" || ev.Reason != ReasonContainerImagesNotBaked || ev.Type != corev1.EventTypeWarning {
		t.Errorf("event = %+v", ev)
	}
	for _, want := range []string{`node group "small"`, "image img-a", "lacks 2 of", "registry.example/app:1.2, registry.example/worker:3"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("event message %q lacks %q", ev.Message, want)
		}
	}
}
