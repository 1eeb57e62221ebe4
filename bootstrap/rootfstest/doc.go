// Package rootfstest is test support for system tests that run node scripts in a real
// Debian root filesystem: a debootstrapped bookworm (minbase plus curl and ca-certificates)
// made once per machine and cached as a tarball under the user cache directory
// (~/.cache/prebake/rootfs), a fresh private copy per test, a chroot runner, and a loopback
// file server for the binaries the scripts download (kubelet and kubeadm built by
// internal/kubetest, the CNI plugins).
//
// bootstrap's system tests and imagecatalog's sandboxed build test share it, so both
// install into the same filesystem the same way.
//
// Invariants:
//   - A missing prerequisite (not root, no debootstrap, chroot, unshare, tar, flock, go)
//     skips the test with one line, and fails it under CI=true (docs/e2e.md, "Prerequisites").
//   - Chroot commands run in a private mount namespace (unshare --mount): /proc, /dev and
//     /run are mounted only there, so nothing stays mounted on the host, even when the test
//     is killed.
//   - Services never start inside a root (policy-rc.d answers 101), and the cache is built
//     under a flock, so parallel tests and `go test` runs wait for one debootstrap.
//   - The file server listens on 127.0.0.1 only.
//   - Nothing here is imported by non-test code.
package rootfstest
