package externalgrpc_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prebake-dev/prebake/autoscaling"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers/fake"
)

// RPCs arrive concurrently (main loop, background cache
// refresh, parallel fills, async deletions). Many goroutines issue every
// RPC over one connection, as CA does; run it with -race. Only the codes
// the protocol allows may come back, and afterwards target, instance list
// and cloud agree.
func TestConformanceConcurrentRPCs(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	groups := []autoscaling.GroupSpec{
		{ID: "a", Provider: "fake", MinSize: 1, MaxSize: 30, MachineType: "m1"},
		{ID: "b", Provider: "fake", MinSize: 0, MaxSize: 30, MachineType: "gpu"},
	}
	// A short TTL makes Refresh re-list and reconcile while the rest runs.
	r := newRig(t, cloud, rigOptions{groups: groups, refresh: 2 * time.Millisecond,
		workers: autoscaling.WorkerOptions{Parallelism: 8, QPS: 10000, Retries: 1, RetryBase: time.Millisecond}})
	maxOf := map[string]int32{"a": 30, "b": 30}

	type op struct {
		name string
		// ok are the codes besides OK this op may answer under contention.
		ok  []codes.Code
		run func(group string, i int) error
	}
	pod := podBytes(t, "500m", "500M", 0)
	ops := []op{
		{"IncreaseSize", []codes.Code{codes.FailedPrecondition}, func(g string, i int) error {
			_, err := call(r.client.NodeGroupIncreaseSize, &protos.NodeGroupIncreaseSizeRequest{Id: g, Delta: int32(1 + i%3)})
			return err
		}},
		{"DecreaseTargetSize", []codes.Code{codes.FailedPrecondition}, func(g string, i int) error {
			_, err := call(r.client.NodeGroupDecreaseTargetSize, &protos.NodeGroupDecreaseTargetSizeRequest{Id: g, Delta: -1})
			return err
		}},
		{"DeleteNodes", []codes.Code{codes.FailedPrecondition, codes.InvalidArgument}, func(g string, i int) error {
			resp, err := call(r.client.NodeGroupNodes, &protos.NodeGroupNodesRequest{Id: g})
			if err != nil || len(resp.GetInstances()) == 0 {
				return err
			}
			// The node may be gone by now: InvalidArgument.
			id := resp.GetInstances()[i%len(resp.GetInstances())].GetId()
			_, err = call(r.client.NodeGroupDeleteNodes, &protos.NodeGroupDeleteNodesRequest{Id: g, Nodes: []*protos.ExternalGrpcNode{fakeNode(id, fakeReasonUnregistered)}})
			return err
		}},
		{"NodeGroupNodes", nil, func(g string, i int) error {
			resp, err := call(r.client.NodeGroupNodes, &protos.NodeGroupNodesRequest{Id: g})
			if err != nil {
				return err
			}
			// One list is one snapshot: unique ids, a state each, and no
			// more instances outside deletion than the group's max.
			seen := map[string]bool{}
			var notDeleting int32
			for _, in := range resp.GetInstances() {
				st := in.GetStatus().GetInstanceState()
				if in.GetId() == "" || seen[in.GetId()] || st == protos.InstanceStatus_unspecified {
					return fmt.Errorf("bad instance list %v", resp.GetInstances())
				}
				seen[in.GetId()] = true
				if st != protos.InstanceStatus_instanceDeleting {
					notDeleting++
				}
			}
			if notDeleting > maxOf[g] {
				return fmt.Errorf("%d instances not being deleted, max is %d", notDeleting, maxOf[g])
			}
			return nil
		}},
		{"TargetSize", nil, func(g string, i int) error {
			resp, err := call(r.client.NodeGroupTargetSize, &protos.NodeGroupTargetSizeRequest{Id: g})
			if err == nil && (resp.GetTargetSize() < 0 || resp.GetTargetSize() > maxOf[g]) {
				return fmt.Errorf("target %d outside [0, %d]", resp.GetTargetSize(), maxOf[g])
			}
			return err
		}},
		{"Refresh", nil, func(g string, i int) error {
			if i%4 == 0 {
				cloud.RunAll()
			}
			_, err := call(r.client.Refresh, &protos.RefreshRequest{})
			return err
		}},
		{"NodeGroups", nil, func(g string, i int) error {
			resp, err := call(r.client.NodeGroups, &protos.NodeGroupsRequest{})
			if err == nil && len(resp.GetNodeGroups()) != 2 {
				return fmt.Errorf("%d groups", len(resp.GetNodeGroups()))
			}
			return err
		}},
		{"NodeGroupForNode", nil, func(g string, i int) error {
			_, err := call(r.client.NodeGroupForNode, &protos.NodeGroupForNodeRequest{Node: fakeNode(fmt.Sprintf("fake://%s-%05d", g, i), fakeReasonUnregistered)})
			return err
		}},
		{"TemplateNodeInfo", nil, func(g string, i int) error {
			resp, err := call(r.client.NodeGroupTemplateNodeInfo, &protos.NodeGroupTemplateNodeInfoRequest{Id: g})
			if err == nil && len(resp.GetNodeBytes()) == 0 {
				return errors.New("empty nodeBytes")
			}
			return err
		}},
		{"GPU", nil, func(g string, i int) error {
			if _, err := call(r.client.GPULabel, &protos.GPULabelRequest{}); err != nil {
				return err
			}
			_, err := call(r.client.GetAvailableGPUTypes, &protos.GetAvailableGPUTypesRequest{})
			return err
		}},
		{"Cleanup", nil, func(g string, i int) error {
			_, err := call(r.client.Cleanup, &protos.CleanupRequest{})
			return err
		}},
		{"NodeGroupGetOptions", []codes.Code{codes.Unimplemented}, func(g string, i int) error {
			_, err := call(r.client.NodeGroupGetOptions, &protos.NodeGroupAutoscalingOptionsRequest{Id: g})
			if status.Code(err) == codes.OK {
				return errors.New("NodeGroupGetOptions answered OK")
			}
			return err
		}},
		{"pricing", nil, func(g string, i int) error {
			start, end := hourAhead()
			if i%2 == 0 {
				_, err := call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{Node: realNode(g, fmt.Sprintf("%s-%05d", g, i)), StartTimestamp: start, EndTimestamp: end})
				return err
			}
			_, err := call(r.client.PricingPodPrice, &protos.PricingPodPriceRequest{PodBytes: pod, StartTimestamp: start, EndTimestamp: end})
			return err
		}},
	}

	const workers, rounds = 24, 120
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			g := []string{"a", "b"}[w%2]
			for i := range rounds {
				o := ops[(i+w)%len(ops)]
				err := o.run(g, i)
				if c := status.Code(err); err != nil && !slices.Contains(o.ok, c) {
					t.Errorf("%s on %s: %v (code %v), allowed: OK %v", o.name, g, err, c, o.ok)
				}
			}
		})
	}
	wg.Wait()

	served := r.servedMethods()
	for _, m := range protos.CloudProvider_ServiceDesc.Methods {
		full := "/" + protos.CloudProvider_ServiceDesc.ServiceName + "/" + m.MethodName
		if served[full] == 0 {
			t.Errorf("%s was never served; the test must cover all 15 RPCs", m.MethodName)
		}
	}
	if n := len(protos.CloudProvider_ServiceDesc.Methods); n != 15 {
		t.Errorf("the service has %d methods, CA's proto 15", n)
	}

	// Quiesce, then everything must agree.
	r.drain(t)
	runAll(r)
	var listed []string
	for _, g := range groups {
		target := targetSize(t, r, g.ID)
		if target > int32(g.MaxSize) {
			t.Errorf("group %s: target %d above max %d", g.ID, target, g.MaxSize)
		}
		var notDeleting int32
		for _, in := range instances(t, r, g.ID) {
			listed = append(listed, in.GetId())
			if st := in.GetStatus(); st.GetInstanceState() != protos.InstanceStatus_instanceDeleting {
				notDeleting++
			}
			if st := in.GetStatus(); st.GetInstanceState() != protos.InstanceStatus_instanceRunning || st.GetErrorInfo() != nil {
				t.Errorf("group %s: %s is %v once everything settled and the cloud runs every machine", g.ID, in.GetId(), st)
			}
		}
		if notDeleting != target {
			t.Errorf("group %s: target %d but %d instances not deleting", g.ID, target, notDeleting)
		}
	}
	slices.Sort(listed)
	t.Logf("settled with %d machines after %d RPCs (%d creates, %d deletes in the cloud)",
		len(listed), sum(served), cloud.Calls("Create"), cloud.Calls("Delete"))
	if diff := cmp.Diff(cloud.Machines(), listed); diff != "" {
		t.Errorf("cloud machines vs instances CA sees (-cloud +listed):\n%s", diff)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
