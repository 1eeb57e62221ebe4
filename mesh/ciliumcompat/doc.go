// Package ciliumcompat checks prebake's Cluster Mesh support against Cilium itself,
// github.com/cilium/cilium v1.20.2, in tests only:
//
//   - the cluster name and id rules (package mesh re-implements them) against
//     pkg/clustermesh/types, table by table: when Cilium changes a rule, a test fails;
//   - the objects prebake's cilium backend writes against the code that reads them: Cilium's
//     ClusterMesh (pkg/clustermesh/common, what the agent and KVStoreMesh run) loads the
//     rendered Secret from a directory laid out as the chart mounts it, and Cilium's etcd
//     client connects with it, over mTLS, to a real etcd initialised by Cilium's own
//     etcdinit with the users of the rendered clustermesh-remote-users, reads the remote's
//     cluster config (written with Cilium's clustercfg and types) and lists its nodes; and
//     it fails, with Cilium's errors, when the CA is not shared, when an endpoint names
//     another cluster, and when a peer's users lack the cluster;
//   - Cilium's KVStoreMesh (pkg/clustermesh/kvstoremesh, in-process) mirrors the peers
//     through the rendered cilium-kvstoremesh, and the agents' entries of
//     cilium-clustermesh read the mirror from the local etcd;
//   - the status a join waits for: Cilium's API models, parsed by mesh.ParseMeshStatus.
//
// It is a separate, test-only module (its own go.mod, with a replace of the prebake module
// to ../..), so that prebake's own module graph and binaries never carry Cilium's
// dependencies (pkg/clustermesh/types alone adds 23 modules; docs/mesh.md). Run it with
// `make ciliumcompat`.
//
// Invariants: nothing outside this module imports it, and it imports Cilium only in
// tests; every etcd it starts listens on 127.0.0.1 only and is closed by its test.
package ciliumcompat
