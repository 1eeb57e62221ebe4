package standin

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/externalgrpc"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	fakecloud "github.com/prebake-dev/prebake/providers/fake"
)

// noPricing is prebake as it was before pricing was served: the pricing
// RPCs answer Unimplemented.
type noPricing struct{ *externalgrpc.Server }

func (noPricing) PricingNodePrice(context.Context, *protos.PricingNodePriceRequest) (*protos.PricingNodePriceResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Not implemented")
}

func (noPricing) PricingPodPrice(context.Context, *protos.PricingPodPriceRequest) (*protos.PricingPodPriceResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Not implemented")
}

// serveCore serves a real core over the fake cloud (types m1: 2 CPU, 0.02/h;
// gpu: 8 CPU, 0.5/h) with groups "big" (gpu) listed before "small" (m1).
func serveCore(t *testing.T, wrap func(*externalgrpc.Server) protos.CloudProviderServer) *grpc.ClientConn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	core, err := autoscaling.New(ctx, autoscaling.Options{
		Cluster: "test",
		Groups: []autoscaling.GroupSpec{
			{ID: "big", Provider: "fake", MaxSize: 5, MachineType: "gpu", Zone: "z1"},
			{ID: "small", Provider: "fake", MaxSize: 5, MachineType: "m1", Zone: "z1"},
		},
		Providers:       map[string]providers.Provider{"fake": fakecloud.New()},
		RefreshInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.Shutdown(context.Background()) })
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	protos.RegisterCloudProviderServer(srv, wrap(externalgrpc.NewServer(core)))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///prebake", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func pendingPod(name, cpu string) *corev1.Pod {
	p := pod(name, cpu, nil)
	p.CreationTimestamp = metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
	}}}
	return p
}

// One loop of a stand-in with expander over a pending 500m pod, which both
// groups can take on one node.
func loopWith(t *testing.T, conn *grpc.ClientConn, expander string) (LoopResult, *StandIn) {
	t.Helper()
	s, err := New(Options{Conn: conn, Kube: fake.NewClientset(pendingPod("web", "500m")), Namespace: "ns", Expander: expander})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res, s
}

func TestExpanders(t *testing.T) {
	t.Parallel()
	served := func(s *externalgrpc.Server) protos.CloudProviderServer { return s }
	tests := []struct {
		name, expander string
		serve          func(*externalgrpc.Server) protos.CloudProviderServer
		want           string // the group scaled, "" for none
		wantPriceCalls bool
	}{
		// Without a chain the stand-in's own rule ties on pods and nodes and
		// takes the group listed first.
		{name: "default rule", serve: served, want: "big"},
		// The pricier machine wastes more: least-waste also picks small.
		{name: "least-waste", expander: "least-waste", serve: served, want: "small"},
		{name: "price, least-waste", expander: "price,least-waste", serve: served, want: "small", wantPriceCalls: true},
		// What the real CA 1.36.1 did against prebake before pricing was
		// served: every option is skipped, nothing scales.
		{name: "price without pricing", expander: "price,least-waste", serve: func(s *externalgrpc.Server) protos.CloudProviderServer { return noPricing{s} }, want: "", wantPriceCalls: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, s := loopWith(t, serveCore(t, tc.serve), tc.expander)
			got := ""
			if res.ScaleUp != nil {
				got = res.ScaleUp.Group
			}
			if got != tc.want {
				t.Errorf("scaled %q (skipped %v), want %q", got, res.Skipped, tc.want)
			}
			lat := s.RPCLatencies()
			node, pod := len(lat["PricingNodePrice"]), len(lat["PricingPodPrice"])
			if tc.wantPriceCalls {
				// The stabilisation pod, then per option a node and its pod.
				if node != 2 || (pod != 3 && tc.want != "") {
					t.Errorf("price calls: %d node, %d pod; want 2 and 3", node, pod)
				}
			} else if node+pod != 0 {
				t.Errorf("%d price calls without the price expander", node+pod)
			}
			if tc.want == "" {
				for _, g := range []string{"big", "small"} {
					if !strings.Contains(res.Skipped[g], "price") {
						t.Errorf("skipped[%s] = %q, want the price expander's reason", g, res.Skipped[g])
					}
				}
			}
		})
	}
}

func TestParseExpanders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag    string
		want    []string
		wantErr string
	}{
		{flag: "", want: nil},
		{flag: "price,least-waste", want: []string{"price", "least-waste"}},
		{flag: " most-pods , random", want: []string{"most-pods", "random"}},
		{flag: "priority", wantErr: "knows"},
		{flag: "price,price", wantErr: "twice"},
	} {
		got, err := ParseExpanders(tc.flag)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseExpanders(%q) = %v, %v; want an error with %q", tc.flag, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("ParseExpanders(%q) = %v, %v; want %v", tc.flag, got, err, tc.want)
		}
	}
}
