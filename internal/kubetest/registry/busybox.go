package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Busybox is Debian's statically linked busybox, the one program of the workload and large
// images.
type Busybox struct {
	// Binary is the content of /bin/busybox from the busybox-static package.
	Binary []byte
	// Copyright is the package's /usr/share/doc/busybox-static/copyright (GPL-2), shipped in
	// the images beside the binary.
	Copyright []byte
	// Version is the Debian package version, for example 1:1.35.0-4+deb12u1+b1.
	Version string
}

const busyboxStamp = "prebake busybox-static v1\n"

// FetchBusybox returns Debian's busybox-static: from <CacheDir>/busybox when an earlier call
// left it there, else it runs `apt-get download busybox-static` (the candidate version of
// this machine's apt sources, amd64) into that directory and extracts the package with
// dpkg-deb. Remove the directory to pick up a newer package version. A missing apt-get or
// dpkg-deb, or an apt that cannot find the package, is ErrUnavailable.
//
// bootstrap's system tests cache a debootstrapped root filesystem under
// ~/.cache/prebake/rootfs, but it is debootstrap's minbase, which has no busybox-static, so
// it is no source here.
func FetchBusybox(ctx context.Context, opts BuildOptions) (Busybox, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Busybox{}, err
	}
	b, err := newBuilder(ctx, opts, filepath.Join(opts.CacheDir, "busybox"))
	if err != nil {
		return Busybox{}, err
	}
	defer b.close()
	if b.stampMatches(busyboxStamp) {
		if bb, err := readBusybox(b.dir); err == nil {
			b.logf("reusing busybox-static %s from %s", bb.Version, b.dir)
			return bb, nil
		}
	}
	for _, c := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(c); err != nil {
			return Busybox{}, fmt.Errorf("%w: %s is not on PATH; the workload image takes busybox from Debian's busybox-static package", ErrUnavailable, c)
		}
	}
	if err := b.openLog(); err != nil {
		return Busybox{}, err
	}
	work := filepath.Join(b.dir, "work")
	if err := os.RemoveAll(work); err != nil {
		return Busybox{}, fmt.Errorf("fetch busybox: %w", err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return Busybox{}, fmt.Errorf("fetch busybox: %w", err)
	}
	defer os.RemoveAll(work)
	b.logf("apt-get download busybox-static into %s", work)
	if out, err := b.run(ctx, work, "apt-get", "download", "busybox-static"); err != nil {
		return Busybox{}, fmt.Errorf("%w: apt-get download busybox-static: %v\n%s\n(run `apt-get update` if apt cannot locate the package)", ErrUnavailable, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(work, "busybox-static_*.deb"))
	if len(debs) != 1 {
		return Busybox{}, fmt.Errorf("fetch busybox: apt-get download left %d busybox-static .deb files in %s, want 1", len(debs), work)
	}
	version, err := b.run(ctx, work, "dpkg-deb", "--field", debs[0], "Version")
	if err != nil {
		return Busybox{}, fmt.Errorf("fetch busybox: dpkg-deb --field %s Version: %v\n%s", debs[0], err, version)
	}
	root := filepath.Join(work, "root")
	if out, err := b.run(ctx, work, "dpkg-deb", "-x", debs[0], root); err != nil {
		return Busybox{}, fmt.Errorf("fetch busybox: dpkg-deb -x %s: %v\n%s", debs[0], err, out)
	}
	files := map[string]string{
		"bin/busybox":                            "busybox",
		"usr/share/doc/busybox-static/copyright": "copyright",
	}
	for src, dst := range files {
		data, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return Busybox{}, fmt.Errorf("fetch busybox: the busybox-static package has no /%s: %w", src, err)
		}
		if err := writeFileAtomic(filepath.Join(b.dir, dst), data, 0o644); err != nil {
			return Busybox{}, fmt.Errorf("fetch busybox: %w", err)
		}
	}
	if err := writeFileAtomic(filepath.Join(b.dir, "version"), []byte(strings.TrimSpace(version)+"\n"), 0o644); err != nil {
		return Busybox{}, fmt.Errorf("fetch busybox: %w", err)
	}
	if err := os.Rename(debs[0], filepath.Join(b.dir, filepath.Base(debs[0]))); err != nil {
		return Busybox{}, fmt.Errorf("fetch busybox: keep the .deb: %w", err)
	}
	if err := b.writeStamp(busyboxStamp); err != nil {
		return Busybox{}, err
	}
	bb, err := readBusybox(b.dir)
	if err == nil {
		b.logf("busybox-static %s cached in %s", bb.Version, b.dir)
	}
	return bb, err
}

func readBusybox(dir string) (Busybox, error) {
	bin, err := os.ReadFile(filepath.Join(dir, "busybox"))
	if err != nil {
		return Busybox{}, err
	}
	cp, err := os.ReadFile(filepath.Join(dir, "copyright"))
	if err != nil {
		return Busybox{}, err
	}
	v, err := os.ReadFile(filepath.Join(dir, "version"))
	if err != nil {
		return Busybox{}, err
	}
	version := strings.TrimSpace(string(v))
	if len(bin) == 0 || version == "" {
		return Busybox{}, errors.New("empty busybox cache")
	}
	return Busybox{Binary: bin, Copyright: cp, Version: version}, nil
}

// run runs a command in dir with its output in build.log and returned.
func (b *builder) run(ctx context.Context, dir, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if b.log != nil {
		fmt.Fprintf(b.log, "\n$ cd %s && %s %s\n%s", dir, name, strings.Join(args, " "), out.String())
	}
	return out.String(), err
}
