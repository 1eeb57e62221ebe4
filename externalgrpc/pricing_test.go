package externalgrpc_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/autoscaling"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// hourAhead is the window CA's price expander asks about: now to now+1h.
func hourAhead() (start, end *timestamppb.Timestamp) {
	t := time.Unix(1_800_000_000, 0)
	return timestamppb.New(t), timestamppb.New(t.Add(time.Hour))
}

func podBytes(t *testing.T, cpu, mem string, gpus int64) []byte {
	t.Helper()
	req := corev1.ResourceList{}
	if cpu != "" {
		req[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	if gpus > 0 {
		req["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: req}}}},
	}
	b, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The price expander calls PricingNodePrice for each option's node (a
// registered node, or the template CA built from NodeGroupTemplateNodeInfo)
// and PricingPodPrice for its stabilisation pod and every pod of the
// option; each must answer OK for the option to count.
func TestPricingNodePrice(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.New(), rigOptions{})
	increase(t, r, "g1", 1)
	start, end := hourAhead()

	// The template as CA turns it into a node: CA renames template nodes
	// and keeps their labels.
	tmpl, err := call(r.client.NodeGroupTemplateNodeInfo, &protos.NodeGroupTemplateNodeInfoRequest{Id: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	tn := &corev1.Node{}
	if err := tn.Unmarshal(tmpl.GetNodeBytes()); err != nil {
		t.Fatal(err)
	}
	halfHour := timestamppb.New(start.AsTime().Add(30 * time.Minute))
	tests := []struct {
		name string
		node *protos.ExternalGrpcNode
		end  *timestamppb.Timestamp
		want float64
	}{
		{"registered node of g1 (m1, 0.02/h)", realNode("g1", "g1-00001"), end, 0.02},
		{"fake node of a creating instance", fakeNode(ids("g1", 1)[0], "creating"), end, 0.02},
		{"template node of gpu (0.5/h)", &protos.ExternalGrpcNode{Name: "template-node-for-gpu-1234", Labels: tn.Labels}, end, 0.5},
		{"half an hour", realNode("g1", "g1-00001"), halfHour, 0.01},
	}
	for _, tc := range tests {
		resp, err := call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{Node: tc.node, StartTimestamp: start, EndTimestamp: tc.end})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !near(resp.GetPrice(), tc.want) {
			t.Errorf("%s: price %v, want %v", tc.name, resp.GetPrice(), tc.want)
		}
	}

	_, err = call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{
		Node: &protos.ExternalGrpcNode{Name: "someone-elses", ProviderID: "aws:///x"}, StartTimestamp: start, EndTimestamp: end})
	wantCode(t, "node of no group", err, codes.NotFound)
	_, err = call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{Node: realNode("g1", "g1-00001"), StartTimestamp: end, EndTimestamp: start})
	wantCode(t, "window ending before it starts", err, codes.InvalidArgument)
	_, err = call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{Node: realNode("g1", "g1-00001")})
	wantCode(t, "no window", err, codes.InvalidArgument)
	_, err = call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{StartTimestamp: start, EndTimestamp: end})
	wantCode(t, "no node", err, codes.InvalidArgument)
}

