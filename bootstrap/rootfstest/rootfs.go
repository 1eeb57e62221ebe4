package rootfstest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prebake-dev/prebake/internal/tb"
)

// The Debian root filesystem the system tests install into: debootstrap's minbase plus what
// a Debian cloud image also has and the script uses (curl, ca-certificates). It is made once
// per machine and recipe, cached as a tarball outside the repository, and each test extracts
// a fresh copy.
const (
	Suite   = "bookworm"
	variant = "minbase"
	include = "curl,ca-certificates"
	// recipe changes when Cached changes what it puts into the tarball.
	recipe = "prebake-rootfs-v1"
	// maxAge bounds how stale the cached package lists get: the pinned versions the tests
	// ask for come from them and the mirror drops superseded ones.
	maxAge = 7 * 24 * time.Hour
)

// Mirror is the Debian mirror debootstrap and apt use: $PREBAKE_DEBIAN_MIRROR, or
// deb.debian.org.
func Mirror() string {
	if m := os.Getenv("PREBAKE_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// RequireRoot checks what every chroot test needs: root, debootstrap, chroot, unshare, tar,
// flock.
func RequireRoot(t tb.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		MissingPrereq(t, "not root (debootstrap, chroot and mounts need root)")
	}
	for _, c := range []struct{ cmd, pkg string }{
		{"debootstrap", "debootstrap"}, {"chroot", "coreutils"}, {"unshare", "util-linux"},
		{"tar", "tar"}, {"flock", "util-linux"},
	} {
		if _, err := exec.LookPath(c.cmd); err != nil {
			MissingPrereq(t, c.cmd+" not found (apt-get install "+c.pkg+")")
		}
	}
}

// MissingPrereq skips the test with one line saying what is missing, or fails it under
// CI=true, where a skipped system test would hide a broken runner.
func MissingPrereq(t tb.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("system test prerequisite missing under CI=true: %s", what)
	}
	t.Skipf("skipping system test: %s", what)
}

// Cached returns the cached tarball, making it first when it is missing or stale. A flock
// on a file beside it makes parallel tests and parallel `go test` runs wait for one
// debootstrap instead of racing.
func Cached(t tb.TB) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("find a cache directory (set XDG_CACHE_HOME or HOME): %v", err)
	}
	dir := filepath.Join(base, "prebake", "rootfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := sha256.Sum256([]byte(strings.Join([]string{recipe, Suite, variant, include, Mirror()}, "\n")))
	tarball := filepath.Join(dir, fmt.Sprintf("%s-%s-%s.tar", Suite, variant, hex.EncodeToString(key[:6])))

	lock, err := os.OpenFile(tarball+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	if st, err := os.Stat(tarball); err == nil && time.Since(st.ModTime()) < maxAge {
		return tarball
	}
	began := time.Now()
	t.Logf("debootstrap %s %s from %s into the cache (once per machine; minutes)", variant, Suite, Mirror())
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	Run(t, "debootstrap", "--variant="+variant, "--include="+include, Suite, root, Mirror())
	// Services must not start inside a chroot (they would run on the host): the standard
	// policy-rc.d answer "action forbidden".
	WriteFile(t, filepath.Join(root, "usr/sbin/policy-rc.d"), "#!/bin/sh\nexit 101\n", 0o755)
	// Package lists in the cache, so tests can resolve versions and the script's install
	// phase does not need an update as long as the mirror still has them.
	Chroot(t, root, "apt-get", "-q", "update")
	Chroot(t, root, "apt-get", "clean")
	Run(t, "tar", "-C", root, "-cf", tarball+".tmp", ".")
	if err := os.Rename(tarball+".tmp", tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("rootfs cached in %s after %s", tarball, time.Since(began).Round(time.Second))
	return tarball
}

// Fresh checks the prerequisites and extracts a private copy of the cached root filesystem
// into the test's temporary directory, with the host's resolv.conf so apt reaches the mirror.
func Fresh(t tb.TB) string {
	t.Helper()
	RequireRoot(t)
	tarball := Cached(t)
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, "tar", "-C", root, "-xf", tarball)
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err == nil {
		WriteFile(t, filepath.Join(root, "etc/resolv.conf"), string(resolv), 0o644)
	}
	return root
}

// Cmd runs argv inside root in a private mount namespace with /proc, /dev and /run mounted:
// the mounts vanish with the namespace, so nothing is left mounted on the host even when the
// test is killed. env is added to a minimal root environment.
func Cmd(root string, env []string, argv ...string) *exec.Cmd {
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

// Chroot runs argv in root and returns its combined output; a failure fails the test.
func Chroot(t tb.TB, root string, argv ...string) string {
	t.Helper()
	out, err := Cmd(root, nil, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// Run runs a host command; a failure fails the test with the output's tail.
func Run(t tb.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, Tail(out))
	}
}

// Tail is the last 40 lines of b: enough of a script's output to see why it failed.
func Tail(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// WriteFile writes content at path with exactly mode (umask ignored), making parents.
func WriteFile(t tb.TB, path, content string, mode os.FileMode) {
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

// FileSHA256 is the hex sha256 of the file at path.
func FileSHA256(t tb.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CandidateVersions asks apt inside root which version of each package it would install.
func CandidateVersions(t tb.TB, root string, pkgs []string) map[string]string {
	t.Helper()
	out := Chroot(t, root, append([]string{"apt-cache", "show", "--no-all-versions"}, pkgs...)...)
	got := map[string]string{}
	var pkg string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Package: "); ok {
			pkg = v
		}
		if v, ok := strings.CutPrefix(line, "Version: "); ok && pkg != "" {
			got[pkg] = v
		}
	}
	for _, p := range pkgs {
		if got[p] == "" {
			t.Fatalf("apt in the rootfs has no version of %s:\n%s", p, out)
		}
	}
	return got
}
