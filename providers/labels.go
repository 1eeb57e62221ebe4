package providers

// Label and annotation keys. This file is their one home.
const (
	// LabelCluster marks every cloud resource and Node the plugin owns with
	// the configured cluster name. Ownership lives in the cloud: a restarted
	// plugin rebuilds its state from resources carrying this label.
	LabelCluster = "prebake.dev/cluster"
	// LabelGroup is the node group id, on cloud resources and on Nodes.
	LabelGroup = "prebake.dev/group"
	// LabelImage is the image id a machine booted from.
	LabelImage = "prebake.dev/image"
	// LabelImageKind is prebaked or runtime-install.
	LabelImageKind = "prebake.dev/image-kind"
	// TaintCanary=<group>:NoSchedule is on the Node of the image canary's
	// machine (autoscaling.JoinCanary), which is deleted without a drain.
	TaintCanary = "prebake.dev/canary"
	// LabelMachine is the machine name the core chose, on cloud resources.
	LabelMachine = "prebake.dev/machine"
	// LabelLabelsOf marks a docker provider label record: a tiny image whose
	// labels stand for those of the catalog image named by the value, since
	// a Docker image's own labels can't change.
	LabelLabelsOf = "prebake.dev/labels-of"

	// Standard Kubernetes node labels.
	LabelHostname     = "kubernetes.io/hostname"
	LabelArch         = "kubernetes.io/arch"
	LabelOS           = "kubernetes.io/os"
	LabelInstanceType = "node.kubernetes.io/instance-type"
	LabelZone         = "topology.kubernetes.io/zone"
	LabelRegion       = "topology.kubernetes.io/region"

	// Labels Hetzner's own controllers put on a node: the CSI driver's topology key (a
	// volume's node affinity names it) and the CCM's mark of a cloud server (not a
	// dedicated one).
	LabelHcloudCSILocation = "csi.hetzner.cloud/location"
	LabelHcloudProvidedBy  = "instance.hetzner.cloud/provided-by"

	// AnnotationFakeNodeReason is set by CA on the fake nodes it synthesises
	// from instances that have no Node.
	AnnotationFakeNodeReason = "k8s.io/cluster-autoscaler/fake-node-reason"
)
