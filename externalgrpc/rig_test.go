package externalgrpc_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/externalgrpc"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// rpcTimeout is CA's default grpc_timeout (CA's cloud-config default, kubernetes/autoscaler cluster-autoscaler/cloudprovider/externalgrpc/externalgrpc_cloud_provider.go): every call carries it
// as its deadline, as CA's client does.
const rpcTimeout = 5 * time.Second

// gpuLabel is the GPU label the rigs are configured with.
const gpuLabel = "prebake.dev/gpu"

// rig is a real autoscaling.Core over the in-memory fake cloud, served by
// externalgrpc.Server on a loopback TCP port and reached through the
// generated client, as CA reaches it.
type rig struct {
	cloud  *fake.Provider
	core   *autoscaling.Core
	server *externalgrpc.Server
	client protos.CloudProviderClient

	// mu guards served.
	mu sync.Mutex
	// served counts the RPCs the gRPC server handled, by full method name.
	served map[string]int
}

// rigOptions tune a rig; the zero value is what most tests want.
type rigOptions struct {
	groups []autoscaling.GroupSpec
	// refresh is the List TTL; zero means an hour, so only an explicit
	// Sync(force) re-lists and tests stay deterministic.
	refresh time.Duration
	// workers overrides the core's creation workers.
	workers autoscaling.WorkerOptions
	// wrap, when set, decorates the fake before the core sees it (a slow
	// List, say).
	wrap func(*fake.Provider) providers.Provider
}

// defaultGroups: g1 scales from zero and has labels and a taint, g2 has a
// minimum, gpu has a GPU machine type.
func defaultGroups() []autoscaling.GroupSpec {
	return []autoscaling.GroupSpec{
		{ID: "g1", Provider: "fake", MinSize: 0, MaxSize: 5, MachineType: "m1", Zone: "z1", Region: "r1",
			Labels: map[string]string{"team": "a"}, Taints: []providers.Taint{{Key: "dedicated", Value: "a", Effect: "NoSchedule"}}},
		{ID: "g2", Provider: "fake", MinSize: 1, MaxSize: 5, MachineType: "m1", Zone: "z1"},
		{ID: "gpu", Provider: "fake", MinSize: 0, MaxSize: 2, MachineType: "gpu", Zone: "z1"},
	}
}

// newRig starts a core over cloud (configure the cloud first: a List error
// set before newRig is the core's first List), serves it on loopback and
// dials it. Everything stops when the test ends.
func newRig(t testing.TB, cloud *fake.Provider, o rigOptions) *rig {
	t.Helper()
	if o.groups == nil {
		o.groups = defaultGroups()
	}
	if o.refresh == 0 {
		o.refresh = time.Hour
	}
	if o.workers == (autoscaling.WorkerOptions{}) {
		o.workers = autoscaling.WorkerOptions{Parallelism: 4, QPS: 1000, Retries: 2, RetryBase: time.Millisecond}
	}
	// Machine names (and so providerIDs) are <group>-00001, -00002, … in
	// the order IncreaseSize records them.
	var provider providers.Provider = cloud
	if o.wrap != nil {
		provider = o.wrap(cloud)
	}
	var n atomic.Int64
	core, err := autoscaling.New(context.Background(), autoscaling.Options{
		Cluster:         "test",
		Groups:          o.groups,
		Providers:       map[string]providers.Provider{provider.Name(): provider},
		RefreshInterval: o.refresh,
		Reserved:        providers.Reserved{MilliCPU: 100, MemoryBytes: 256 << 20},
		GPULabel:        gpuLabel,
		Workers:         o.workers,
		NameRand:        func() string { return fmt.Sprintf("%05d", n.Add(1)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := core.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = core.Shutdown(sctx)
		cancel()
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{cloud: cloud, core: core, server: externalgrpc.NewServer(core), served: map[string]int{}}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(r.count))
	r.server.Register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r.client = protos.NewCloudProviderClient(conn)
	return r
}

func (r *rig) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r.mu.Lock()
	r.served[info.FullMethod]++
	r.mu.Unlock()
	return handler(ctx, req)
}

// servedMethods returns how often each method was served.
func (r *rig) servedMethods() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.served)
}

// drain waits until every queued and in-flight creation and deletion is
// done, by shutting the core down: reads keep working from memory and
// Sync keeps listing, but IncreaseSize answers Unavailable afterwards.
func (r *rig) drain(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.core.Shutdown(ctx); err != nil {
		t.Fatalf("draining the workers: %v", err)
	}
}

// sync re-lists the cloud now, as a Refresh after the TTL would.
func (r *rig) sync() { r.core.Sync(context.Background(), true) }

// call makes one RPC with CA's deadline (grpc_timeout applies to
// every call).
func call[Req, Resp any](fn func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	return fn(ctx, req)
}

// eventually polls cond until it holds or a deadline passes: the creation
// and deletion workers are asynchronous by design.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
