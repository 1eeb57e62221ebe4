package autoscaling

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/prebake-dev/prebake/providers"
)

// ErrNoPrice is returned (wrapped, with the group and the fix) for a group
// whose machine type has no price per hour. It is a FailedPrecondition: CA's
// price expander skips such a group, and scales nothing when every group is
// skipped.
var ErrNoPrice = fmt.Errorf("%w: no price per hour", ErrFailedPrecondition)

// withoutPrice is the way out that every unpriced group has, whatever its
// provider: CA's other expanders need no price.
const withoutPrice = "or drop price from cluster-autoscaler's --expander (and from prebake's --ca-expander)"

// priceFix is what gives g's machine type a price, as g's provider declares
// it (providers.Capabilities.PriceFix).
func (g *group) priceFix() string {
	if fix := g.provider.Capabilities().PriceFix; fix != "" {
		return fix
	}
	return fmt.Sprintf("provider %s declares no source of prices (providers.Capabilities.PriceFix)", g.provider.Name())
}

// hours is the length of [start, end] in hours. CA's price expander asks for
// the hour ahead (now, now+1h).
func hours(start, end time.Time) (float64, error) {
	if end.Before(start) {
		return 0, fmt.Errorf("%w: price window ends (%s) before it starts (%s)", ErrInvalidArgument,
			end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	return end.Sub(start).Hours(), nil
}

// NodePrice is what running node for [start, end] costs: its group's machine
// type price per hour times the hours. The node is found as NodeGroupForNode
// finds it; a scale-from-zero template node carries the group label.
func (c *Core) NodePrice(n Node, start, end time.Time) (float64, error) {
	h, err := hours(start, end)
	if err != nil {
		return 0, err
	}
	info, ok := c.NodeGroupForNode(n)
	if !ok {
		return 0, fmt.Errorf("%w: node %q (providerID %q) belongs to no node group of cluster %q", ErrUnknownGroup, n.Name, n.ProviderID, c.opts.Cluster)
	}
	g := c.groups[info.ID]
	p := g.machineType.PricePerHour
	if p <= 0 {
		return 0, fmt.Errorf("node group %q (machine type %q, location %q): %w: %s; %s", g.spec.ID, g.spec.MachineType, g.spec.Zone, ErrNoPrice, g.priceFix(), withoutPrice)
	}
	return p * h, nil
}

// PodPrice is the theoretical minimum price of running pod for [start, end]
// on a perfectly matching machine, as CA's pricing model defines it: the
// cheapest slice of any priced group's machine type that holds the pod's
// requests. A slice of a machine type is priced by the pod's dominant share
// of it, max(cpu/cpu, memory/memory, gpus/gpus), times the type's price per
// hour. It depends only on the pod and the configured groups, never on the
// option CA asks for, so CA's price expander compares options by what their
// nodes cost against the same pod values (docs/operations.md, "Prices for
// CA's price expander"). A pod without
// requests costs 0 (CA then relies on its stabilisation pod).
func (c *Core) PodPrice(pod *corev1.Pod, start, end time.Time) (float64, error) {
	h, err := hours(start, end)
	if err != nil {
		return 0, err
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	cpu := req.Cpu().MilliValue()
	mem := req.Memory().Value()
	gpus := int64(0)
	if q, ok := req[corev1.ResourceName(gpuResource)]; ok {
		gpus = q.Value()
	}
	best := math.Inf(1)
	unpriced := 0
	for _, id := range c.groupOrder {
		g := c.groups[id]
		mt := g.machineType
		if mt.PricePerHour <= 0 {
			unpriced++
			continue
		}
		share, ok := dominantShare(mt, cpu, mem, gpus)
		if ok {
			best = min(best, share*mt.PricePerHour)
		}
	}
	if math.IsInf(best, 1) {
		if unpriced == len(c.groupOrder) {
			return 0, fmt.Errorf("%w: no node group has a price: %s; %s", ErrNoPrice, strings.Join(c.Expanders().Unpriced, "; "), withoutPrice)
		}
		return 0, fmt.Errorf("%w: pod %s/%s (cpu %dm, memory %d, gpus %d) fits no priced node group's machine type",
			ErrFailedPrecondition, pod.Namespace, pod.Name, cpu, mem, gpus)
	}
	return best * h, nil
}

// gpuResource is the GPU resource name CA's price models read.
const gpuResource = "nvidia.com/gpu"

// dominantShare is the largest fraction of mt that the requests take; ok is
// false when they do not fit one machine of mt.
func dominantShare(mt providers.MachineType, milliCPU, mem, gpus int64) (float64, bool) {
	share := 0.0
	for _, r := range [...]struct{ want, have int64 }{{milliCPU, mt.MilliCPU}, {mem, mt.MemoryBytes}, {gpus, mt.GPUs}} {
		if r.want == 0 {
			continue
		}
		if r.have <= 0 || r.want > r.have {
			return 0, false
		}
		share = max(share, float64(r.want)/float64(r.have))
	}
	return share, true
}

// ExpanderSupport says, for CA's --expander values, whether this core serves
// what each calls. Every expander but price needs only templates; price needs
// a price for every group (CA skips unpriced groups, and scales up nothing
// when all are).
type ExpanderSupport struct {
	// Unpriced lists the groups without a price, each with the fix its
	// provider declares.
	Unpriced []string
}

// Supports reports whether expander can work over this core, and if not, why.
func (s ExpanderSupport) Supports(expander string) error {
	switch expander {
	case "price":
		if len(s.Unpriced) > 0 {
			return fmt.Errorf("expander price: %d node group(s) have no price, so CA skips them: %s; %s", len(s.Unpriced), strings.Join(s.Unpriced, "; "), withoutPrice)
		}
	case "random", "most-pods", "least-waste", "least-nodes", "priority", "grpc":
	default:
		return fmt.Errorf("expander %q is not one CA knows (random, most-pods, least-waste, least-nodes, price, priority, grpc)", expander)
	}
	return nil
}

// Expanders returns what the core's groups support.
func (c *Core) Expanders() ExpanderSupport {
	var s ExpanderSupport
	for _, id := range c.groupOrder {
		g := c.groups[id]
		if g.machineType.PricePerHour <= 0 {
			s.Unpriced = append(s.Unpriced, fmt.Sprintf("%s (machine type %s in %s: %s)", id, g.spec.MachineType, g.spec.Zone, g.priceFix()))
		}
	}
	return s
}

// CheckExpanders fails unless every expander of CA's comma-separated
// --expander value is supported.
func (c *Core) CheckExpanders(flag string) error {
	s := c.Expanders()
	var errs []error
	for _, e := range strings.Split(flag, ",") {
		if e = strings.TrimSpace(e); e != "" {
			errs = append(errs, s.Supports(e))
		}
	}
	return errors.Join(errs...)
}