func TestPricingPodPrice(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.New(), rigOptions{})
	start, end := hourAhead()
	tests := []struct {
		name      string
		pod       []byte
		want      float64
		wantCode  codes.Code
		wantInMsg string
	}{
		// m1 (2 CPU, 4 GiB, 0.02): dominant share 1/2 → 0.01; gpu (8 CPU,
		// 32 GiB, 0.5): 1/8 → 0.0625. The cheaper slice wins.
		{name: "1 CPU, 1 GiB", pod: podBytes(t, "1", "1Gi", 0), want: 0.01},
		// Memory dominates on m1: 3/4 → 0.015.
		{name: "100m, 3 GiB", pod: podBytes(t, "100m", "3Gi", 0), want: 0.015},
		// CA's stabilisation pod: 500m, 500 MB → 500m/2 = 1/4 → 0.005.
		{name: "CA's stabilisation pod", pod: podBytes(t, "500m", "500M", 0), want: 0.005},
		// Only gpu holds a GPU, and one GPU is all of it.
		{name: "a GPU", pod: podBytes(t, "1", "1Gi", 1), want: 0.5},
		// Too big for m1: only gpu's 3/8 → 0.1875.
		{name: "3 CPU", pod: podBytes(t, "3", "1Gi", 0), want: 0.1875},
		{name: "no requests", pod: podBytes(t, "", "", 0), want: 0},
		{name: "fits nothing", pod: podBytes(t, "64", "1Gi", 0), wantCode: codes.FailedPrecondition, wantInMsg: "fits no priced node group"},
		{name: "not a pod", pod: []byte{0xff, 0xff}, wantCode: codes.InvalidArgument, wantInMsg: "pod_bytes"},
	}
	for _, tc := range tests {
		resp, err := call(r.client.PricingPodPrice, &protos.PricingPodPriceRequest{PodBytes: tc.pod, StartTimestamp: start, EndTimestamp: end})
		if tc.wantCode != codes.OK {
			wantCode(t, tc.name, err, tc.wantCode)
			if err != nil && !strings.Contains(err.Error(), tc.wantInMsg) {
				t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.wantInMsg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !near(resp.GetPrice(), tc.want) {
			t.Errorf("%s: price %v, want %v", tc.name, resp.GetPrice(), tc.want)
		}
	}
}

// A group whose machine type has no price answers FailedPrecondition with
// the fix its provider declares; the priced groups still answer, and pods
// are priced on them.
func TestPricingUnpricedGroup(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	cloud.Types["free"] = providers.MachineType{Name: "free", MilliCPU: 4000, MemoryBytes: 8 << 30, Pods: 110, Arch: "amd64"}
	groups := append(defaultGroups(), autoscaling.GroupSpec{ID: "unpriced", Provider: "fake", MaxSize: 3, MachineType: "free", Zone: "z1"})
	r := newRig(t, cloud, rigOptions{groups: groups})
	start, end := hourAhead()

	_, err := call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{Node: realNode("unpriced", "unpriced-1"), StartTimestamp: start, EndTimestamp: end})
	wantCode(t, "unpriced group", err, codes.FailedPrecondition)
	for _, want := range []string{`"unpriced"`, `"free"`, cloud.PriceFix} {
		if !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("unpriced group: %v, want it to name %s", err, want)
		}
	}
	if _, err := call(r.client.PricingNodePrice, &protos.PricingNodePriceRequest{Node: realNode("g1", "g1-1"), StartTimestamp: start, EndTimestamp: end}); err != nil {
		t.Errorf("priced group beside an unpriced one: %v", err)
	}
	resp, err := call(r.client.PricingPodPrice, &protos.PricingPodPriceRequest{PodBytes: podBytes(t, "1", "1Gi", 0), StartTimestamp: start, EndTimestamp: end})
	if err != nil || !near(resp.GetPrice(), 0.01) {
		t.Errorf("pod price with an unpriced group: %v, %v; want 0.01 from m1", resp.GetPrice(), err)
	}

	if err := r.core.CheckExpanders("price,least-waste"); err == nil || !strings.Contains(err.Error(), "unpriced") {
		t.Errorf("CheckExpanders(price) = %v, want an error naming the unpriced group", err)
	}
	if err := r.core.CheckExpanders("least-waste,most-pods"); err != nil {
		t.Errorf("CheckExpanders(least-waste) = %v, want nil", err)
	}
	if err := r.core.CheckExpanders("cheapest"); err == nil {
		t.Error("CheckExpanders(cheapest) = nil, want an unknown-expander error")
	}
}

// With no priced group at all, a pod has no price either, and the error
// says why.
func TestPricingNoPricedGroup(t *testing.T) {
	t.Parallel()
	cloud := fake.New()
	for k, mt := range cloud.Types {
		mt.PricePerHour = 0
		cloud.Types[k] = mt
	}
	r := newRig(t, cloud, rigOptions{})
	start, end := hourAhead()
	_, err := call(r.client.PricingPodPrice, &protos.PricingPodPriceRequest{PodBytes: podBytes(t, "1", "1Gi", 0), StartTimestamp: start, EndTimestamp: end})
	wantCode(t, "no priced group", err, codes.FailedPrecondition)
	if !strings.Contains(status.Convert(err).Message(), "no node group has a price") {
		t.Errorf("no priced group: %v", err)
	}
}
