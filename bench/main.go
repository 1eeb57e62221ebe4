// Command bench measures the externalgrpc server over a core holding a
// realistic fleet (100 groups, 5,000 running instances on the in-memory
// fake cloud), both in-process and over loopback gRPC, and prints a
// markdown table with the latency targets the protocol needs (CA issues
// thousands of reads per loop; IncreaseSize must return long before
// grpc_timeout however slow the cloud is).
//
//	go run ./bench [-n 20000] [-parallel 1]
//
// Progress goes to stderr, the table to stdout. The exit status is 1 when a
// target is missed (-strict=false to only report).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
)

// The targets. Reads are answered from memory, so in-process they must stay
// far below a loopback round trip; IncreaseSize only records and queues.
const (
	readP99Target     = 200 * time.Microsecond
	increaseP99Target = 5 * time.Millisecond
)

type config struct {
	groups, perGroup int
	n, warmup        int
	syncN, increaseN int
	parallel         int
	createDelay      time.Duration
	rpcTimeout       time.Duration
	strict           bool
}

func main() {
	var c config
	flag.IntVar(&c.groups, "groups", 100, "node groups in the fleet")
	flag.IntVar(&c.perGroup, "per-group", 50, "running instances per group")
	flag.IntVar(&c.n, "n", 20000, "measured calls per read operation and path")
	flag.IntVar(&c.warmup, "warmup", 500, "unmeasured calls before each read measurement")
	flag.IntVar(&c.syncN, "sync-n", 100, "measured forced Syncs")
	flag.IntVar(&c.increaseN, "increase-n", 300, "measured IncreaseSize(+1) calls per path")
	flag.IntVar(&c.parallel, "parallel", 1, "goroutines issuing calls concurrently (latency is per call)")
	flag.DurationVar(&c.createDelay, "create-delay", 2*time.Second, "how long the fake cloud's Create takes during the IncreaseSize measurement")
	flag.DurationVar(&c.rpcTimeout, "rpc-timeout", 5*time.Second, "deadline of each gRPC call (CA's grpc_timeout)")
	flag.BoolVar(&c.strict, "strict", true, "exit 1 when a target is missed")
	flag.Parse()
	if c.groups < 1 || c.perGroup < 1 || c.n < 1 || c.syncN < 1 || c.increaseN < 1 || c.warmup < 0 {
		fmt.Fprintln(os.Stderr, "bench: -groups, -per-group, -n, -sync-n and -increase-n must be at least 1, -warmup at least 0")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ok, err := run(context.Background(), log, c)
	if err != nil {
		log.Error("bench failed", "err", err)
		os.Exit(1)
	}
	if !ok && c.strict {
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, c config) (ok bool, err error) {
	start := time.Now()
	const increaseWarmup = 10
	f, err := newFleet(ctx, log, c.groups, c.perGroup, 2*(c.increaseN+increaseWarmup))
	if err != nil {
		return false, err
	}
	defer f.stop()

	rpc := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, c.rpcTimeout) }
	node := func(i int) *protos.ExternalGrpcNode { return f.nodes[(i*7919)%len(f.nodes)] }
	group := func(i int) string { return f.groups[(i*31)%len(f.groups)] }
	// Each check returns an error when an answer is wrong, so a fast wrong
	// answer can't pass.
	checkGroup := func(i int, g *protos.NodeGroup) error {
		if want := node(i).GetLabels()["prebake.dev/group"]; g.GetId() != want {
			return fmt.Errorf("NodeGroupForNode(%s) = %q, want %q", node(i).GetName(), g.GetId(), want)
		}
		return nil
	}
	checkTarget := func(n int32) error {
		if int(n) != c.perGroup {
			return fmt.Errorf("target %d, want %d", n, c.perGroup)
		}
		return nil
	}
	checkNodes := func(ins []*protos.Instance) error {
		if len(ins) != c.perGroup {
			return fmt.Errorf("%d instances, want %d", len(ins), c.perGroup)
		}
		return nil
	}
	unimplemented := func(err error) error {
		if status.Code(err) != codes.Unimplemented {
			return fmt.Errorf("GetOptions: %v, want Unimplemented", err)
		}
		return nil
	}
	options := func(i int) *protos.NodeGroupAutoscalingOptionsRequest {
		return &protos.NodeGroupAutoscalingOptionsRequest{Id: group(i), Defaults: &protos.NodeGroupAutoscalingOptions{ScaleDownUtilizationThreshold: 0.5}}
	}

	type read struct {
		name      string
		inProcess func(i int) error
		overGRPC  func(i int) error
	}
	reads := []read{
		{"NodeGroupForNode", func(i int) error {
			resp, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: node(i)})
			return errors.Join(err, checkGroup(i, resp.GetNodeGroup()))
		}, func(i int) error {
			ctx, cancel := rpc()
			defer cancel()
			resp, err := f.client.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: node(i)})
			return errors.Join(err, checkGroup(i, resp.GetNodeGroup()))
		}},
		{"NodeGroupTargetSize", func(i int) error {
			resp, err := f.server.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: group(i)})
			return errors.Join(err, checkTarget(resp.GetTargetSize()))
		}, func(i int) error {
			ctx, cancel := rpc()
			defer cancel()
			resp, err := f.client.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: group(i)})
			return errors.Join(err, checkTarget(resp.GetTargetSize()))
		}},
		{fmt.Sprintf("NodeGroupNodes (%d instances)", c.perGroup), func(i int) error {
			resp, err := f.server.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: group(i)})
			return errors.Join(err, checkNodes(resp.GetInstances()))
		}, func(i int) error {
			ctx, cancel := rpc()
			defer cancel()
			resp, err := f.client.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: group(i)})
			return errors.Join(err, checkNodes(resp.GetInstances()))
		}},
		{"NodeGroupGetOptions (Unimplemented)", func(i int) error {
			_, err := f.server.NodeGroupGetOptions(ctx, options(i))
			return unimplemented(err)
		}, func(i int) error {
			ctx, cancel := rpc()
			defer cancel()
			_, err := f.client.NodeGroupGetOptions(ctx, options(i))
			return unimplemented(err)
		}},
		{"Refresh (snapshot fresh)", func(int) error {
			_, err := f.server.Refresh(ctx, &protos.RefreshRequest{})
			return err
		}, func(int) error {
			ctx, cancel := rpc()
			defer cancel()
			_, err := f.client.Refresh(ctx, &protos.RefreshRequest{})
			return err
		}},
	}

	var samples []sample
	for _, r := range reads {
		lists := f.cloud.Calls("List")
		log.Info("measuring", "op", r.name, "path", "in-process", "n", c.n)
		s := measure(r.name, "in-process", c.n, c.warmup, c.parallel, readP99Target, r.inProcess)
		samples = append(samples, s)
		log.Info("measuring", "op", r.name, "path", "loopback gRPC", "n", c.n)
		samples = append(samples, measure(r.name, "loopback gRPC", c.n, c.warmup, c.parallel, 0, r.overGRPC))
		if d := f.cloud.Calls("List") - lists; d != 0 {
			// Reads and a fresh Refresh must never reach the cloud.
			samples[len(samples)-1].errs += d
			log.Error("reads listed the cloud", "op", r.name, "lists", d)
		}
	}

	log.Info("measuring", "op", "Sync (forced)", "instances", c.groups*c.perGroup, "n", c.syncN)
	lists := f.cloud.Calls("List")
	s := measure(fmt.Sprintf("Sync, forced (%d instances)", c.groups*c.perGroup), "in-process", c.syncN, 2, 1, 0, func(int) error {
		f.core.Sync(ctx, true)
		return nil
	})
	if d := f.cloud.Calls("List") - lists; d != c.syncN+2 {
		s.errs++
		log.Error("forced Sync did not list every time", "lists", d, "syncs", c.syncN+2)
	}
	samples = append(samples, s)

	// IncreaseSize while every Create takes createDelay: CA's call must not
	// wait for the cloud.
	f.cloud.SetCreateDelay(c.createDelay)
	creates := f.cloud.Calls("Create")
	increaseName := fmt.Sprintf("IncreaseSize(+1), Create takes %v", c.createDelay)
	log.Info("measuring", "op", increaseName, "path", "in-process", "n", c.increaseN)
	samples = append(samples, measure(increaseName, "in-process", c.increaseN, increaseWarmup, 1, increaseP99Target, func(int) error {
		_, err := f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: burstGroup, Delta: 1})
		return err
	}))
	log.Info("measuring", "op", increaseName, "path", "loopback gRPC", "n", c.increaseN)
	samples = append(samples, measure(increaseName, "loopback gRPC", c.increaseN, increaseWarmup, 1, increaseP99Target, func(int) error {
		ctx, cancel := rpc()
		defer cancel()
		_, err := f.client.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: burstGroup, Delta: 1})
		return err
	}))
	target, err := f.core.TargetSize(burstGroup)
	if err != nil {
		return false, err
	}
	if want := 2 * (c.increaseN + increaseWarmup); target != want {
		samples[len(samples)-1].errs++
		log.Error("IncreaseSize did not raise the target at once", "target", target, "want", want)
	}
	log.Info("IncreaseSize measured", "burstTarget", target, "createsStarted", f.cloud.Calls("Create")-creates,
		"machinesCreated", len(f.cloud.Machines())-c.groups*c.perGroup)

	fmt.Printf("### prebake externalgrpc bench\n\n")
	fmt.Printf("Fleet: %d groups × %d = %d running instances on the fake cloud. %s, GOMAXPROCS=%d, %d goroutine(s) per measurement, gRPC over loopback TCP without TLS, with the RPC metrics interceptor.\n\n",
		c.groups, c.perGroup, c.groups*c.perGroup, runtime.Version(), runtime.GOMAXPROCS(0), c.parallel)
	writeTable(os.Stdout, samples)
	ok = true
	for _, s := range samples {
		ok = ok && s.pass()
	}
	verdict := "all targets met"
	if !ok {
		verdict = "TARGETS MISSED"
	}
	fmt.Printf("\n%s; total %v.\n", verdict, time.Since(start).Round(100*time.Millisecond))
	log.Info("done", "took", time.Since(start).Round(time.Millisecond), "ok", ok)
	return ok, nil
}
