package externalgrpc_test

// Regression tests for bugs found in the core while writing the
// conformance suite.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/prebake-dev/prebake/autoscaling"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// DecreaseTargetSize must never delete a registered node. The node
// watcher marks a registered instance running (Core.ObserveNode), but the
// next List overwrites the state with the cloud's (Core.reconcile), so a
// node that registered before the cloud says "running" is pending again and
// DecreaseTargetSize cancels, i.e. deletes, it.
func TestRegisteredNodeIsNeverCancelledByDecrease(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	r := newRig(t, cloud, rigOptions{})
	increase(t, r, "g1", 1)
	waitMachines(t, r, 1)
	r.sync() // the cloud still says creating
	r.core.ObserveNode("g1-00001", "fake://g1-00001", true, time.Now())
	diffProto(t, "after the Node registered", []*protos.Instance{instance("fake://g1-00001", protos.InstanceStatus_instanceRunning)}, instances(t, r, "g1"))
	r.sync() // a later List, the cloud still says creating
	diffProto(t, "after the next List", []*protos.Instance{instance("fake://g1-00001", protos.InstanceStatus_instanceRunning)}, instances(t, r, "g1"))
	_, err := call(r.client.NodeGroupDecreaseTargetSize, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "g1", Delta: -1})
	wantCode(t, "DecreaseTargetSize with only a registered node", err, codes.FailedPrecondition)
}

// Core.Sync lists providers in parallel goroutines that each write
// c.lastSync while the loop still reads it: a data race, and
// "concurrent map writes" crashes with two or more providers. Run with
// -race.
func TestSyncWithTwoProvidersIsRaceFree(t *testing.T) {
	t.Parallel()
	a, b := fake.New(), fake.New()
	a.NameValue, b.NameValue = "a", "b"
	core, err := autoscaling.New(context.Background(), autoscaling.Options{
		Cluster:   "test",
		Providers: map[string]providers.Provider{"a": a, "b": b},
		Groups: []autoscaling.GroupSpec{
			{ID: "ga", Provider: "a", MaxSize: 1, MachineType: "m1"},
			{ID: "gb", Provider: "b", MaxSize: 1, MachineType: "m1"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		core.Sync(context.Background(), true)
	}
}

// blockingList is a cloud whose List hangs, after the first one, until the
// test ends (a paged List of thousands of servers, or a cloud API that
// stopped answering).
type blockingList struct {
	*fake.Provider
	calls   *atomic.Int64
	release chan struct{}
}

func (b blockingList) List(ctx context.Context) ([]providers.Instance, error) {
	if b.calls.Add(1) > 1 {
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.Provider.List(ctx)
}

// Refresh must be answered from the snapshot: a failed
// Refresh aborts CA's whole loop. With every List after the first hanging
// and a TTL of 1ns, each Refresh must still answer OK within CA's deadline.
func TestRefreshNeverWaitsForTheCloud(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	calls := new(atomic.Int64)
	r := newRig(t, fake.New(), rigOptions{refresh: time.Nanosecond,
		wrap: func(p *fake.Provider) providers.Provider { return blockingList{p, calls, release} }})
	for range 3 {
		if _, err := call(r.client.Refresh, &protos.RefreshRequest{}); err != nil {
			t.Fatalf("Refresh with a snapshot in hand while List hangs: %v", err)
		}
	}
}
