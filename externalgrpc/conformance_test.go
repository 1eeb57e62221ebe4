package externalgrpc_test

// Conformance of the plugin to cluster-autoscaler's externalgrpc protocol
// (kubernetes/autoscaler cluster-autoscaler/cloudprovider/externalgrpc, read at cluster-autoscaler-1.36.1; docs/operations.md). Every test drives
// the real autoscaling.Core over the in-memory fake cloud through the real
// gRPC stack on loopback, with the generated client and CA's 5s deadline:
// what CA would see, not what the Go methods return.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/prebake-dev/prebake/autoscaling"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// CA's fake-node reasons (the value of providers.AnnotationFakeNodeReason).
const (
	fakeReasonUnregistered = "unregistered"
	fakeReasonCreateError  = "create-error"
)

// fakeNode is the node CA synthesises for an instance without a Node:
// name = providerID, no labels, the fake-node-reason annotation.
func fakeNode(providerID, reason string) *protos.ExternalGrpcNode {
	return &protos.ExternalGrpcNode{
		ProviderID:  providerID,
		Name:        providerID,
		Annotations: map[string]string{providers.AnnotationFakeNodeReason: reason},
	}
}

// realNode is a registered Node of ours as CA projects it: its name is the
// machine name and it carries the labels the plugin asked for.
func realNode(group, machine string) *protos.ExternalGrpcNode {
	return &protos.ExternalGrpcNode{
		ProviderID: "fake://" + machine,
		Name:       machine,
		Labels: map[string]string{
			providers.LabelCluster: "test", providers.LabelGroup: group, providers.LabelHostname: machine,
		},
	}
}

func increase(t *testing.T, r *rig, group string, delta int32) {
	t.Helper()
	if _, err := call(r.client.NodeGroupIncreaseSize, &protos.NodeGroupIncreaseSizeRequest{Id: group, Delta: delta}); err != nil {
		t.Fatalf("IncreaseSize(%s, %d): %v", group, delta, err)
	}
}

func targetSize(t *testing.T, r *rig, group string) int32 {
	t.Helper()
	resp, err := call(r.client.NodeGroupTargetSize, &protos.NodeGroupTargetSizeRequest{Id: group})
	if err != nil {
		t.Fatalf("TargetSize(%s): %v", group, err)
	}
	return resp.GetTargetSize()
}

func instances(t *testing.T, r *rig, group string) []*protos.Instance {
	t.Helper()
	resp, err := call(r.client.NodeGroupNodes, &protos.NodeGroupNodesRequest{Id: group})
	if err != nil {
		t.Fatalf("NodeGroupNodes(%s): %v", group, err)
	}
	return resp.GetInstances()
}

func instance(id string, state protos.InstanceStatus_InstanceState) *protos.Instance {
	return &protos.Instance{Id: id, Status: &protos.InstanceStatus{InstanceState: state}}
}

// ids returns the fake providerIDs of machines <group>-<n> for each n.
func ids(group string, ns ...int) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, fmt.Sprintf("fake://%s-%05d", group, n))
	}
	return out
}

// runAll makes every machine of the fake cloud running and re-lists.
func runAll(r *rig) {
	r.cloud.RunAll()
	r.sync()
}

