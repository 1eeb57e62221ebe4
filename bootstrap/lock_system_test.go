//go:build system

package bootstrap_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
)

// holdDpkgLock holds the rootfs's dpkg frontend lock with flock(1) until release is called.
func holdDpkgLock(t *testing.T, root string) (release func()) {
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

// waitingOnLock reports whether some process is the script's bounded flock wait.
func waitingOnLock() bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.HasPrefix(string(b), "flock\x00-w\x00") && strings.Contains(string(b), "/var/lib/dpkg/lock-frontend\x00true") {
			return true
		}
	}
	return false
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

// TestDpkgLockBound holds the dpkg lock while the script wants to install: held past the
// bound it fails with an error naming the lock and the bound; released within the bound the
// script waits and installs.
func TestDpkgLockBound(t *testing.T) {
	root := freshRootfs(t)
	v := candidateVersions(t, root, []string{"socat"})
	comps := []bootstrap.Component{{Name: "socat", Version: v["socat"]}}

	t.Run("held past the bound", func(t *testing.T) {
		release := holdDpkgLock(t, root)
		defer release()
		in := nodeInput("node-a", comps)
		in.Options.DpkgLockWait = 2 * time.Second
		st, out, err := runScript(t, root, in)
		if err == nil {
			t.Fatalf("script succeeded with the dpkg lock held:\n%s", tail(out))
		}
		want := "install: the dpkg lock /var/lib/dpkg/lock-frontend was still held after 2s (the dpkgLockWait bound)"
		if !strings.HasPrefix(st.Error, want) || st.Result != "failed" {
			t.Errorf("status error = %q (result %s), want it to start with %q", st.Error, st.Result, want)
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("stderr lacks %q:\n%s", want, tail(out))
		}
		if got := chrootCmd(root, nil, "dpkg-query", "-W", "socat"); got.Run() == nil {
			t.Errorf("socat got installed although the lock was held")
		}
	})

	t.Run("released within the bound", func(t *testing.T) {
		release := holdDpkgLock(t, root)
		in := nodeInput("node-a", comps)
		in.Options.DpkgLockWait = 5 * time.Minute
		writeScript(t, root, in)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() {
			defer close(done)
			out, err = chrootCmd(root, nil, "sh", bootstrap.ScriptPath).CombinedOutput()
		}()
		waitFor(t, "the script to wait on the dpkg lock", waitingOnLock)
		release()
		<-done
		st := readStatus(t, root, out, err)
		if err != nil {
			t.Fatalf("script failed after the lock was released: %v\n%s", err, tail(out))
		}
		ph, _ := st.Phase("install")
		if ph.Result != "ok" || !strings.Contains(ph.Detail, "dpkg lock waited") {
			t.Errorf("install phase = %+v, want ok with the lock wait", ph)
		}
		if got := chroot(t, root, "dpkg-query", "-W", "-f=${Version}", "socat"); got != v["socat"] {
			t.Errorf("socat installed at %q, want %q", got, v["socat"])
		}
	})
}
