package providers

// Label and annotation keys every provider and the core share. This file is
// their one home; a key only one provider uses lives in its package.
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
	// machine (autoscaling/canary), which is deleted without a drain.
	TaintCanary = "prebake.dev/canary"
	// LabelMachine is the machine name the core chose, on cloud resources.
	LabelMachine = "prebake.dev/machine"
	// LabelStandby=<state> marks a warm-pool standby (stopped, suspended):
	// the marker Resume removes before the machine gets its join
	// user-data. Where a cloud's labels can't change (Docker), it is on a
	// record the provider keeps beside the machine.
	LabelStandby = "prebake.dev/standby"

	// Standard Kubernetes node labels.
	LabelHostname     = "kubernetes.io/hostname"
	LabelArch         = "kubernetes.io/arch"
	LabelOS           = "kubernetes.io/os"
	LabelInstanceType = "node.kubernetes.io/instance-type"
	LabelZone         = "topology.kubernetes.io/zone"
	LabelRegion       = "topology.kubernetes.io/region"

	// AnnotationFakeNodeReason is set by CA on the fake nodes it synthesises
	// from instances that have no Node.
	AnnotationFakeNodeReason = "k8s.io/cluster-autoscaler/fake-node-reason"
)