// waitMachines waits until the fake cloud holds n machines.
func waitMachines(t *testing.T, r *rig, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d machines in the cloud", n), func() bool { return len(r.cloud.Machines()) == n })
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func diffProto(t *testing.T, what string, want, got any, opts ...cmp.Option) {
	t.Helper()
	if diff := cmp.Diff(want, got, append([]cmp.Option{protocmp.Transform()}, opts...)...); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// stable ids, and NodeGroups and NodeGroupForNode agree on min/max.
func TestConformanceNodeGroups(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.New(), rigOptions{})
	resp, err := call(r.client.NodeGroups, &protos.NodeGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []*protos.NodeGroup{
		{Id: "g1", MinSize: 0, MaxSize: 5},
		{Id: "g2", MinSize: 1, MaxSize: 5},
		{Id: "gpu", MinSize: 0, MaxSize: 2},
	}
	diffProto(t, "NodeGroups", want, resp.GetNodeGroups(), protocmp.IgnoreFields(&protos.NodeGroup{}, "debug"))
	for _, g := range resp.GetNodeGroups() {
		if g.GetDebug() == "" {
			t.Errorf("group %s: empty debug; CA shows it in its status", g.GetId())
		}
	}

	// The answer is the same on every call: CA keys everything by id.
	again, err := call(r.client.NodeGroups, &protos.NodeGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	diffProto(t, "second NodeGroups", resp.GetNodeGroups(), again.GetNodeGroups())

	// NodeGroupForNode returns the very same NodeGroup message.
	for _, g := range resp.GetNodeGroups() {
		increase(t, r, g.GetId(), 1)
	}
	for i, g := range resp.GetNodeGroups() {
		pid := ids(g.GetId(), i+1)[0]
		got, err := call(r.client.NodeGroupForNode, &protos.NodeGroupForNodeRequest{Node: fakeNode(pid, fakeReasonUnregistered)})
		if err != nil {
			t.Fatal(err)
		}
		diffProto(t, "NodeGroupForNode("+pid+") vs NodeGroups", g, got.GetNodeGroup())
	}
}

// a node is found by providerID, as a fake node (name =
// providerID), by name before its providerID is set, and by our labels; a
// node that isn't ours is an empty id, never an error.
func TestConformanceNodeGroupForNode(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.New(), rigOptions{})
	increase(t, r, "g1", 1) // g1-00001
	g1 := &protos.NodeGroup{Id: "g1", MinSize: 0, MaxSize: 5}
	notOurs := &protos.NodeGroup{}

	tests := []struct {
		name string
		node *protos.ExternalGrpcNode
		want *protos.NodeGroup
	}{
		{"registered node", realNode("g1", "g1-00001"), g1},
		{"by providerID, other name", &protos.ExternalGrpcNode{ProviderID: "fake://g1-00001", Name: "renamed"}, g1},
		{"fake node", fakeNode("fake://g1-00001", fakeReasonUnregistered), g1},
		{"by name, providerID not set yet", &protos.ExternalGrpcNode{Name: "g1-00001"}, g1},
		{"by our labels", &protos.ExternalGrpcNode{Name: "n", ProviderID: "fake://elsewhere",
			Labels: map[string]string{providers.LabelCluster: "test", providers.LabelGroup: "g1"}}, g1},
		{"another cluster's labels", &protos.ExternalGrpcNode{Name: "n",
			Labels: map[string]string{providers.LabelCluster: "other", providers.LabelGroup: "g1"}}, notOurs},
		{"control plane", &protos.ExternalGrpcNode{Name: "cp-1", ProviderID: "kind://docker/kind/cp-1",
			Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}, notOurs},
		{"unknown fake node", fakeNode("fake://g1-99999", fakeReasonUnregistered), notOurs},
		{"empty node", &protos.ExternalGrpcNode{}, notOurs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := call(r.client.NodeGroupForNode, &protos.NodeGroupForNodeRequest{Node: tc.node})
			if err != nil {
				t.Fatalf("err = %v; a node that isn't ours must be an empty id, not an error", err)
			}
			diffProto(t, "group", tc.want, resp.GetNodeGroup(), protocmp.IgnoreFields(&protos.NodeGroup{}, "debug"))
		})
	}

	t.Run("missing node", func(t *testing.T) {
		t.Parallel()
		_, err := call(r.client.NodeGroupForNode, &protos.NodeGroupForNodeRequest{})
		wantCode(t, "NodeGroupForNode without a node", err, codes.InvalidArgument)
	})
}

// IncreaseSize returns at once; TargetSize and
// NodeGroupNodes reflect it immediately, with the providerID each Node will
// register with, before the cloud has created anything.
func TestConformanceIncreaseSize(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	release := cloud.GateCreates() // the cloud hangs until released
	defer release()
	r := newRig(t, cloud, rigOptions{})

	increase(t, r, "g1", 2)
	if got := targetSize(t, r, "g1"); got != 2 {
		t.Fatalf("TargetSize right after IncreaseSize(+2) = %d, want 2", got)
	}
	increase(t, r, "g1", 1)
	if got := targetSize(t, r, "g1"); got != 3 {
		t.Fatalf("TargetSize right after another IncreaseSize(+1) = %d, want 3", got)
	}
	want := []*protos.Instance{
		instance("fake://g1-00001", protos.InstanceStatus_instanceCreating),
		instance("fake://g1-00002", protos.InstanceStatus_instanceCreating),
		instance("fake://g1-00003", protos.InstanceStatus_instanceCreating),
	}
	diffProto(t, "NodeGroupNodes while the cloud hangs", want, instances(t, r, "g1"))
	if got := len(cloud.Machines()); got != 0 {
		t.Fatalf("%d machines exist although every Create hangs", got)
	}

	t.Run("rejected", func(t *testing.T) {
		tests := []struct {
			name  string
			group string
			delta int32
			want  codes.Code
		}{
			{"past max", "g1", 3, codes.FailedPrecondition},
			{"far past max", "g1", 1000, codes.FailedPrecondition},
			{"zero delta", "g1", 0, codes.InvalidArgument},
			{"negative delta", "g1", -1, codes.InvalidArgument},
			{"unknown group", "nope", 1, codes.NotFound},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := call(r.client.NodeGroupIncreaseSize, &protos.NodeGroupIncreaseSizeRequest{Id: tc.group, Delta: tc.delta})
				wantCode(t, fmt.Sprintf("IncreaseSize(%s, %d)", tc.group, tc.delta), err, tc.want)
			})
		}
		if got := targetSize(t, r, "g1"); got != 3 {
			t.Fatalf("a rejected IncreaseSize changed the target to %d", got)
		}
	})

	_, err := call(r.client.NodeGroupTargetSize, &protos.NodeGroupTargetSizeRequest{Id: "nope"})
	wantCode(t, "TargetSize of an unknown group", err, codes.NotFound)
	_, err = call(r.client.NodeGroupNodes, &protos.NodeGroupNodesRequest{Id: "nope"})
	wantCode(t, "NodeGroupNodes of an unknown group", err, codes.NotFound)

	// Up to max is fine.
	increase(t, r, "g1", 2)
	if got := targetSize(t, r, "g1"); got != 5 {
		t.Fatalf("TargetSize at max = %d, want 5", got)
	}

	// The cloud creates exactly the machines CA was told about, and they
	// turn running.
	release()
	waitMachines(t, r, 5)
	if diff := cmp.Diff(ids("g1", 1, 2, 3, 4, 5), cloud.Machines()); diff != "" {
		t.Fatalf("machines created under other ids than NodeGroupNodes listed (-listed +created):\n%s", diff)
	}
	runAll(r)
	want = nil
	for _, id := range ids("g1", 1, 2, 3, 4, 5) {
		want = append(want, instance(id, protos.InstanceStatus_instanceRunning))
	}
	diffProto(t, "NodeGroupNodes once the cloud runs them", want, instances(t, r, "g1"))
	if got := targetSize(t, r, "g1"); got != 5 {
		t.Fatalf("TargetSize = %d once running, want 5", got)
	}
}

