package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/externalgrpc"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// burstGroup is the group IncreaseSize is measured on; the fleet's groups
// are full.
const burstGroup = "burst"

// fleet is a core over the fake cloud holding a running fleet, served on
// loopback gRPC the way prebake serve does (with the RPC metrics
// interceptor, without TLS).
type fleet struct {
	cloud  *fake.Provider
	core   *autoscaling.Core
	server *externalgrpc.Server
	client protos.CloudProviderClient
	groups []string
	// nodes are the fleet's Nodes as CA would send them.
	nodes []*protos.ExternalGrpcNode

	stop func()
}

// newFleet builds groups × perGroup running instances through IncreaseSize,
// waits until the fake cloud has them all, marks them running and syncs.
// burstMax is the size of the extra, empty group used by IncreaseSize.
func newFleet(ctx context.Context, log *slog.Logger, groups, perGroup, burstMax int) (*fleet, error) {
	cloud := fake.New()
	specs := make([]autoscaling.GroupSpec, 0, groups+1)
	ids := make([]string, 0, groups)
	for i := range groups {
		id := fmt.Sprintf("pool-%03d", i)
		ids = append(ids, id)
		specs = append(specs, autoscaling.GroupSpec{ID: id, Provider: cloud.Name(), MaxSize: perGroup, MachineType: "m1", Zone: "z1"})
	}
	specs = append(specs, autoscaling.GroupSpec{ID: burstGroup, Provider: cloud.Name(), MaxSize: max(burstMax, 1), MachineType: "m1", Zone: "z1"})

	core, err := autoscaling.New(ctx, autoscaling.Options{
		Cluster:   "bench",
		Groups:    specs,
		Providers: map[string]providers.Provider{cloud.Name(): cloud},
		// Refresh must find the snapshot fresh: only forced Syncs list.
		RefreshInterval: time.Hour,
		GPULabel:        "prebake.dev/gpu",
		Workers:         autoscaling.WorkerOptions{Parallelism: 64, QPS: 1e6, Burst: 1e6},
	})
	if err != nil {
		return nil, err
	}
	coreCtx, cancelCore := context.WithCancel(context.Background())
	if err := core.Start(coreCtx); err != nil {
		cancelCore()
		return nil, err
	}
	f := &fleet{cloud: cloud, core: core, server: externalgrpc.NewServer(core), groups: ids}
	stops := []func(){func() {
		// Creations still sleeping in the slow cloud are abandoned, not
		// waited for.
		sctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = core.Shutdown(sctx)
		cancelCore()
	}}
	f.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}

	start := time.Now()
	for _, id := range ids {
		if err := core.IncreaseSize(id, perGroup); err != nil {
			f.stop()
			return nil, err
		}
	}
	want := groups * perGroup
	deadline := time.Now().Add(60 * time.Second)
	for n := len(cloud.Machines()); n < want; n = len(cloud.Machines()) {
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("the fake cloud has %d of %d machines after 60s", n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cloud.RunAll()
	core.Sync(ctx, true)
	log.Info("fleet ready", "groups", groups, "instances", want, "took", time.Since(start).Round(time.Millisecond))

	for _, id := range ids {
		views, err := core.Nodes(id)
		if err != nil {
			f.stop()
			return nil, err
		}
		for _, v := range views {
			if v.State != providers.StateRunning {
				f.stop()
				return nil, fmt.Errorf("instance %s is %v after RunAll and Sync", v.ProviderID, v.State)
			}
			name := strings.TrimPrefix(v.ProviderID, "fake://")
			f.nodes = append(f.nodes, &protos.ExternalGrpcNode{
				ProviderID: v.ProviderID,
				Name:       name,
				Labels: map[string]string{
					providers.LabelCluster: "bench", providers.LabelGroup: id, providers.LabelHostname: name,
					providers.LabelInstanceType: "m1", providers.LabelZone: "z1", providers.LabelArch: "amd64", providers.LabelOS: "linux",
				},
			})
		}
	}
	if len(f.nodes) != want {
		f.stop()
		return nil, fmt.Errorf("the core lists %d instances, want %d", len(f.nodes), want)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.stop()
		return nil, err
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(externalgrpc.NewRPCMetrics(prometheus.NewRegistry()).Unary))
	f.server.Register(gs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	stops = append(stops, func() {
		gs.Stop()
		<-served
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.stop()
		return nil, err
	}
	stops = append(stops, func() { _ = conn.Close() })
	f.client = protos.NewCloudProviderClient(conn)
	log.Info("serving on loopback", "addr", lis.Addr().String())
	return f, nil
}
