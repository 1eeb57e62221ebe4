package baseimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrPrerequisite is wrapped by the error of an Ensure that must make the root filesystem
// and cannot: not root, or a command (debootstrap, tar, chroot, unshare) is missing.
var ErrPrerequisite = errors.New("prerequisite missing")

// CheckPrerequisites reports what making the root filesystem needs and this machine lacks.
func CheckPrerequisites() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (debootstrap and chroot need root)", ErrPrerequisite)
	}
	for _, c := range []struct{ cmd, pkg string }{
		{"debootstrap", "debootstrap"}, {"tar", "tar"}, {"chroot", "coreutils"}, {"unshare", "util-linux"},
	} {
		if _, err := exec.LookPath(c.cmd); err != nil {
			return fmt.Errorf("%w: %s not found (apt-get install %s)", ErrPrerequisite, c.cmd, c.pkg)
		}
	}
	return nil
}

// buildTarball debootstraps the root filesystem in a work directory beside tarball, makes it
// boot as a container (below), and writes it as tarball; a failure leaves no tarball.
func buildTarball(ctx context.Context, tarball string, opts Options, logf func(string, ...any)) error {
	if err := CheckPrerequisites(); err != nil {
		return fmt.Errorf("docker base image: %w", err)
	}
	began := time.Now()
	logPath := filepath.Join(opts.CacheDir, "debootstrap.log")
	log, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("docker base image: %w", err)
	}
	defer log.Close()
	work, err := os.MkdirTemp(opts.CacheDir, "build-")
	if err != nil {
		return fmt.Errorf("docker base image: %w", err)
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	fail := func(step string, err error) error {
		return fmt.Errorf("docker base image: %s: %w (full output in %s)", step, err, logPath)
	}

	logf("debootstrap %s %s from %s (once per machine and week; minutes; details in %s)", variant, Suite, opts.Mirror, logPath)
	if err := run(ctx, log, logf, began, "debootstrap", "--variant="+variant,
		"--include="+strings.Join(debootstrapPackages, ","), Suite, root, opts.Mirror); err != nil {
		return fail("debootstrap", err)
	}
	// Package scripts must not start services in the chroot (they would run on this host):
	// the standard policy-rc.d "action forbidden", removed again before the image is made.
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return fail("write policy-rc.d", err)
	}
	if resolv, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), resolv, 0o644); err != nil {
			return fail("write resolv.conf", err)
		}
	}
	logf("[%4.0fs] apt-get install %s", time.Since(began).Seconds(), strings.Join(aptPackages, " "))
	script := "set -e; apt-get -q update; DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends " +
		strings.Join(aptPackages, " ") + "; apt-get clean"
	if err := run(ctx, log, logf, began, "unshare", chrootArgs(root, "sh", "-c", script)...); err != nil {
		return fail("apt-get install in the root filesystem", err)
	}
	if err := customise(root); err != nil {
		return fail("prepare the root filesystem", err)
	}
	logf("[%4.0fs] writing %s", time.Since(began).Seconds(), tarball)
	if err := run(ctx, log, logf, began, "tar", "--numeric-owner", "--xattrs", "-C", root, "-cf", tarball+".tmp", "."); err != nil {
		os.Remove(tarball + ".tmp")
		return fail("tar", err)
	}
	if err := os.Rename(tarball+".tmp", tarball); err != nil {
		return fail("rename tarball", err)
	}
	logf("[%4.0fs] root filesystem cached in %s", time.Since(began).Seconds(), tarball)
	return nil
}

// chrootArgs run argv chrooted into root inside a private mount namespace with /proc and
// /dev mounted: the mounts vanish with the namespace, also when we are killed.
func chrootArgs(root string, argv ...string) []string {
	script := `set -e
mount -t proc proc "$1/proc"
mount --rbind /dev "$1/dev"
root=$1; shift
exec chroot "$root" "$@"`
	return append([]string{"--mount", "--propagation", "private", "--fork", "sh", "-c", script, "sh", root}, argv...)
}

// customise makes a debootstrapped tree boot as a VM-like container:
//   - an empty /etc/machine-id, so each container's systemd makes its own (debootstrap's
//     systemd postinst wrote one, which every node would share);
//   - no resolv.conf, hostname or hosts of this machine (Docker provides them);
//   - the NoCloud-only cloud-init configuration and the init script;
//   - no policy-rc.d: in the booted node, packages start their services.
func customise(root string) error {
	write := func(rel, content string, mode os.FileMode) error {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			return err
		}
		return os.Chmod(p, mode)
	}
	if err := write("etc/machine-id", "", 0o444); err != nil {
		return err
	}
	for _, rel := range []string{"var/lib/dbus/machine-id", "etc/resolv.conf", "usr/sbin/policy-rc.d"} {
		if err := os.Remove(filepath.Join(root, rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := write(strings.TrimPrefix(CloudConfigPath, "/"), cloudConfig, 0o644); err != nil {
		return err
	}
	return write(strings.TrimPrefix(InitPath, "/"), containerInit, 0o755)
}

func run(ctx context.Context, log io.Writer, logf func(string, ...any), began time.Time, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		progress(pr, log, logf, began)
		close(done)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
