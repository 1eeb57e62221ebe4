package providers

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultMaxPods is the kubelet's default when a machine type gives none.
const DefaultMaxPods = 110

// Reserved is what the kubelet keeps back from allocatable (kube-reserved
// plus system-reserved plus the eviction threshold, summed).
type Reserved struct {
	MilliCPU    int64
	MemoryBytes int64
}

// NodeShape is everything that decides what a node of a group looks like
// to the scheduler. It is a pure value: BuildNode turns it into a Node.
type NodeShape struct {
	Name        string
	ProviderID  string
	Cluster     string
	Group       string
	MachineType MachineType
	Zone        string
	Region      string
	// Topology, when not nil, are the node's topology labels in place of
	// Zone and Region (see Provider.TopologyLabels).
	Topology map[string]string
	// Labels are the group's own labels; they win over nothing: a user label
	// can't override the standard or ownership labels.
	Labels   map[string]string
	Taints   []Taint
	Reserved Reserved
	// Image is the catalog image id the node boots ("" for runtime
	// install or a template); ImageKind says which path it takes.
	Image     string
	ImageKind ImageKind
	// GPULabel is the label key that marks GPU nodes, set when GPUs > 0.
	GPULabel string
}

// NodeLabels returns every label a registered node of this shape carries.
func NodeLabels(s NodeShape) map[string]string {
	l := make(map[string]string, len(s.Labels)+10)
	maps.Copy(l, s.Labels)
	arch := s.MachineType.Arch
	if arch == "" {
		arch = "amd64"
	}
	l[LabelArch] = arch
	l[LabelOS] = "linux"
	l[LabelInstanceType] = s.MachineType.Name
	switch {
	case s.Topology != nil:
		maps.Copy(l, s.Topology)
	default:
		if s.Zone != "" {
			l[LabelZone] = s.Zone
		}
		if s.Region != "" {
			l[LabelRegion] = s.Region
		}
	}
	if s.Name != "" {
		l[LabelHostname] = s.Name
	}
	l[LabelCluster] = s.Cluster
	l[LabelGroup] = s.Group
	if s.ImageKind != "" {
		l[LabelImageKind] = string(s.ImageKind)
	}
	if s.Image != "" {
		l[LabelImage] = s.Image
	}
	if s.MachineType.GPUs > 0 && s.GPULabel != "" {
		gpuType := s.MachineType.GPUType
		if gpuType == "" {
			gpuType = "true"
		}
		l[s.GPULabel] = gpuType
	}
	return l
}

// CoreTaints converts taints to core/v1.
func CoreTaints(ts []Taint) []corev1.Taint {
	if len(ts) == 0 {
		return nil
	}
	out := make([]corev1.Taint, 0, len(ts))
	for _, t := range ts {
		out = append(out, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return out
}

// Capacity returns the node's capacity and allocatable. Allocatable is
// capacity minus Reserved, never below zero.
func Capacity(mt MachineType, r Reserved) (capacity, allocatable corev1.ResourceList) {
	pods := mt.Pods
	if pods <= 0 {
		pods = DefaultMaxPods
	}
	capacity = corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(mt.MilliCPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(mt.MemoryBytes, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
	}
	if mt.EphemeralStorageBytes > 0 {
		capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(mt.EphemeralStorageBytes, resource.BinarySI)
	}
	if mt.GPUs > 0 {
		capacity["nvidia.com/gpu"] = *resource.NewQuantity(mt.GPUs, resource.DecimalSI)
	}
	allocatable = capacity.DeepCopy()
	allocatable[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(mt.MilliCPU-r.MilliCPU, 0), resource.DecimalSI)
	allocatable[corev1.ResourceMemory] = *resource.NewQuantity(max(mt.MemoryBytes-r.MemoryBytes, 0), resource.BinarySI)
	return capacity, allocatable
}

// BuildNode returns a Ready Node of this shape: labels, taints, capacity,
// allocatable and providerID. It is the scale-from-zero template and the
// body of the kwok provider's Nodes.
func BuildNode(s NodeShape) *corev1.Node {
	capacity, allocatable := Capacity(s.MachineType, s.Reserved)
	labels := NodeLabels(s)
	now := metav1.Now()
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   s.Name,
			Labels: labels,
		},
		Spec: corev1.NodeSpec{
			ProviderID: s.ProviderID,
			Taints:     CoreTaints(s.Taints),
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				Reason:             "KubeletReady",
				LastHeartbeatTime:  now,
				LastTransitionTime: now,
			}},
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:    labels[LabelArch],
				OperatingSystem: "linux",
			},
		},
	}
}

// NodeReady is CA's rule for a node that counts as ready: the Ready condition is True and none of the
// taints that keep pods off a starting node is left. (The API server adds
// node.kubernetes.io/not-ready to a new Node whatever its condition says,
// until the node lifecycle controller lifts it.)
func NodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeNetworkUnavailable:
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
