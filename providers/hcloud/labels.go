package hcloud

// Labels Hetzner's own controllers put on a node: the CSI driver's topology
// key (a volume's node affinity names it) and the CCM's mark of a cloud
// server (not a dedicated one). Nodes of hcloud groups carry them from the
// start (TopologyLabels), so CA's templates match what the controllers set.
const (
	LabelCSILocation = "csi.hetzner.cloud/location"
	LabelProvidedBy  = "instance.hetzner.cloud/provided-by"
)
