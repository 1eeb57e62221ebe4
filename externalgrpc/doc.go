// Package externalgrpc is the cluster-autoscaler externalgrpc wire adapter:
// it translates CA's messages to calls on the autoscaling core and back, and
// does nothing else. It knows only the core.
//
// Invariants: reads are answered from the core's snapshot; the core's error
// kinds map to gRPC codes in one place (codeOf); NodeGroupGetOptions and the
// pricing RPCs answer Unimplemented (see spec §6.15); TemplateNodeInfo never
// answers OK with empty bytes.
package externalgrpc
