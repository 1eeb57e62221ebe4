// Command e2e-cluster builds and runs the e2e cluster outside of tests, for `make demo` and
// for poking at a cluster by hand:
//
//	go run ./internal/kubetest/cmd/e2e-cluster build          # build or reuse the binaries
//	go run ./internal/kubetest/cmd/e2e-cluster build-node     # build or reuse kubelet, kubeadm, kubectl and crictl
//	go run ./internal/kubetest/cmd/e2e-cluster up [-dir D]    # start; Ctrl-C stops it
//	    [-system-node=true] [-scheduler-v N] [-scheduler-initial-backoff 1s] [-scheduler-max-backoff 10s]
//	go run ./internal/kubetest/cmd/e2e-cluster reap -dir D    # kill what a killed `up` left
//
// `up` prints the KUBECONFIG to use and runs in the foreground until SIGINT or SIGTERM, so no
// cluster outlives it. PREBAKE_E2E_BACKEND picks the backend as in the tests.
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

	"github.com/prebake-dev/prebake/internal/kubetest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-cluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: e2e-cluster build | build-node | up [-dir D] | reap -dir D")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	defaultDir := filepath.Join(os.TempDir(), "prebake-e2e-cluster")
	dir := fs.String("dir", defaultDir, "work directory: certificates, logs, pid files, kubeconfig")
	systemNode := fs.Bool("system-node", true, "up: add a tainted Node no node group owns ("+kubetest.SystemNodeName+"), as a cluster that runs cluster-autoscaler in it has; without any Node, kube-scheduler retries pending pods only on its backoff (docs/performance.md)")
	schedV := fs.Int("scheduler-v", 0, "up: kube-scheduler's -v (4: every attempt, 5: every queue move); logs in <dir>/logs")
	initBackoff := fs.Duration("scheduler-initial-backoff", 0, "up: kube-scheduler's podInitialBackoffSeconds, whole seconds (0: its default, 1s)")
	maxBackoff := fs.Duration("scheduler-max-backoff", 0, "up: kube-scheduler's podMaxBackoffSeconds, whole seconds (0: its default, 10s)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch args[0] {
	case "build":
		bins, err := kubetest.Build(ctx, kubetest.BuildOptions{Out: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Println(filepath.Dir(bins.KubeAPIServer))
		return nil
	case "build-node":
		bins, err := kubetest.BuildNodeBinaries(ctx, kubetest.BuildOptions{Out: os.Stderr})
		if err != nil {
			return err
		}
		// kubectl and crictl, which node images carry (the docker provider's real nodes).
		if _, err := kubetest.BuildNodeTools(ctx, kubetest.BuildOptions{Out: os.Stderr}); err != nil {
			return err
		}
		fmt.Println(filepath.Dir(bins.Kubelet))
		return nil
	case "reap":
		return kubetest.ReapStale(*dir)
	case "up":
		sched := kubetest.SchedulerOptions{Verbosity: *schedV, PodInitialBackoff: *initBackoff, PodMaxBackoff: *maxBackoff}
		b, err := kubetest.NewBackend(ctx, "", kubetest.Options{Dir: *dir, Out: os.Stderr, Scheduler: sched})
		if err != nil {
			return err
		}
		if err := b.Start(ctx); err != nil {
			return err
		}
		if *systemNode {
			if err := kubetest.AddSystemNode(ctx, b); err != nil {
				_ = b.Stop(context.Background())
				return err
			}
			fmt.Fprintf(os.Stderr, "added Node %s (tainted %s:%s, in no node group)\n", kubetest.SystemNodeName, kubetest.SystemNodeTaint.Key, kubetest.SystemNodeTaint.Effect)
		}
		fmt.Printf("export KUBECONFIG=%s\n", b.Kubeconfig())
		fmt.Fprintln(os.Stderr, "cluster running; press Ctrl-C to stop it")
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "stopping")
		return b.Stop(context.Background())
	default:
		return fmt.Errorf("unknown command %q: use build, build-node, up or reap", args[0])
	}
}
