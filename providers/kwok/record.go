package kwok

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok/providerid"
)

// Lease annotations: the machine record. They hold everything needed to
// build the Node, so a restarted plugin needs nothing else. The two
// exported ones are read by the e2e timeline.
const (
	annotationPrefix      = "kwok.prebake.dev/"
	AnnotationProviderID  = annotationPrefix + "provider-id"
	annotationMachineType = annotationPrefix + "machine-type"
	annotationZone        = annotationPrefix + "zone"
	annotationRegion      = annotationPrefix + "region"
	AnnotationRequestedAt = annotationPrefix + "requested-at" // RFC3339Nano
	annotationBootEndsAt  = annotationPrefix + "boot-ends-at" // RFC3339Nano
	annotationNodeLabels  = annotationPrefix + "node-labels"  // JSON object
	annotationNodeTaints  = annotationPrefix + "node-taints"  // JSON list of core/v1 Taints
)

// record is one machine as its Lease stores it.
type record struct {
	Name       string
	ProviderID string
	Group      string
	ImageKind  providers.ImageKind
	// Image is the catalog image id the machine "boots" ("" for runtime
	// install); it is the Lease's and the Node's prebake.dev/image label.
	Image       string
	MachineType string
	Zone        string
	Region      string
	RequestedAt time.Time
	BootEndsAt  time.Time
	NodeLabels  map[string]string
	NodeTaints  []corev1.Taint
}

// bootDuration is the simulated boot time of the machine.
func (r record) bootDuration() time.Duration { return r.BootEndsAt.Sub(r.RequestedAt) }

// lease returns the Lease that records r.
func (r record) lease(cluster, namespace string) (*coordinationv1.Lease, error) {
	labels, err := json.Marshal(r.NodeLabels)
	if err != nil {
		return nil, fmt.Errorf("encode node labels: %w", err)
	}
	taints, err := json.Marshal(r.NodeTaints)
	if err != nil {
		return nil, fmt.Errorf("encode node taints: %w", err)
	}
	ann := map[string]string{
		AnnotationProviderID:  r.ProviderID,
		annotationMachineType: r.MachineType,
		annotationZone:        r.Zone,
		AnnotationRequestedAt: r.RequestedAt.UTC().Format(time.RFC3339Nano),
		annotationBootEndsAt:  r.BootEndsAt.UTC().Format(time.RFC3339Nano),
		annotationNodeLabels:  string(labels),
		annotationNodeTaints:  string(taints),
	}
	if r.Region != "" {
		ann[annotationRegion] = r.Region
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        r.Name,
			Namespace:   namespace,
			Labels:      ownerLabels(cluster, r.Group, r.ImageKind, r.Image, r.Name),
			Annotations: ann,
		},
	}, nil
}

func ownerLabels(cluster, group string, kind providers.ImageKind, image, name string) map[string]string {
	l := map[string]string{
		providers.LabelCluster: cluster,
		providers.LabelGroup:   group,
		providers.LabelMachine: name,
	}
	if kind != "" {
		l[providers.LabelImageKind] = string(kind)
	}
	if image != "" {
		l[providers.LabelImage] = image
	}
	return l
}

