//go:build system

package bootstrap_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The Debian root filesystem the system tests install into: debootstrap's minbase plus what
// a Debian cloud image also has and the script uses (curl, ca-certificates). It is made once
// per machine and recipe, cached as a tarball outside the repository, and each test extracts
// a fresh copy.
const (
	rootfsSuite   = "bookworm"
	rootfsVariant = "minbase"
	rootfsInclude = "curl,ca-certificates"
	// rootfsRecipe changes when prepareRootfs changes what it puts into the tarball.
	rootfsRecipe = "prebake-rootfs-v1"
	// rootfsMaxAge bounds how stale the cached package lists get: the pinned versions the
	// tests ask for come from them and the mirror drops superseded ones.
	rootfsMaxAge = 7 * 24 * time.Hour
)

func debianMirror() string {
	if m := os.Getenv("PREBAKE_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// requireRoot checks what every chroot test needs: root, debootstrap, chroot, unshare, tar.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missingPrereq(t, "not root (debootstrap, chroot and mounts need root)")
	}
	for _, c := range []struct{ cmd, pkg string }{
		{"debootstrap", "debootstrap"}, {"chroot", "coreutils"}, {"unshare", "util-linux"},
		{"tar", "tar"}, {"flock", "util-linux"},
	} {
		if _, err := exec.LookPath(c.cmd); err != nil {
			missingPrereq(t, c.cmd+" not found (apt-get install "+c.pkg+")")
		}
	}
}

func missingPrereq(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("system test prerequisite missing under CI=true: %s", what)
	}
	t.Skipf("skipping system test: %s", what)
}

// cachedRootfs returns the cached tarball, making it first when it is missing or stale. A
// flock on a file beside it makes parallel tests and parallel `go test` runs wait for one
// debootstrap instead of racing.
func cachedRootfs(t testing.TB) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("find a cache directory (set XDG_CACHE_HOME or HOME): %v", err)
	}
	dir := filepath.Join(base, "prebake", "rootfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := sha256.Sum256([]byte(strings.Join([]string{rootfsRecipe, rootfsSuite, rootfsVariant, rootfsInclude, debianMirror()}, "\n")))
	tarball := filepath.Join(dir, fmt.Sprintf("%s-%s-%s.tar", rootfsSuite, rootfsVariant, hex.EncodeToString(key[:6])))

	lock, err := os.OpenFile(tarball+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	if st, err := os.Stat(tarball); err == nil && time.Since(st.ModTime()) < rootfsMaxAge {
		return tarball
	}
	began := time.Now()
	t.Logf("debootstrap %s %s from %s into the cache (once per machine; minutes)", rootfsVariant, rootfsSuite, debianMirror())
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	run(t, "debootstrap", "--variant="+rootfsVariant, "--include="+rootfsInclude, rootfsSuite, root, debianMirror())
	// Services must not start inside a chroot (they would run on the host): the standard
	// policy-rc.d answer "action forbidden".
	writeFile(t, filepath.Join(root, "usr/sbin/policy-rc.d"), "#!/bin/sh\nexit 101\n", 0o755)
	// Package lists in the cache, so tests can resolve versions and the script's install
	// phase does not need an update as long as the mirror still has them.
	chroot(t, root, "apt-get", "-q", "update")
	chroot(t, root, "apt-get", "clean")
	run(t, "tar", "-C", root, "-cf", tarball+".tmp", ".")
	if err := os.Rename(tarball+".tmp", tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("rootfs cached in %s after %s", tarball, time.Since(began).Round(time.Second))
	return tarball
}

// freshRootfs extracts a private copy of the cached root filesystem.
func freshRootfs(t testing.TB) string {
	t.Helper()
	requireRoot(t)
	tarball := cachedRootfs(t)
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-C", root, "-xf", tarball)
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err == nil {
		writeFile(t, filepath.Join(root, "etc/resolv.conf"), string(resolv), 0o644)
	}
	return root
}

// chrootCmd runs argv inside root in a private mount namespace with /proc and /dev mounted:
// the mounts vanish with the namespace, so nothing is left mounted on the host even when the
// test is killed.
func chrootCmd(root string, env []string, argv ...string) *exec.Cmd {
	script := `set -e
mount -t proc proc "$1/proc"
mount --rbind /dev "$1/dev"
mount -t tmpfs tmpfs "$1/run"
root=$1; shift
exec chroot "$root" "$@"`
	args := append([]string{"--mount", "--propagation", "private", "--fork", "sh", "-c", script, "sh", root}, argv...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C"}, env...)
	return cmd
}

func chroot(t testing.TB, root string, argv ...string) string {
	t.Helper()
	out, err := chrootCmd(root, nil, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out))
	}
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
