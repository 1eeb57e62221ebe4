package standin

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
)

// fakeProvider is a stateful in-memory CloudProvider: creations in groups listed in
// stockedOut fail with class 1, the others stay creating.
type fakeProvider struct {
	protos.UnimplementedCloudProviderServer
	template   []byte
	stockedOut map[string]bool

	mu        sync.Mutex // guards the fields below
	groups    []string
	instances map[string][]*protos.Instance
	deletes   []*protos.NodeGroupDeleteNodesRequest
	n         int
}

func (f *fakeProvider) Refresh(context.Context, *protos.RefreshRequest) (*protos.RefreshResponse, error) {
	return &protos.RefreshResponse{}, nil
}

func (f *fakeProvider) NodeGroups(context.Context, *protos.NodeGroupsRequest) (*protos.NodeGroupsResponse, error) {
	resp := &protos.NodeGroupsResponse{}
	for _, g := range f.groups {
		resp.NodeGroups = append(resp.NodeGroups, &protos.NodeGroup{Id: g, MaxSize: 5})
	}
	return resp, nil
}

func (f *fakeProvider) NodeGroupTargetSize(_ context.Context, r *protos.NodeGroupTargetSizeRequest) (*protos.NodeGroupTargetSizeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &protos.NodeGroupTargetSizeResponse{TargetSize: int32(len(f.instances[r.GetId()]))}, nil
}

func (f *fakeProvider) NodeGroupNodes(_ context.Context, r *protos.NodeGroupNodesRequest) (*protos.NodeGroupNodesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &protos.NodeGroupNodesResponse{Instances: f.instances[r.GetId()]}, nil
}

func (f *fakeProvider) NodeGroupTemplateNodeInfo(context.Context, *protos.NodeGroupTemplateNodeInfoRequest) (*protos.NodeGroupTemplateNodeInfoResponse, error) {
	return &protos.NodeGroupTemplateNodeInfoResponse{NodeBytes: f.template}, nil
}

func (f *fakeProvider) NodeGroupIncreaseSize(_ context.Context, r *protos.NodeGroupIncreaseSizeRequest) (*protos.NodeGroupIncreaseSizeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range r.GetDelta() {
		f.n++
		st := &protos.InstanceStatus{InstanceState: protos.InstanceStatus_instanceCreating}
		if f.stockedOut[r.GetId()] {
			st.ErrorInfo = &protos.InstanceErrorInfo{ErrorCode: "resource_unavailable", ErrorMessage: "zone full", InstanceErrorClass: 1}
		}
		f.instances[r.GetId()] = append(f.instances[r.GetId()], &protos.Instance{Id: fmt.Sprintf("fake://%s-%d", r.GetId(), f.n), Status: st})
	}
	return &protos.NodeGroupIncreaseSizeResponse{}, nil
}

func (f *fakeProvider) NodeGroupDeleteNodes(_ context.Context, r *protos.NodeGroupDeleteNodesRequest) (*protos.NodeGroupDeleteNodesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, r)
	gone := map[string]bool{}
	for _, n := range r.GetNodes() {
		gone[n.GetProviderID()] = true
	}
	var keep []*protos.Instance
	for _, in := range f.instances[r.GetId()] {
		if !gone[in.GetId()] {
			keep = append(keep, in)
		}
	}
	f.instances[r.GetId()] = keep
	return &protos.NodeGroupDeleteNodesResponse{}, nil
}

func dialFake(t *testing.T, f *fakeProvider) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	protos.RegisterCloudProviderServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///fake", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestLoopFailsOverOnCreationError drives two loops by hand: the first scales the first
// group, whose creation fails with class 1; the second backs it off, deletes the failed
// instance as a fake node (name = providerID, create-error annotation) and scales the next
// group.
func TestLoopFailsOverOnCreationError(t *testing.T) {
	tmpl := tmpl("1900m", map[string]string{"pool": "p"})
	b, err := tmpl.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeProvider{template: b, stockedOut: map[string]bool{"stockout": true},
		groups: []string{"stockout", "fallback"}, instances: map[string][]*protos.Instance{}}

	p := pod("web", "500m", map[string]string{"pool": "p"})
	p.CreationTimestamp = metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
	}}}
	kube := fake.NewClientset(p)

	var mu sync.Mutex
	var kinds []EventKind
	s, err := New(Options{Conn: dialFake(t, f), Kube: kube, Namespace: "ns", OnEvent: func(e Event) {
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}

	res, err := s.Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ScaleUp == nil || res.ScaleUp.Group != "stockout" || res.ScaleUp.Delta != 1 {
		t.Fatalf("loop 1 scaled %+v; want stockout +1", res.ScaleUp)
	}
	res, err = s.Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CreateErrors) != 1 || res.ScaleUp == nil || res.ScaleUp.Group != "fallback" {
		t.Fatalf("loop 2: errors %v, scale-up %+v; want 1 error and fallback +1", res.CreateErrors, res.ScaleUp)
	}
	if res.Skipped["stockout"] == "" {
		t.Errorf("loop 2 did not skip the backed-off group: %v", res.Skipped)
	}
	f.mu.Lock()
	if len(f.deletes) != 1 || len(f.deletes[0].GetNodes()) != 1 {
		t.Fatalf("DeleteNodes calls %v; want one with one fake node", f.deletes)
	}
	fakeNode := f.deletes[0].GetNodes()[0]
	f.mu.Unlock()
	if fakeNode.GetName() != fakeNode.GetProviderID() || fakeNode.GetAnnotations()[providers.AnnotationFakeNodeReason] != "create-error" {
		t.Errorf("fake node %+v: want name = providerID and the create-error annotation", fakeNode)
	}

	// Loop 3: the fallback instance is upcoming and absorbs the pod; nothing more to do.
	res, err = s.Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ScaleUp != nil || res.Absorbed != 1 {
		t.Errorf("loop 3: scale-up %+v, absorbed %d; want none and 1", res.ScaleUp, res.Absorbed)
	}

	insts := s.Instances()
	if len(insts) != 2 {
		t.Fatalf("instances %+v; want 2", insts)
	}
	failed, served := insts[0], insts[1]
	if failed.Error == nil || failed.Error.Class != 1 || failed.Error.Loop != 2 || failed.IncreaseLoop != 1 || !failed.Requested {
		t.Errorf("failed instance %+v (error %+v); want class 1 seen in loop 2 after IncreaseSize in loop 1", failed, failed.Error)
	}
	if served.Group != "fallback" || !served.Requested || len(served.Pods) != 1 || served.PodPendingSeen.IsZero() {
		t.Errorf("served instance %+v; want the fallback instance carrying the pod's times", served)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []EventKind{EventPodPending, EventScaleUp, EventListed, EventCreateError, EventBackoff, EventDeleteNodes} {
		found := false
		for _, k := range kinds {
			found = found || k == want
		}
		if !found {
			t.Errorf("no %q event; got %v", want, kinds)
		}
	}
}
