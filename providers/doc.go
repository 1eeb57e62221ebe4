// Package providers holds the contract between the autoscaling core and the
// clouds: the Provider interface, its value types, the label keys, and the
// shape of a node of a group (NodeShape), which both the scale-from-zero
// template and the kwok provider's Nodes are built from, so the two can't
// drift apart.
//
// Invariants: no cloud SDK type crosses the interface; every resource a
// provider creates carries LabelCluster and LabelGroup; Delete of something
// already gone is not an error; what a provider's machines can do (boot
// images, take user-data, need a container's settings, park warm-pool
// standbys) is what it declares in Capabilities, never inferred from its
// name; a provider that parks no standby still implements Park and Resume,
// which then fail with ErrStandbyUnsupported. A standby's marker is dropped
// before the machine is handed its join user-data, so no machine is ever
// both a standby and a node.
package providers
