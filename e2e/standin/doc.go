// Package standin is a stand-in for the Kubernetes cluster-autoscaler (CA), used by prebake's
// e2e tests and `make demo`. It is not CA and does not pretend to be: it drives
// `prebake serve` over real gRPC the way CA 1.36 does (its RunOnce loop: Refresh, NodeGroups, per-group reads, then scale-up; kubernetes/autoscaler cluster-autoscaler/core/static_autoscaler.go),
// against a real API server and scheduler, and records when each step of a scale-up
// happened so the tests can time it.
//
// One Loop iteration: Refresh, NodeGroups, NodeGroupTargetSize and NodeGroupNodes for every
// group, the fast failure path for instances in state creating with an errorInfo (back the
// group off, DeleteNodes them as fake nodes), NodeGroupTemplateNodeInfo for every group,
// then the pods the scheduler marked PodScheduled=False/Unschedulable, less those that fit
// free room on Ready nodes or on upcoming nodes (target minus registered Ready nodes),
// binpacked first-fit onto copies of each group's template; the group that takes the most
// pods (then the fewest nodes, then the first listed) gets one IncreaseSize.
//
// Deliberate simplifications against CA, so nobody mistakes the timings for CA's:
//   - no 2 s "young pod" buffer and no GPU batching; the loop runs every Options.Interval
//     (200 ms) and at once when a pod turns unschedulable or after a scale-up;
//   - the template always comes from NodeGroupTemplateNodeInfo, never from a real node;
//   - only nodeSelector, taints/tolerations and resource requests are simulated (no
//     affinity, topology spread or volumes); no DaemonSet pods are added to templates;
//   - scale-down happens only when a caller asks (DeleteNodes); no utilisation logic.
//
// Invariants: a node counts as registered only when its spec.providerID equals, byte for
// byte, an instance id from NodeGroupNodes (CA's own rule: it matches by string equality, cluster-autoscaler/utils/kubernetes); timestamps are taken
// when this process observed the event (informer callbacks, RPC returns), on one clock.
package standin
