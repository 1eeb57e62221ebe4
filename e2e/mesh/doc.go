// Package meshe2e is the end-to-end test of `prebake mesh` with the cilium backend (build
// tag e2e): seven real kube-apiservers, each a separate cluster under its own
// --etcd-prefix of one shared etcd (the hermetic control plane, kube-apiserver only), and
// the mesh objects written into them through client-go, exactly as `prebake mesh apply
// --backend cilium` does. No Cilium runs: what is checked is what Cilium would read.
//
// Run it with `make e2e`, or alone:
//
//	go test -tags e2e -count=1 -v ./e2e/mesh/
//
// Invariants: every process listens on 127.0.0.1 only and is stopped by the test; the
// clustermesh-apiserver endpoints in the clusters file are data that nothing dials.
package meshe2e
