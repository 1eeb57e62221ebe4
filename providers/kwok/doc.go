// Package kwok is the embedded default provider. Its "cloud" is a Kubernetes
// cluster: a machine is a Node object that the kwok controller (a separate
// process, managing Nodes annotated kwok.x-k8s.io/node=fake) keeps Ready and
// whose pods it runs. No VM exists anywhere.
//
// The boot time is SIMULATED. Create records the machine and returns at once;
// the Node is created only when BootProfile's duration for the image kind has
// passed, and it carries the annotation prebake.dev/simulated-boot so nobody
// mistakes the timing for a real boot.
//
// Invariants:
//   - Each machine has one coordination/v1 Lease, named after it, in
//     Options.Namespace. The Lease is the machine record: it holds everything
//     needed to build the Node, so a restarted plugin resumes machines that are
//     still booting and rebuilds its state from List alone.
//   - Ownership lives in the cluster: Leases and Nodes carry
//     providers.LabelCluster; only those, and only Nodes with a kwok://
//     providerID, are ours. Nothing else is ever modified or deleted.
//   - The providerID is kwok://<machine name> (package providerid) and is known
//     before the Node exists.
//   - A Node is never left behind by a Delete: Delete removes the Lease before
//     the Node, and the materialiser checks the Lease again after creating a
//     Node, deleting it if the machine went away meanwhile.
//   - Background work happens only inside Run, which stops when its context
//     ends.
package kwok
