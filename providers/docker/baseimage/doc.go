// Package baseimage makes the vanilla base image of the docker provider: Debian bookworm
// with systemd and cloud-init and nothing of Kubernetes, the docker analogue of a cloud's
// stock Debian image.
//
// Ensure debootstraps it once (minbase plus systemd, dbus, iproute2, curl, ca-certificates,
// kmod, procps; cloud-init with apt) into a tarball in the user cache directory
// (~/.cache/prebake/docker/base, never the repository), then imports the tarball into the
// engine through the Docker Engine API as prebake-docker-base:bookworm-<inputs hash>. The
// hash covers every input (recipe, suite, packages, mirror, the init script and cloud-init
// configuration), so a changed input is a new tag, and the same inputs are reused: from the
// engine when the image is there, else from the tarball (seconds).
//
// What makes the image boot like a VM in a container (docs/docker.md has the evidence):
//   - its entrypoint, prebake-container-init (container-init.sh), makes the cgroup v1
//     controllers of the container's private cgroup namespace writable, shows the kubelet
//     the host-global kernel settings it insists on (read-only, inside the node only), and
//     execs systemd;
//   - cloud-init reads only NoCloud (user-data and meta-data in SeedDir, written by the
//     provider before the container starts) and leaves the network to Docker;
//   - /etc/machine-id is empty, so every node's systemd makes its own.
//
// Invariants: Ensure never writes into the repository; a tarball is only in the cache once
// complete (written as .tmp, renamed); a flock on <cache>/.lock makes concurrent Ensures
// wait for one debootstrap; services never start on the host while the tree is made
// (policy-rc.d during the build, removed from the image).
package baseimage
