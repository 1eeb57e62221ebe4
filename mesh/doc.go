// Package mesh joins clusters into a Cilium Cluster Mesh.
//
// It holds:
//   - the cluster registry (LoadFile, LoadFileIDs, Validate, CheckCapacity), which
//     enforces Cilium's name, id, maxConnectedClusters and pod CIDR rules and its 255/511
//     cluster ceiling without importing Cilium, and allocates each cluster's id once,
//     recording it in an ids file (AllocateIDs);
//   - the round scheduler (Plan), a pure function from the current and the wanted
//     connection graphs to rounds of disjoint pairs;
//   - the executor (Executor), which runs a schedule against a Backend, or joins each
//     cluster declaratively: at most Parallel joins in flight, each a write and, with a
//     StatusReader, a wait until the cluster reports its peers ready; a Journal records
//     the joins (a join without a wait as "unverified") so a killed run resumes;
//   - the status readers, both parsing Cilium's own status JSON (ParseMeshStatus):
//     ExecStatus (built in: cilium-dbg and kvstoremesh-dbg through pods/exec, tested
//     against mesh/ciliumfake) and StatusCommand (a command per cluster);
//   - the backends: Cilium (server-side apply of the objects Cilium reads with
//     clustermesh.config.enabled=false, through client-go), Command (a command per
//     pair), HelmValues (a values file per cluster) and Simulated (benchmarks).
//
// Invariants:
//   - Plan is deterministic: the same graphs give the same schedule, byte for byte.
//   - In a schedule, every needed pair appears exactly once and no cluster appears
//     twice in a round. The executor runs one round at a time, so no cluster ever
//     takes part in two operations at once (two Helm upgrades of one release conflict,
//     see docs/mesh.md).
//   - Every backend observes what is configured (the clusters' objects, the files, the
//     command journal), and the executor plans from that, so a re-run resumes and a
//     re-run of a finished apply writes nothing.
//   - Declarative runs write only the clusters that stay in the mesh; a Preflighter
//     backend refuses a run that cannot succeed before its first write.
//   - A join holds its Parallel slot from its write to the end of its wait; a peer whose
//     status flaps only prolongs waits, it never causes a write.
//   - An id in the ids file is never changed or handed to another cluster.
//
// mesh is a leaf package: it imports no other prebake package, and no Cilium package
// (mesh/ciliumcompat cross-checks the rules against Cilium in a separate module).
package mesh
