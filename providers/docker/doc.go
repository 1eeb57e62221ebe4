// Package docker is a provider whose machines are containers that boot like
// VMs, on Docker networks the provider creates: real nodes on one host, for
// local and CI tests of autoscaling (like Cluster API's Docker provider). It
// talks to the Docker Engine API through the maintained Go client, with API
// version negotiation; it never runs the docker CLI.
//
// Invariants:
//   - A machine is one container named NamePrefix+<machine name>; its
//     providerID is docker://<container name> (package providerid), known
//     before it exists. Its hostname, and so its Node's name, is the machine
//     name.
//   - Ownership lives in the engine: every container and network the
//     provider creates carries providers.LabelCluster (and a container
//     LabelGroup, LabelMachine, LabelImageKind, LabelImage for a catalog
//     image, the zone and the machine type). A restarted provider rebuilds
//     its state from List alone; nothing else is ever modified or removed.
//   - A container boots like a VM (boot.go): systemd as PID 1, cloud-init's
//     NoCloud seed (the request's user-data, never logged) written into it
//     before it starts.
//   - A warm-pool standby (standby.go) carries its marker on a record, an
//     empty volume <container>-standby labelled providers.LabelStandby, made
//     before its container and removed by Resume before the container gets
//     its join user-data; parked means stopped, resumed means a new NoCloud
//     seed (new instance-id) and a start.
//   - A zone is a bridge network, made on first use; Cleanup removes the
//     empty ones.
//   - Catalog images are tags of one repository; their changing labels live
//     in label records (images.go), since an image's own can't change.
package docker
