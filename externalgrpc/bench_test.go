package externalgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prebake-dev/prebake/autoscaling"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// The fleet the benchmarks read: the sizes CA meets in large clusters, 100 groups of 50 running
// instances. `go run ./bench` measures the same reads with percentiles.
const benchGroups, benchPerGroup = 100, 50

// newBenchFleet builds the fleet through IncreaseSize and waits until the
// fake cloud runs every machine and the core has listed them.
func newBenchFleet(b *testing.B) (*rig, []*protos.ExternalGrpcNode, []string) {
	b.Helper()
	var groups []autoscaling.GroupSpec
	var ids []string
	for i := range benchGroups {
		id := fmt.Sprintf("pool-%03d", i)
		ids = append(ids, id)
		groups = append(groups, autoscaling.GroupSpec{ID: id, Provider: "fake", MaxSize: benchPerGroup, MachineType: "m1", Zone: "z1"})
	}
	r := newRig(b, fake.New(), rigOptions{groups: groups,
		workers: autoscaling.WorkerOptions{Parallelism: 64, QPS: 1e6, Burst: 1e6}})
	for _, id := range ids {
		if err := r.core.IncreaseSize(id, benchPerGroup); err != nil {
			b.Fatal(err)
		}
	}
	eventually(b, "the fleet", func() bool { return len(r.cloud.Machines()) == benchGroups*benchPerGroup })
	r.cloud.RunAll()
	r.sync()
	var nodes []*protos.ExternalGrpcNode
	for _, id := range ids {
		views, err := r.core.Nodes(id)
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range views {
			name := strings.TrimPrefix(v.ProviderID, "fake://")
			nodes = append(nodes, &protos.ExternalGrpcNode{ProviderID: v.ProviderID, Name: name,
				Labels: map[string]string{providers.LabelCluster: "test", providers.LabelGroup: id, providers.LabelHostname: name}})
		}
	}
	return r, nodes, ids
}

// BenchmarkReads measures the RPCs CA issues most (every loop) against a
// 5,000-instance fleet, calling the server in-process and over loopback
// gRPC:
//
//	go test -run '^$' -bench Reads ./externalgrpc/
//	go test -run '^$' -bench 'Reads/NodeGroupForNode/in-process' ./externalgrpc/
func BenchmarkReads(b *testing.B) {
	r, nodes, ids := newBenchFleet(b)
	ctx := context.Background()
	node := func(i int) *protos.ExternalGrpcNode { return nodes[(i*7919)%len(nodes)] }
	group := func(i int) string { return ids[(i*31)%len(ids)] }
	options := &protos.NodeGroupAutoscalingOptionsRequest{Id: ids[0], Defaults: &protos.NodeGroupAutoscalingOptions{ScaleDownUtilizationThreshold: 0.5}}

	type path struct {
		name string
		call func(i int) error
	}
	benches := []struct {
		name  string
		paths []path
	}{
		{"NodeGroupForNode", []path{
			{"in-process", func(i int) error {
				_, err := r.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: node(i)})
				return err
			}},
			{"grpc", func(i int) error {
				_, err := call(r.client.NodeGroupForNode, &protos.NodeGroupForNodeRequest{Node: node(i)})
				return err
			}},
		}},
		{"NodeGroupTargetSize", []path{
			{"in-process", func(i int) error {
				_, err := r.server.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: group(i)})
				return err
			}},
			{"grpc", func(i int) error {
				_, err := call(r.client.NodeGroupTargetSize, &protos.NodeGroupTargetSizeRequest{Id: group(i)})
				return err
			}},
		}},
		{"NodeGroupNodes", []path{
			{"in-process", func(i int) error {
				_, err := r.server.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: group(i)})
				return err
			}},
			{"grpc", func(i int) error {
				_, err := call(r.client.NodeGroupNodes, &protos.NodeGroupNodesRequest{Id: group(i)})
				return err
			}},
		}},
		{"NodeGroupGetOptions", []path{
			{"in-process", func(int) error {
				_, err := r.server.NodeGroupGetOptions(ctx, options)
				return unimplemented(err)
			}},
			{"grpc", func(int) error {
				_, err := call(r.client.NodeGroupGetOptions, options)
				return unimplemented(err)
			}},
		}},
		{"Refresh", []path{
			{"in-process", func(int) error {
				_, err := r.server.Refresh(ctx, &protos.RefreshRequest{})
				return err
			}},
			{"grpc", func(int) error {
				_, err := call(r.client.Refresh, &protos.RefreshRequest{})
				return err
			}},
		}},
	}
	for _, bench := range benches {
		for _, p := range bench.paths {
			b.Run(bench.name+"/"+p.name, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if err := p.call(i); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
	b.Run("Sync/forced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.core.Sync(ctx, true)
		}
	})
}

// BenchmarkIncreaseSizeSlowCloud measures IncreaseSize(+1) while every
// Create takes 2s: it records and queues, it must not wait for the cloud.
func BenchmarkIncreaseSizeSlowCloud(b *testing.B) {
	// Cancel the pending instances every burst calls, off the clock, so the
	// group stays the size of a real burst whatever b.N is.
	const burst = 500
	cloud := fake.New()
	cloud.SetCreateDelay(2 * time.Second)
	r := newRig(b, cloud, rigOptions{
		groups:  []autoscaling.GroupSpec{{ID: "burst", Provider: "fake", MaxSize: burst, MachineType: "m1"}},
		workers: autoscaling.WorkerOptions{Parallelism: 64, QPS: 1e6, Burst: 1e6},
	})
	b.Cleanup(func() {
		// Abandon the creations still sleeping in the slow cloud.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = r.core.Shutdown(ctx)
	})
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, err := r.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "burst", Delta: 1}); err != nil {
			b.Fatal(err)
		}
		if n++; n == burst {
			b.StopTimer()
			if err := r.core.DecreaseTargetSize("burst", -burst); err != nil {
				b.Fatal(err)
			}
			n = 0
			b.StartTimer()
		}
	}
}

func unimplemented(err error) error {
	if status.Code(err) != codes.Unimplemented {
		return fmt.Errorf("got %v, want Unimplemented", err)
	}
	return nil
}
