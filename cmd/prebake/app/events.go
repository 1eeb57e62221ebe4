package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/autoscaling"
)

// Event reasons prebake writes. Stable: alerts and dashboards match them.
const (
	ReasonImageFallback = "RuntimeInstallFallback"
	// ReasonContainerImagesNotBaked: the Node's image lacks some of its group's
	// image.containerImages (docs/images.md, "Baked container images").
	ReasonContainerImagesNotBaked = "ContainerImagesNotBaked"
)

// eventComponent is the source component of prebake's Events.
const eventComponent = "prebake"

// KubeEvents writes core/v1 Events about the machines' Nodes, in the
// "default" namespace like every Event about a cluster-scoped object. The
// Node may not exist yet when the Event is written; kubectl describe node
// shows it once it does.
type KubeEvents struct {
	client kubernetes.Interface
	log    *slog.Logger
	now    func() time.Time
}

// NewKubeEvents returns an EventSink that writes through client.
func NewKubeEvents(client kubernetes.Interface, log *slog.Logger) *KubeEvents {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &KubeEvents{client: client, log: log, now: time.Now}
}

// ImageFallback implements autoscaling.EventSink. A failed write is logged, never
// retried: the metric already counted the fallback.
func (k *KubeEvents) ImageFallback(ctx context.Context, f autoscaling.Fallback) {
	k.write(ctx, f.Group, f.Machine, ReasonImageFallback,
		fmt.Sprintf("node group %q: channel %q gave no image (%s), so this node installs its components at boot: %s",
			f.Group, f.Channel, f.Reason, f.Message))
}

// ImageMissingContainerImages implements autoscaling.EventSink, as ImageFallback does.
func (k *KubeEvents) ImageMissingContainerImages(ctx context.Context, m autoscaling.MissingImages) {
	k.write(ctx, m.Group, m.Machine, ReasonContainerImagesNotBaked,
		fmt.Sprintf("node group %q: image %s (channel %q) lacks %d of the group's image.containerImages, so the kubelet pulls them: %s; no image the channel resolves to holds them all: build one whose recipe lists them (containerImages)",
			m.Group, m.Image, m.Channel, len(m.Missing), strings.Join(m.Missing, ", ")))
}

// write creates a Warning Event about the machine's Node.
func (k *KubeEvents) write(ctx context.Context, group, machine, reason, message string) {
	now := metav1.NewTime(k.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: machine + ".",
			Namespace:    metav1.NamespaceDefault,
		},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: machine},
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: eventComponent},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := k.client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		k.log.Warn("event not written", "reason", reason, "group", group, "instance", machine, "err", err)
	}
}
