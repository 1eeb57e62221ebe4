// Package realnode is the real-node world and its scenarios (build tag e2e): autoscaling
// driven the product's way on real nodes. A real `prebake serve` process with a docker
// provider config, the CA stand-in (e2e/standin) with deploy/base's expander chain, and
// the hermetic control plane made joinable by kubeadm: a Pending pod makes the stand-in call
// IncreaseSize, the docker provider starts a container that boots like a VM (systemd,
// cloud-init's NoCloud data source running the #cloud-config bootstrap renders for every
// cloud), the node script installs what it lacks (nothing on a prebaked image), joins, and
// the pod runs. Nothing on the node is skipped or simulated; every phase in the tables is
// measured, from the node's own reports and the API (docs/docker.md).
//
// World (Start) is what the scenarios and `make demo-docker` share: a Docker network whose
// gateway the control plane, a file server with the node binaries (the stand-in for the
// upstream download, sha256-checked) and the local OCI registry with the pod images listen
// on; the base image; the prebake binary. BuildPrebaked runs `prebake images build`.
//
// Needs root, a Docker engine, debootstrap (once, for the base image) and the go command; a
// missing one is ErrPrerequisite, on which the tests skip with one line, and fail under
// CI=true. Everything a world makes in the engine is named or labelled prn<pid>-<hex>...:
// Close removes it, every scenario removes its cluster's when it ends (also on failure) and
// fails if anything is left, and the next world removes what a killed process left.
package realnode
