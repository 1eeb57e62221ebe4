package hcloud

// Labels Hetzner's own controllers put on a node: the CSI driver's topology
// key (a volume's node affinity names it) and the CCM's mark of a cloud
// server (not a dedicated one). Nodes of hcloud groups carry them from the
// start (TopologyLabels), so CA's templates match what the controllers set.
const (
	LabelCSILocation = "csi.hetzner.cloud/location"
	LabelProvidedBy  = "instance.hetzner.cloud/provided-by"
)

// LabelStandbyHostKey pins the SSH host key prebake made for a warm-pool
// standby (standby.go): the SHA-256 of the key, lowercase base32 without
// padding (52 characters; a Hetzner label value has at most 63,
// alphanumeric at both ends). It is set at create, with the standby marker
// providers.LabelStandby, and removed once a resume started the join, so a
// restarted prebake trusts no host key on first use, and a server with this
// label but no marker is a take under way.
const LabelStandbyHostKey = "prebake.dev/standby-host-key"