// when the cloud assigns ids (hcloud), CA sees a placeholder until
// Create returns, then the real id, which NodeGroupForNode resolves.
func TestConformanceAssignedIDReplacesPlaceholder(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	cloud.KnownIDs = false
	release := cloud.GateCreates()
	defer release()
	r := newRig(t, cloud, rigOptions{})

	increase(t, r, "g1", 1)
	got := instances(t, r, "g1")
	if len(got) != 1 || got[0].GetId() == "" || got[0].GetStatus().GetInstanceState() != protos.InstanceStatus_instanceCreating {
		t.Fatalf("before the cloud answers: %v, want one creating instance with a non-empty id", got)
	}
	placeholder := got[0].GetId()
	release()
	eventually(t, "the cloud's id", func() bool {
		got := instances(t, r, "g1")
		return len(got) == 1 && got[0].GetId() == "fake://1"
	})
	resp, err := call(r.client.NodeGroupForNode, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{ProviderID: "fake://1", Name: "g1-00001"}})
	if err != nil || resp.GetNodeGroup().GetId() != "g1" {
		t.Fatalf("NodeGroupForNode(real id) = %v, %v; want g1", resp.GetNodeGroup(), err)
	}
	if strings.HasPrefix(placeholder, "fake://") {
		t.Errorf("placeholder %q looks like a real providerID; no Node may ever carry it", placeholder)
	}
}

