// Package kubetest provides the Kubernetes clusters that prebake's e2e tests and `make demo`
// run against, behind one small interface, Backend.
//
//   - Hermetic (the default) runs etcd, kube-apiserver, kube-controller-manager,
//     kube-scheduler and kwok as local processes. It needs no Docker, no container registry
//     and no internet beyond the Go module proxy: Build compiles the binaries from their Go
//     modules (Kubernetes v1.35.4, etcd v3.6.16, kwok v0.8.0) into
//     $XDG_CACHE_HOME/prebake/k8s/<version>, once per machine.
//   - Kind creates a kind cluster in Docker, when Docker, a local node image and the kind
//     CLI are present, and reports ErrBackendUnavailable otherwise.
//
// PREBAKE_E2E_BACKEND picks one ("hermetic" or "kind"); see NewBackend. Nodes added with
// AddNode carry the kwok.x-k8s.io/node=fake annotation, so kwok marks them Ready and runs
// their pods; nothing else in the cluster is fake. docs/e2e.md has the measurements and
// pitfalls behind the flags used here.
//
// Invariants of the hermetic backend:
//   - Everything listens on 127.0.0.1, on ports picked free at each Start, so clusters in
//     parallel (or a leftover) never clash. Certificates are generated at each Start.
//   - Each process runs in its own process group with Pdeathsig=SIGKILL, started from one
//     locked OS thread (see spawner), and its PID is in <Dir>/pids/<name>.pid. Stop and a
//     failed Start leave no process behind; if the test process itself is killed, the kernel
//     kills the children, and ReapStale (run by Start) cleans up after anything that escaped.
//   - Start waits on health endpoints and on the default ServiceAccount, never on sleeps.
//     On failure its error ends with the tail of every component log in <Dir>/logs.
//   - Build never writes into the repository. It reuses the cache only when the stamp file,
//     written last, matches; a flock on <cache>/.lock serialises concurrent builds.
//
// Harmless log lines: kube-apiserver logs "Found stale data, removed previous endpoints on
// kubernetes service" at every start, because --endpoint-reconciler-type=none always reports
// success; etcd, kwok and the scheduler log errors such as "server closed" and "finished
// without leader elect" when Stop terminates them.
package kubetest
