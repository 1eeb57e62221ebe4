//go:build system

package bootstrap_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/bootstrap/rootfstest"
)

// A lockHolder holds the rootfs's dpkg frontend lock until release is called: "flock" with
// flock(1), as the brief's scripts do; "fcntl" with a POSIX record lock from this process,
// the way apt, dpkg and unattended-upgrades hold it.
type lockHolder func(t *testing.T, root string) (release func())

func holdWithFlock(t *testing.T, root string) (release func()) {
	t.Helper()
	cmd := exec.Command("flock", filepath.Join(root, "var/lib/dpkg/lock-frontend"), "cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// flock(1) runs cat only once it holds the lock: wait for the child to exist.
	waitFor(t, "flock to take the dpkg lock", func() bool { return childNamed(cmd.Process.Pid, "cat") })
	released := false
	release = func() {
		if !released {
			released = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(release)
	return release
}

func holdWithFcntl(t *testing.T, root string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, "var/lib/dpkg/lock-frontend"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		f.Close()
		t.Fatalf("fcntl lock: %v", err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			f.Close() // closing drops the process's POSIX locks on the file
		}
	}
	t.Cleanup(release)
	return release
}

// childNamed reports whether pid has a child process running comm.
func childNamed(pid int, comm string) bool {
	data, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "task", itoa(pid), "children"))
	if err != nil {
		return false
	}
	for _, c := range strings.Fields(string(data)) {
		if b, err := os.ReadFile("/proc/" + c + "/comm"); err == nil && strings.TrimSpace(string(b)) == comm {
			return true
		}
	}
	return false
}

// running reports whether some process's command line starts with prefix and contains
// part ("\x00" separates arguments).
func running(prefix, part string) func() bool {
	return func() bool {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && strings.HasPrefix(string(b), prefix) && strings.Contains(string(b), part) {
				return true
			}
		}
		return false
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestDpkgLockBound holds the dpkg lock while the script wants to install, once with each
// kind of lock: held past the bound the script fails with an error naming the lock and the
// bound and installs nothing; released within the bound the script waits and installs.
func TestDpkgLockBound(t *testing.T) {
	root := rootfstest.Fresh(t)
	v := rootfstest.CandidateVersions(t, root, []string{"socat", "ethtool"})
	holders := []struct {
		name string
		hold lockHolder
		pkg  string
		// waiting reports that the script is blocked on the lock (and not done yet).
		waiting func() bool
	}{
		{"flock", holdWithFlock, "socat", running("flock\x00-w\x00", "/var/lib/dpkg/lock-frontend\x00true")},
		// apt polls a held fcntl lock until DPkg::Lock::Timeout: its install can't finish
		// while the lock is held, so seeing it run is seeing it wait.
		{"fcntl", holdWithFcntl, "ethtool", running("apt-get\x00install\x00", "DPkg::Lock::Timeout")},
	}
	for _, h := range holders {
		comps := []bootstrap.Component{{Name: h.pkg, Version: v[h.pkg]}}
		t.Run(h.name+" held past the bound", func(t *testing.T) {
			release := h.hold(t, root)
			defer release()
			in := nodeInput("node-a", comps)
			in.Options.DpkgLockWait = 2 * time.Second
			st, out, err := runScript(t, root, in)
			if err == nil {
				t.Fatalf("script succeeded with the dpkg lock held:\n%s", rootfstest.Tail(out))
			}
			want := "install: the dpkg lock /var/lib/dpkg/lock-frontend was still held after 2s (the dpkgLockWait bound)"
			if !strings.HasPrefix(st.Error, want) || st.Result != "failed" {
				t.Errorf("status error = %q (result %s), want it to start with %q", st.Error, st.Result, want)
			}
			if !strings.Contains(string(out), want) {
				t.Errorf("stderr lacks %q:\n%s", want, rootfstest.Tail(out))
			}
			if rootfstest.Cmd(root, nil, "dpkg-query", "-W", h.pkg).Run() == nil {
				t.Errorf("%s got installed although the lock was held", h.pkg)
			}
		})

		t.Run(h.name+" released within the bound", func(t *testing.T) {
			release := h.hold(t, root)
			in := nodeInput("node-a", comps)
			in.Options.DpkgLockWait = 5 * time.Minute
			writeScript(t, root, in)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() {
				defer close(done)
				out, err = rootfstest.Cmd(root, nil, "sh", bootstrap.ScriptPath).CombinedOutput()
			}()
			waitFor(t, "the script to wait on the dpkg lock", func() bool {
				select {
				case <-done:
					return true // finished early: the checks below say why
				default:
					return h.waiting()
				}
			})
			release()
			<-done
			st := readStatus(t, root, out, err)
			if err != nil {
				t.Fatalf("script failed after the lock was released: %v\n%s", err, rootfstest.Tail(out))
			}
			if ph, _ := st.Phase("install"); ph.Result != "ok" {
				t.Errorf("install phase = %+v, want ok", ph)
			}
			if got := rootfstest.Chroot(t, root, "dpkg-query", "-W", "-f=${Version}", h.pkg); got != v[h.pkg] {
				t.Errorf("%s installed at %q, want %q", h.pkg, got, v[h.pkg])
			}
		})
	}
}