// a failed creation stays listed as instanceCreating with an
// errorInfo (class 1 for capacity, so CA fails over to another group) until
// CA deletes it as a fake node.
func TestConformanceCreationErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		breakIt   func(*fake.Provider)
		wantCode  string
		wantClass int32
	}{
		{"capacity", func(p *fake.Provider) { p.SetCapacity(0) }, "resource_unavailable", int32(providers.ErrorOutOfResources)},
		{"retries exhausted", func(p *fake.Provider) {
			p.InjectCreateErrors(fake.ErrTransient, fake.ErrTransient, fake.ErrTransient) // Retries: 2
		}, "api_5xx", int32(providers.ErrorOther)},
		{"permanent", func(p *fake.Provider) { p.InjectCreateErrors(errors.New("fake: invalid image")) }, "create_failed", int32(providers.ErrorOther)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cloud := fake.New()
			r := newRig(t, cloud, rigOptions{})
			increase(t, r, "g1", 1) // the good one
			waitMachines(t, r, 1)
			tc.breakIt(cloud)
			increase(t, r, "g1", 1) // fails
			failedID := ids("g1", 2)[0]

			var failed *protos.Instance
			eventually(t, "a creation error in NodeGroupNodes", func() bool {
				for _, in := range instances(t, r, "g1") {
					if in.GetStatus().GetErrorInfo() != nil {
						failed = in
						return true
					}
				}
				return false
			})
			want := &protos.Instance{Id: failedID, Status: &protos.InstanceStatus{
				InstanceState: protos.InstanceStatus_instanceCreating,
				ErrorInfo:     &protos.InstanceErrorInfo{ErrorCode: tc.wantCode, InstanceErrorClass: tc.wantClass},
			}}
			diffProto(t, "failed instance", want, failed, protocmp.IgnoreFields(&protos.InstanceErrorInfo{}, "errorMessage"))
			if failed.GetStatus().GetErrorInfo().GetErrorMessage() == "" {
				t.Errorf("errorInfo has no message; CA logs it")
			}
			if got := targetSize(t, r, "g1"); got != 2 {
				t.Fatalf("TargetSize = %d while the failure is shown, want 2 (CA removes it by DeleteNodes)", got)
			}

			// CA asks which group the failed instance's fake node is in, then
			// deletes it.
			node := fakeNode(failedID, fakeReasonCreateError)
			g, err := call(r.client.NodeGroupForNode, &protos.NodeGroupForNodeRequest{Node: node})
			if err != nil || g.GetNodeGroup().GetId() != "g1" {
				t.Fatalf("NodeGroupForNode(failed fake node) = %v, %v; want g1", g.GetNodeGroup(), err)
			}
			if _, err := call(r.client.NodeGroupDeleteNodes, &protos.NodeGroupDeleteNodesRequest{Id: "g1", Nodes: []*protos.ExternalGrpcNode{node}}); err != nil {
				t.Fatalf("DeleteNodes(failed fake node): %v", err)
			}
			if got := targetSize(t, r, "g1"); got != 1 {
				t.Fatalf("TargetSize = %d after deleting the failed instance, want 1", got)
			}
			diffProto(t, "NodeGroupNodes after deleting the failed instance",
				[]*protos.Instance{instance(ids("g1", 1)[0], protos.InstanceStatus_instanceCreating)}, instances(t, r, "g1"))
		})
	}
}

