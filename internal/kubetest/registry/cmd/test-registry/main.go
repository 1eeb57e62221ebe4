// Command test-registry builds the test environment's registry server and pod images
// outside of tests, serves them, and writes the tarball nodes import:
//
//	go run ./internal/kubetest/registry/cmd/test-registry build                  # build or reuse the server, pause, busybox
//	go run ./internal/kubetest/registry/cmd/test-registry up [-addr A] [-dir D] [-large-size N] [-archive F]
//
// `up` starts the registry on -addr (plain HTTP), pushes the pause and workload images (and a
// large image of -large-size bytes when it is > 0), prints each reference, digest and size and
// the containerd config a node needs, writes -archive when given, and runs in the foreground
// until SIGINT or SIGTERM, so no registry outlives it. The storage in -dir is kept.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prebake-dev/prebake/internal/kubetest/registry"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "test-registry:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: test-registry build | up [-addr host:port] [-dir D] [-large-size bytes] [-large-layers n] [-archive file]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:5000", "host:port to listen on (plain HTTP); for node containers, the gateway of their Docker network")
	dir := fs.String("dir", filepath.Join(os.TempDir(), "prebake-test-registry"), "registry storage and log directory (kept)")
	largeSize := fs.Int64("large-size", 0, "size in bytes of the large image's data (0: no large image), for example 524288000")
	largeLayers := fs.Int("large-layers", 4, "layers the large image's data is split into")
	archive := fs.String("archive", "", "also write the images as an OCI tarball for `ctr -n k8s.io images import`")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := registry.BuildOptions{Out: os.Stderr}

	switch args[0] {
	case "build":
		bin, err := registry.BuildServer(ctx, opts)
		if err != nil {
			return err
		}
		if _, err := registry.BuildImages(ctx, opts, registry.LargeOptions{}); err != nil {
			return err
		}
		fmt.Println(bin)
		return nil
	case "up":
		bin, err := registry.BuildServer(ctx, opts)
		if err != nil {
			return err
		}
		began := time.Now()
		set, err := registry.BuildImages(ctx, opts, registry.LargeOptions{Size: *largeSize, Layers: *largeLayers})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "images assembled in %s\n", time.Since(began).Round(time.Millisecond))
		srv, err := registry.Start(ctx, registry.Options{Binary: bin, Addr: *addr,
			StorageDir: filepath.Join(*dir, "storage"), LogFile: filepath.Join(*dir, "registry.log")})
		if err != nil {
			return err
		}
		defer srv.Stop()
		fmt.Fprintf(os.Stderr, "registry %s serving %s (log %s)\n", registry.DistributionVersion, srv.URL(), srv.LogFile())
		for _, img := range set.All() {
			began := time.Now()
			p, err := registry.Push(ctx, srv.Host(), img)
			if err != nil {
				return err
			}
			size, err := registry.CompressedSize(img)
			if err != nil {
				return err
			}
			fmt.Printf("%s\n  %s\n  %d bytes to pull, pushed in %s\n", p.Ref, p.ByDigest, size, time.Since(began).Round(time.Millisecond))
		}
		if *archive != "" {
			began := time.Now()
			if err := writeArchive(*archive, srv.Host(), set.All()); err != nil {
				return err
			}
			st, err := os.Stat(*archive)
			if err != nil {
				return err
			}
			fmt.Printf("archive %s: %d bytes, written in %s\n", *archive, st.Size(), time.Since(began).Round(time.Millisecond))
		}
		pause, err := registry.Reference(srv.Host(), set.Pause)
		if err != nil {
			return err
		}
		hosts, err := registry.HostsTOML("", srv.Host())
		if err != nil {
			return err
		}
		cri, err := registry.ContainerdCRIConfig(pause.Ref, "")
		if err != nil {
			return err
		}
		fmt.Printf("\n# %s\n%s\n# config.toml lines\n%s", hosts.Path, hosts.Content, cri)
		fmt.Fprintln(os.Stderr, "registry running; press Ctrl-C to stop it")
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "stopping")
		return srv.Stop()
	default:
		return fmt.Errorf("unknown command %q: use build or up", args[0])
	}
}

func writeArchive(path, host string, imgs []registry.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := registry.WriteArchive(f, host, imgs...); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
