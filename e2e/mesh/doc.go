// Package meshe2e is the end-to-end test of `prebake mesh` with the cilium backend (build
// tag e2e): real kube-apiservers, each a separate cluster under its own --etcd-prefix of
// one shared etcd (the hermetic control plane, kube-apiserver only), and the mesh objects
// written into them through client-go, exactly as `prebake mesh apply --backend cilium`
// does.
//
//   - TestMeshCiliumBackend: seven clusters; a mesh of 4, add 2, re-apply, remove one, and
//     a cluster with a foreign CA refused; every object read back and compared.
//   - TestMeshApplyJoins: eight clusters and the prebake binary with --parallel 4 and a
//     --status-command: at most 4 joins in flight (from the journal), an apply killed with
//     joins in flight resumes without redoing the finished ones, and a remote that flaps
//     while others wait for it makes nothing be written again.
//
// No Cilium runs here: what is checked is what Cilium would read (mesh/ciliumcompat has
// Cilium's own code read it), and the cluster status the joins wait for is published by
// a stand-in that watches the written Secrets.
//
// Run it with `make e2e`, or alone:
//
//	go test -tags e2e -count=1 -v ./e2e/mesh/
//
// Invariants: every process listens on 127.0.0.1 only and is stopped by the test; the
// clustermesh-apiserver endpoints in the clusters file are data that nothing dials.
package meshe2e