// DeleteNodes deletes exactly the named nodes (real or fake),
// lowers the target at once, and refuses, deleting nothing, what isn't
// possible.
func TestConformanceDeleteNodes(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	r := newRig(t, cloud, rigOptions{})
	increase(t, r, "g1", 2) // g1-00001, g1-00002
	increase(t, r, "g2", 2) // g2-00003, g2-00004 (minSize 1)
	waitMachines(t, r, 4)
	runAll(r)

	t.Run("rejected", func(t *testing.T) {
		tests := []struct {
			name  string
			group string
			nodes []*protos.ExternalGrpcNode
			want  codes.Code
		}{
			{"unknown group", "nope", []*protos.ExternalGrpcNode{realNode("g1", "g1-00001")}, codes.NotFound},
			{"node of another group", "g1", []*protos.ExternalGrpcNode{realNode("g2", "g2-00003")}, codes.InvalidArgument},
			{"one good, one foreign", "g1", []*protos.ExternalGrpcNode{realNode("g1", "g1-00001"), realNode("g2", "g2-00003")}, codes.InvalidArgument},
			{"unknown node", "g1", []*protos.ExternalGrpcNode{fakeNode("fake://g1-99999", fakeReasonUnregistered)}, codes.InvalidArgument},
			{"below min", "g2", []*protos.ExternalGrpcNode{realNode("g2", "g2-00003"), realNode("g2", "g2-00004")}, codes.FailedPrecondition},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := call(r.client.NodeGroupDeleteNodes, &protos.NodeGroupDeleteNodesRequest{Id: tc.group, Nodes: tc.nodes})
				wantCode(t, "DeleteNodes", err, tc.want)
			})
		}
		for group, want := range map[string]int32{"g1": 2, "g2": 2} {
			if got := targetSize(t, r, group); got != want {
				t.Errorf("a refused DeleteNodes changed %s's target to %d", group, got)
			}
		}
		if got := cloud.Calls("Delete"); got != 0 {
			t.Errorf("a refused DeleteNodes deleted %d machines", got)
		}
	})

	// A real, registered node.
	if _, err := call(r.client.NodeGroupDeleteNodes, &protos.NodeGroupDeleteNodesRequest{Id: "g1", Nodes: []*protos.ExternalGrpcNode{realNode("g1", "g1-00001")}}); err != nil {
		t.Fatal(err)
	}
	if got := targetSize(t, r, "g1"); got != 1 {
		t.Fatalf("TargetSize right after DeleteNodes = %d, want 1", got)
	}
	for _, in := range instances(t, r, "g1") {
		if in.GetId() == ids("g1", 1)[0] && in.GetStatus().GetInstanceState() != protos.InstanceStatus_instanceDeleting {
			t.Errorf("deleted instance listed as %v, want instanceDeleting or gone", in.GetStatus())
		}
	}

	// A fake node of an instance that is still being created.
	release := cloud.GateCreates()
	defer release()
	increase(t, r, "g2", 1) // g2-00005
	if _, err := call(r.client.NodeGroupDeleteNodes, &protos.NodeGroupDeleteNodesRequest{Id: "g2", Nodes: []*protos.ExternalGrpcNode{fakeNode(ids("g2", 5)[0], fakeReasonUnregistered)}}); err != nil {
		t.Fatalf("DeleteNodes(fake node of a creating instance): %v", err)
	}
	if got := targetSize(t, r, "g2"); got != 2 {
		t.Fatalf("g2 TargetSize = %d after deleting its creating instance, want 2", got)
	}
	// The deleted node of g2's minimum is still refused: the target is 2.
	_, err := call(r.client.NodeGroupDeleteNodes, &protos.NodeGroupDeleteNodesRequest{Id: "g2", Nodes: []*protos.ExternalGrpcNode{realNode("g2", "g2-00003"), realNode("g2", "g2-00004")}})
	wantCode(t, "DeleteNodes below min after a cancellation", err, codes.FailedPrecondition)

	release()
	r.drain(t)
	r.sync()
	if diff := cmp.Diff(slices.Concat(ids("g1", 2), ids("g2", 3, 4)), r.cloud.Machines()); diff != "" {
		t.Errorf("machines after the deletes (-want +got):\n%s", diff)
	}
	diffProto(t, "g1 after the delete finished", []*protos.Instance{instance(ids("g1", 2)[0], protos.InstanceStatus_instanceRunning)}, instances(t, r, "g1"))
	diffProto(t, "g2 after the delete finished", []*protos.Instance{
		instance(ids("g2", 3)[0], protos.InstanceStatus_instanceRunning),
		instance(ids("g2", 4)[0], protos.InstanceStatus_instanceRunning),
	}, instances(t, r, "g2"))
}