// recordFromLease decodes a machine record. An error means the Lease was
// edited by hand or written by an incompatible version; retrying won't help.
func recordFromLease(l *coordinationv1.Lease) (record, error) {
	a := l.Annotations
	r := record{
		Name:        l.Name,
		ProviderID:  a[AnnotationProviderID],
		Group:       l.Labels[providers.LabelGroup],
		ImageKind:   providers.ImageKind(l.Labels[providers.LabelImageKind]),
		Image:       l.Labels[providers.LabelImage],
		MachineType: a[annotationMachineType],
		Zone:        a[annotationZone],
		Region:      a[annotationRegion],
	}
	bad := func(format string, args ...any) (record, error) {
		return record{}, fmt.Errorf("machine record %s/%s: %s", l.Namespace, l.Name, fmt.Sprintf(format, args...))
	}
	name, err := providerid.Parse(r.ProviderID)
	if err != nil {
		return bad("annotation %s: %v", AnnotationProviderID, err)
	}
	if name != l.Name {
		return bad("annotation %s is %q, want %q", AnnotationProviderID, r.ProviderID, providerid.Format(l.Name))
	}
	if r.MachineType == "" {
		return bad("annotation %s is missing", annotationMachineType)
	}
	if r.RequestedAt, err = time.Parse(time.RFC3339Nano, a[AnnotationRequestedAt]); err != nil {
		return bad("annotation %s: %v", AnnotationRequestedAt, err)
	}
	if r.BootEndsAt, err = time.Parse(time.RFC3339Nano, a[annotationBootEndsAt]); err != nil {
		return bad("annotation %s: %v", annotationBootEndsAt, err)
	}
	if err := json.Unmarshal([]byte(a[annotationNodeLabels]), &r.NodeLabels); err != nil {
		return bad("annotation %s: %v", annotationNodeLabels, err)
	}
	if err := json.Unmarshal([]byte(a[annotationNodeTaints]), &r.NodeTaints); err != nil {
		return bad("annotation %s: %v", annotationNodeTaints, err)
	}
	return r, nil
}

// node builds the Node a booted machine registers as. Its shape comes from
// the record alone, so a restarted plugin builds the same Node.
func (p *Provider) node(r record) (*corev1.Node, error) {
	mt, err := p.machineType(r.MachineType)
	if err != nil {
		return nil, err
	}
	taints := make([]providers.Taint, 0, len(r.NodeTaints))
	for _, t := range r.NodeTaints {
		taints = append(taints, providers.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	n := providers.BuildNode(providers.NodeShape{
		Name:        r.Name,
		ProviderID:  r.ProviderID,
		Cluster:     p.cluster,
		Group:       r.Group,
		MachineType: mt,
		Zone:        r.Zone,
		Region:      r.Region,
		Labels:      maps.Clone(r.NodeLabels),
		Taints:      taints,
		Reserved:    p.reserved,
		ImageKind:   r.ImageKind,
		Image:       r.Image,
		GPULabel:    p.gpuLabel,
	})
	n.Annotations = map[string]string{
		AnnotationKwokNode:      "fake",
		AnnotationSimulatedBoot: r.bootDuration().String(),
	}
	return n, nil
}

// instanceFromLease reads an Instance from a Lease's labels and
// annotations. It doesn't need the record to be whole: a damaged record is
// still listed, so the core can delete it.
func instanceFromLease(l *coordinationv1.Lease) providers.Instance {
	inst := providers.Instance{
		ProviderID: l.Annotations[AnnotationProviderID],
		Name:       l.Name,
		Group:      l.Labels[providers.LabelGroup],
		State:      providers.StateCreating,
		ImageKind:  providers.ImageKind(l.Labels[providers.LabelImageKind]),
		Image:      l.Labels[providers.LabelImage],
		CreatedAt:  l.CreationTimestamp.Time,
	}
	if inst.ProviderID == "" {
		inst.ProviderID = providerid.Format(l.Name)
	}
	if t, err := time.Parse(time.RFC3339Nano, l.Annotations[AnnotationRequestedAt]); err == nil {
		inst.CreatedAt = t
	}
	if l.DeletionTimestamp != nil {
		inst.State = providers.StateDeleting
	}
	return inst
}

// instanceFromNode reads an Instance from a Node we own that has no Lease.
func instanceFromNode(n *corev1.Node) providers.Instance {
	inst := providers.Instance{
		ProviderID: n.Spec.ProviderID,
		Name:       n.Name,
		Group:      n.Labels[providers.LabelGroup],
		State:      providers.StateRunning,
		ImageKind:  providers.ImageKind(n.Labels[providers.LabelImageKind]),
		Image:      n.Labels[providers.LabelImage],
		CreatedAt:  n.CreationTimestamp.Time,
	}
	if n.DeletionTimestamp != nil {
		inst.State = providers.StateDeleting
	}
	return inst
}
