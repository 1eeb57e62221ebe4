// Package static is the provider for a pool of existing machines reached
// over SSH: bare-metal servers, VMs made by hand, anything that already
// runs and that no API creates. Its "cloud" is the pool from the config plus
// the claims kept in the target cluster.
//
// Scale-up claims a free machine of the group's machine type and zone and
// pipes the node script (CreateRequest.UserData, a POSIX shell script) to
// `sh -s` on it over SSH; the machine registers with providerID
// static://<host>. Scale-down drains the Node (cordon, evict), runs the
// reset command over SSH and releases the claim. No image can be chosen,
// so Images is nil: every node takes the runtime-install path.
//
// Invariants:
//   - A claim is one coordination/v1 Lease per machine, named after the
//     machine's host, in Options.Namespace. The API server's
//     create-or-AlreadyExists decides who holds a machine, so two plugin
//     replicas (or two clusters sharing a pool and a claim namespace) never
//     claim the same machine; later changes to a claim carry its
//     resourceVersion.
//   - A claim carries providers.LabelCluster, LabelGroup and LabelMachine
//     (the name the core chose): List is the claims of this cluster, and a
//     retried Create with the same name finds its claim instead of taking a
//     second machine. A restarted plugin rebuilds everything from the claims.
//   - Host keys are always checked against the known_hosts file; there is
//     no way to turn that off.
//   - UserData and command output are never logged whole: they can hold
//     join secrets. Errors (which CA shows in Events) carry no command
//     output; the log carries a failed command's stderr tail, redacted.
//   - A Lease that another cluster holds is never changed or deleted.
package static