// DecreaseTargetSize only cancels instances that have not come
// up; running ones are never touched.
func TestConformanceDecreaseTargetSize(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	r := newRig(t, cloud, rigOptions{})
	increase(t, r, "g1", 2) // g1-00001, g1-00002
	waitMachines(t, r, 2)
	runAll(r)

	release := cloud.GateCreates()
	defer release()
	increase(t, r, "g1", 3) // g1-00003..5, pending

	tests := []struct {
		name  string
		group string
		delta int32
		want  codes.Code
	}{
		{"more than pending", "g1", -4, codes.FailedPrecondition},
		{"positive delta", "g1", 1, codes.InvalidArgument},
		{"zero delta", "g1", 0, codes.InvalidArgument},
		{"unknown group", "nope", -1, codes.NotFound},
		{"nothing pending", "g2", -1, codes.FailedPrecondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(r.client.NodeGroupDecreaseTargetSize, &protos.NodeGroupDecreaseTargetSizeRequest{Id: tc.group, Delta: tc.delta})
			wantCode(t, fmt.Sprintf("DecreaseTargetSize(%s, %d)", tc.group, tc.delta), err, tc.want)
		})
	}
	if got := targetSize(t, r, "g1"); got != 5 {
		t.Fatalf("a refused DecreaseTargetSize changed the target to %d", got)
	}

	if _, err := call(r.client.NodeGroupDecreaseTargetSize, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "g1", Delta: -3}); err != nil {
		t.Fatal(err)
	}
	if got := targetSize(t, r, "g1"); got != 2 {
		t.Fatalf("TargetSize right after DecreaseTargetSize(-3) = %d, want 2", got)
	}
	release()
	r.drain(t)
	r.sync()
	if diff := cmp.Diff(ids("g1", 1, 2), cloud.Machines()); diff != "" {
		t.Errorf("machines after cancelling the pending ones (-want +got):\n%s", diff)
	}
	diffProto(t, "g1 after the cancellation", []*protos.Instance{
		instance(ids("g1", 1)[0], protos.InstanceStatus_instanceRunning),
		instance(ids("g1", 2)[0], protos.InstanceStatus_instanceRunning),
	}, instances(t, r, "g1"))
}

// NodeGroupGetOptions answers Unimplemented, which CA maps to "use the
// global options" (answering would zero MaxNodeStartupTime,
// kubernetes/autoscaler#10245).
func TestConformanceGetOptionsIsUnimplemented(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.New(), rigOptions{})
	defaults := &protos.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
		ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
		MaxNodeProvisionDuration: durationpb.New(15 * time.Minute),
	}
	for _, id := range []string{"g1", "nope"} {
		_, err := call(r.client.NodeGroupGetOptions, &protos.NodeGroupAutoscalingOptionsRequest{Id: id, Defaults: defaults})
		wantCode(t, "NodeGroupGetOptions "+id, err, codes.Unimplemented)
	}
}

