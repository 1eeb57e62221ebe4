package standin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
)

// The expanders the stand-in knows, by CA's --expander names. CA's chain
// (expander/factory in kubernetes/autoscaler's cluster-autoscaler) applies
// them in order, stops as soon as one option is left, and picks at random
// among what remains; the stand-in picks the group listed first instead, so
// runs repeat.
var knownExpanders = []string{"price", "least-waste", "most-pods", "least-nodes", "random"}

// ParseExpanders checks a CA --expander value ("price,least-waste") and
// returns its names. An empty value is nil: the stand-in's default rule.
func ParseExpanders(flag string) ([]string, error) {
	if strings.TrimSpace(flag) == "" {
		return nil, nil
	}
	var out []string
	for _, e := range strings.Split(flag, ",") {
		e = strings.TrimSpace(e)
		if !slices.Contains(knownExpanders, e) {
			return nil, fmt.Errorf("expander %q: the stand-in knows %s (CA's priority and grpc need a ConfigMap or a server of their own)", e, strings.Join(knownExpanders, ", "))
		}
		if slices.Contains(out, e) {
			return nil, fmt.Errorf("expander %q is named twice (CA refuses that too)", e)
		}
		out = append(out, e)
	}
	return out, nil
}

// stabilizationPod is the pod CA's price expander prices first (0.5 CPU,
// 500 MiB) to steady the node/pod price ratio.
func stabilizationPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "stabilize"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(500, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(500<<20, resource.DecimalSI),
		}}}}},
	}
}

// expand runs the configured chain over the loop's options. It returns the
// chosen option (nil when the chain drops them all, as CA's price expander
// does when no option can be priced) and why options were dropped.
func (s *StandIn) expand(ctx context.Context, opts []option, templates map[string]*corev1.Node) (*option, map[string]string) {
	dropped := map[string]string{}
	left := slices.Clone(opts)
	for _, name := range s.expanders {
		switch name {
		case "price":
			left = s.priceFilter(ctx, left, templates, dropped)
		case "least-waste":
			left = keepBest(left, func(o option) float64 { return waste(o, templates[o.Group]) }, true)
		case "most-pods":
			left = keepBest(left, func(o option) float64 { return float64(o.Pods) }, false)
		case "least-nodes":
			left = keepBest(left, func(o option) float64 { return float64(len(o.Nodes)) }, true)
		case "random":
			left = left[:min(len(left), 1)]
		}
		if len(left) <= 1 {
			break
		}
	}
	if len(left) == 0 {
		return nil, dropped
	}
	return &left[0], dropped
}

// keepBest keeps the options whose score is the lowest (or highest).
func keepBest(opts []option, score func(option) float64, lowest bool) []option {
	var out []option
	var best float64
	for _, o := range opts {
		v := score(o)
		switch {
		case len(out) == 0 || (lowest && v < best) || (!lowest && v > best):
			out, best = []option{o}, v
		case v == best:
			out = append(out, o)
		}
	}
	return out
}

// waste is CA's least-waste score: the unrequested fraction of the new
// nodes' CPU plus that of their memory, from the template's capacity.
func waste(o option, t *corev1.Node) float64 {
	if t == nil || len(o.Nodes) == 0 {
		return 2
	}
	var cpu, mem resource.Quantity
	for _, pods := range o.Nodes {
		for _, p := range pods {
			r := podRequests(p)
			cpu.Add(r[corev1.ResourceCPU])
			mem.Add(r[corev1.ResourceMemory])
		}
	}
	capCPU, capMem := t.Status.Capacity[corev1.ResourceCPU], t.Status.Capacity[corev1.ResourceMemory]
	availCPU := float64(capCPU.MilliValue()) * float64(len(o.Nodes))
	availMem := float64(capMem.Value()) * float64(len(o.Nodes))
	return (availCPU-float64(cpu.MilliValue()))/availCPU + (availMem-float64(mem.Value()))/availMem
}

// priceFilter makes the price expander's calls, as CA 1.36's
// expander/price does: PricingPodPrice for the stabilisation pod (a failure
// only drops the stabilisation), then per option PricingNodePrice for its
// template node and PricingPodPrice for each of its pods; an option with a
// failed call is skipped. The lowest (node price × nodes + stab) / (pod
// prices + stab) wins. CA also weighs each option by how far its node shape
// is from the cluster's preferred node; the stand-in leaves that out.
func (s *StandIn) priceFilter(ctx context.Context, opts []option, templates map[string]*corev1.Node, dropped map[string]string) []option {
	now := time.Now()
	start, end := timestamppb.New(now), timestamppb.New(now.Add(time.Hour))
	stab, err := s.podPrice(ctx, stabilizationPod(), start, end)
	if err != nil {
		s.log.Warn("price expander: no price for the stabilisation pod; going on without it", "err", err)
		stab = 0
	}
	var ok []option
	score := map[string]float64{}
	for _, o := range opts {
		t := templates[o.Group]
		if t == nil {
			dropped[o.Group] = "price: no template"
			continue
		}
		// CA prices the template node it built from TemplateNodeInfo: a
		// made-up name, the template's labels.
		node := &protos.ExternalGrpcNode{Name: fmt.Sprintf("template-node-for-%s-%d", o.Group, now.UnixNano()%100000), Labels: t.Labels, Annotations: t.Annotations}
		np, err := call(ctx, s, s.client.PricingNodePrice, &protos.PricingNodePriceRequest{Node: node, StartTimestamp: start, EndTimestamp: end})
		if err != nil {
			dropped[o.Group] = fmt.Sprintf("price: node price: %v", err)
			s.log.Warn("price expander: failed to calculate node price; skipping the group", "group", o.Group, "err", err)
			continue
		}
		podsPrice, err := s.podsPrice(ctx, o, start, end)
		if err != nil {
			dropped[o.Group] = "price: " + err.Error()
			s.log.Warn("price expander: failed to calculate a pod price; skipping the group", "group", o.Group, "err", err)
			continue
		}
		ok = append(ok, o)
		score[o.Group] = (np.GetPrice()*float64(len(o.Nodes)) + stab) / (podsPrice + stab)
	}
	return keepBest(ok, func(o option) float64 { return score[o.Group] }, true)
}

// podsPrice sums PricingPodPrice over the option's pods; the first failure
// fails it.
func (s *StandIn) podsPrice(ctx context.Context, o option, start, end *timestamppb.Timestamp) (float64, error) {
	sum := 0.0
	for _, pods := range o.Nodes {
		for _, p := range pods {
			pp, err := s.podPrice(ctx, p, start, end)
			if err != nil {
				return 0, fmt.Errorf("pod %s price: %w", podKey(p), err)
			}
			sum += pp
		}
	}
	return sum, nil
}

func (s *StandIn) podPrice(ctx context.Context, p *corev1.Pod, start, end *timestamppb.Timestamp) (float64, error) {
	b, err := p.Marshal()
	if err != nil {
		return 0, err
	}
	resp, err := call(ctx, s, s.client.PricingPodPrice, &protos.PricingPodPriceRequest{PodBytes: b, StartTimestamp: start, EndTimestamp: end})
	if err != nil {
		return 0, err
	}
	return resp.GetPrice(), nil
}
