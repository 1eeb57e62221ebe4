// Package realnode is the real-node scenario (build tag e2e): a Docker container booted
// from the docker provider's base image like a VM (systemd, then cloud-init's NoCloud data
// source running the #cloud-config that bootstrap renders for every cloud) installs what it
// lacks, joins the hermetic control plane with kubeadm, registers a Node with its providerID,
// goes Ready and runs a pod. Nothing on the node is skipped or simulated, and the phases it
// reports are measured (docs/docker.md).
//
// Needs root, a Docker engine, debootstrap (once, for the base image) and the go command;
// without one the tests skip with one line, and fail under CI=true. Everything a run makes
// in the engine carries prebake.dev/cluster=<run> and is removed when the test ends, also on
// failure.
package realnode