// legacyAndNodeBytes returns fields 1 and 2 of a marshalled
// NodeGroupTemplateNodeInfoResponse, read with protowire so the check holds
// whatever the generated code calls them.
func legacyAndNodeBytes(t *testing.T, resp *protos.NodeGroupTemplateNodeInfoResponse) (field1, field2 []byte) {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			t.Fatalf("field %d has wire type %v, want bytes", num, typ)
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			t.Fatalf("bad field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			field1 = v
		case 2:
			field2 = v
		default:
			t.Errorf("unexpected field %d in the response", num)
		}
	}
	return field1, field2
}

// TemplateNodeInfo is a core/v1 Node in nodeBytes (and the
// same bytes in legacy field 1 for CA <= 1.34.1) with capacity, allocatable,
// labels, taints and Ready, so CA can scale from zero.
func TestConformanceTemplateNodeInfo(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.New(), rigOptions{})
	tests := []struct {
		group      string
		capacity   corev1.ResourceList
		allocCPU   string
		allocMem   string
		labels     map[string]string
		taintKeys  []string
		noGPULabel bool
	}{
		{
			group:     "g1",
			capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")},
			allocCPU:  "1900m",
			allocMem:  "3840Mi",
			labels:    map[string]string{"team": "a", providers.LabelGroup: "g1", providers.LabelCluster: "test", providers.LabelZone: "z1", providers.LabelRegion: "r1", providers.LabelInstanceType: "m1", providers.LabelArch: "amd64", providers.LabelOS: "linux"},
			taintKeys: []string{"dedicated"},
		},
		{
			group: "gpu",
			capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
				corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("1")},
			allocCPU: "7900m",
			allocMem: "32512Mi",
			labels:   map[string]string{providers.LabelGroup: "gpu", providers.LabelInstanceType: "gpu", gpuLabel: "nvidia-t4"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.group, func(t *testing.T) {
			t.Parallel()
			resp, err := call(r.client.NodeGroupTemplateNodeInfo, &protos.NodeGroupTemplateNodeInfoRequest{Id: tc.group})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetNodeBytes()) == 0 {
				t.Fatal("nodeBytes is empty: CA would dereference a nil template")
			}
			field1, field2 := legacyAndNodeBytes(t, resp)
			if !slices.Equal(field1, field2) || !slices.Equal(field2, resp.GetNodeBytes()) {
				t.Errorf("legacy field 1 (%d bytes) and nodeBytes field 2 (%d bytes) differ", len(field1), len(field2))
			}
			var n corev1.Node
			if err := n.Unmarshal(resp.GetNodeBytes()); err != nil {
				t.Fatalf("nodeBytes is not a core/v1 Node: %v", err)
			}
			for name, want := range tc.capacity {
				if got, ok := n.Status.Capacity[name]; !ok || got.Cmp(want) != 0 {
					t.Errorf("capacity %s = %s, want %s", name, got.String(), want.String())
				}
			}
			for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: tc.allocCPU, corev1.ResourceMemory: tc.allocMem, corev1.ResourcePods: "110"} {
				if got := n.Status.Allocatable[name]; got.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("allocatable %s = %s, want %s", name, got.String(), want)
				}
			}
			for k, v := range tc.labels {
				if got, ok := n.Labels[k]; !ok || got != v {
					t.Errorf("label %s = %q, want %q", k, got, v)
				}
			}
			var taints []string
			for _, ta := range n.Spec.Taints {
				taints = append(taints, ta.Key)
			}
			if diff := cmp.Diff(tc.taintKeys, taints); diff != "" {
				t.Errorf("taint keys (-want +got):\n%s", diff)
			}
			ready := slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
				return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			})
			if !ready {
				t.Errorf("template has no Ready=True condition: %+v", n.Status.Conditions)
			}
		})
	}
	t.Run("unknown group", func(t *testing.T) {
		t.Parallel()
		_, err := call(r.client.NodeGroupTemplateNodeInfo, &protos.NodeGroupTemplateNodeInfoRequest{Id: "nope"})
		wantCode(t, "TemplateNodeInfo of an unknown group", err, codes.NotFound)
	})
}

