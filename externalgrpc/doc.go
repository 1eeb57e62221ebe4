// Package externalgrpc is the cluster-autoscaler externalgrpc wire adapter:
// it translates CA's messages to calls on the autoscaling core and back, and
// does nothing else. It knows only the core.
//
// Invariants: reads are answered from the core's snapshot; the core's error
// kinds map to gRPC codes in one place (codeOf); NodeGroupGetOptions answers
// Unimplemented (answering would zero CA's MaxNodeStartupTime,
// kubernetes/autoscaler#10245); the pricing RPCs answer from the machine
// types' prices, because CA's price expander scales nothing up without them;
// TemplateNodeInfo never answers OK with empty bytes.
package externalgrpc
