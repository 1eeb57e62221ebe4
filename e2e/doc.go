// Package e2e holds prebake's end-to-end scenarios (build tag e2e) and the packages they
// use: cluster (the hermetic control plane, or kind), standin (a stand-in for
// cluster-autoscaler), serveproc (`prebake serve` as a real process) and timeline (the
// report). Run them with `make e2e`, i.e. `go test -tags e2e ./e2e/...`; without the tag
// there is nothing to run here.
//
// Each scenario gets its own clusterName, machine-record namespace, pod namespace and node
// group ids, and its pods select prebake.dev/cluster, so scenarios sharing one control plane
// can't take each other's nodes. Each run writes e2e/out/timeline.md and timeline.json.
package e2e