// the GPU label is the configured one; GPU types are the keys
// of the map, empty (not an error) without GPU groups.
func TestConformanceGPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		groups []autoscaling.GroupSpec
		want   []string
	}{
		{"with a GPU group", defaultGroups(), []string{"nvidia-t4"}},
		{"without", []autoscaling.GroupSpec{{ID: "cpu", Provider: "fake", MaxSize: 1, MachineType: "m1"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, fake.New(), rigOptions{groups: tc.groups})
			label, err := call(r.client.GPULabel, &protos.GPULabelRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if label.GetLabel() != gpuLabel {
				t.Errorf("GPULabel = %q, want %q", label.GetLabel(), gpuLabel)
			}
			types, err := call(r.client.GetAvailableGPUTypes, &protos.GetAvailableGPUTypesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for k := range types.GetGpuTypes() {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if diff := cmp.Diff(tc.want, keys); diff != "" {
				t.Errorf("GPU types (-want +got):\n%s", diff)
			}
		})
	}
}

// Cleanup is CA going away; every node outlives it.
func TestConformanceCleanupDeletesNothing(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	r := newRig(t, cloud, rigOptions{})
	increase(t, r, "g1", 2)
	increase(t, r, "g2", 1)
	waitMachines(t, r, 3)
	runAll(r)
	before := map[string][]*protos.Instance{"g1": instances(t, r, "g1"), "g2": instances(t, r, "g2")}

	if _, err := call(r.client.Cleanup, &protos.CleanupRequest{}); err != nil {
		t.Fatal(err)
	}
	// A new CA comes up and starts its loop.
	if _, err := call(r.client.Refresh, &protos.RefreshRequest{}); err != nil {
		t.Fatal(err)
	}
	r.sync()
	for group, want := range before {
		diffProto(t, group+" after Cleanup", want, instances(t, r, group))
	}
	if got := cloud.Calls("Delete"); got != 0 {
		t.Errorf("Cleanup led to %d cloud deletes", got)
	}
	if diff := cmp.Diff(slices.Concat(ids("g1", 1, 2), ids("g2", 3)), cloud.Machines()); diff != "" {
		t.Errorf("machines after Cleanup (-want +got):\n%s", diff)
	}
	if got := targetSize(t, r, "g1"); got != 2 {
		t.Errorf("g1 TargetSize after Cleanup = %d, want 2", got)
	}
}

// Refresh answers from the snapshot within the TTL and
// fails (Unavailable) only while the cloud has never been listed, so CA
// never acts on an empty picture.
func TestConformanceRefresh(t *testing.T) {
	t.Parallel()
	t.Run("within the TTL", func(t *testing.T) {
		t.Parallel()
		cloud := fake.New()
		r := newRig(t, cloud, rigOptions{})
		before := cloud.Calls("List")
		for range 5 {
			if _, err := call(r.client.Refresh, &protos.RefreshRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := cloud.Calls("List") - before; got != 0 {
			t.Errorf("5 Refreshes within the TTL listed the cloud %d times", got)
		}
	})
	t.Run("never listed", func(t *testing.T) {
		t.Parallel()
		cloud := fake.New()
		cloud.SetListError(errors.New("fake: 401 unauthorized"))
		r := newRig(t, cloud, rigOptions{})
		for range 2 {
			_, err := call(r.client.Refresh, &protos.RefreshRequest{})
			wantCode(t, "Refresh before any successful List", err, codes.Unavailable)
		}
		// Refresh never waits on the cloud: it asks the sync loop to
		// re-list and heals on a later call.
		cloud.SetListError(nil)
		eventually(t, "Refresh to heal once the cloud lists again", func() bool {
			_, err := call(r.client.Refresh, &protos.RefreshRequest{})
			return err == nil
		})
		// A later failure keeps serving the last snapshot.
		cloud.SetListError(errors.New("fake: 503"))
		r.sync()
		if _, err := call(r.client.Refresh, &protos.RefreshRequest{}); err != nil {
			t.Errorf("Refresh over a stale snapshot: %v", err)
		}
	})
}
