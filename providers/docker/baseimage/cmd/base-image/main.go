// Command base-image makes the docker provider's vanilla base root filesystem (debootstrap:
// Debian with systemd and cloud-init, nothing of Kubernetes) into its cache, without touching
// the Docker engine, so a CI step can fill the cache before the tests that import it:
//
//	go run ./providers/docker/baseimage/cmd/base-image tarball   # build or reuse; prints its path
//
// It needs root and debootstrap, and a Debian mirror on the first run; later runs reuse the
// tarball for a week (baseimage.DefaultMaxAge).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != "tarball" {
		fmt.Fprintln(os.Stderr, "usage: base-image tarball")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, built, err := baseimage.EnsureTarball(ctx, baseimage.Options{Out: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "base-image:", err)
		os.Exit(1)
	}
	if built {
		fmt.Fprintln(os.Stderr, "base-image: made", path)
	}
	fmt.Println(path)
}
