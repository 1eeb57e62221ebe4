package standin

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// simNode is a node in the scale-up simulation: a real Ready node with its free room, an
// upcoming node of a group, or a new node from a group's template.
type simNode struct {
	name   string
	labels map[string]string
	taints []corev1.Taint
	free   corev1.ResourceList
}

// groupInput is what the planner knows of one node group in this loop.
type groupInput struct {
	ID       string
	Template *corev1.Node // nil: no template, the group can't be scaled from it
	Target   int
	Max      int
	// Upcoming is target minus registered Ready nodes minus failed creations: nodes that
	// will come and whose room pending pods may count on.
	Upcoming int
	// Skip says why the group may not grow this loop ("" = it may): backoff, max size.
	Skip string
}

// option is one group's answer to the pending pods.
type option struct {
	Group string
	// Nodes holds, per new node, the pods placed on it.
	Nodes [][]*corev1.Pod
	Pods  int
}

// plan is the outcome of one simulation.
type plan struct {
	// Absorbed are pending pods that fit free room on Ready or upcoming nodes.
	Absorbed []*corev1.Pod
	// Remaining pods need new nodes.
	Remaining []*corev1.Pod
	// Options are the groups' answers to the remaining pods, in group order.
	Options []option
	// Best is the option the default rule picks (most pods, then fewest
	// nodes, then the group listed first); nil when no group can take any
	// remaining pod. A configured expander chain picks among Options instead.
	Best *option
	// Skipped maps a group to why it was not considered.
	Skipped map[string]string
}

// planScaleUp is the stand-in's scale-up decision, a pure function of its inputs: pods that
// fit existing or upcoming room are dropped, then each group binpacks the rest first-fit onto
// new copies of its template, up to its max size. The option placing the most pods wins; ties
// go to fewer nodes, then to the group listed first.
func planScaleUp(pending []*corev1.Pod, existing []simNode, groups []groupInput) plan {
	p := plan{Skipped: map[string]string{}}
	nodes := make([]*simNode, 0, len(existing))
	for i := range existing {
		n := existing[i]
		n.free = n.free.DeepCopy()
		nodes = append(nodes, &n)
	}
	for _, g := range groups {
		if g.Template == nil {
			continue
		}
		for i := 0; i < g.Upcoming; i++ {
			nodes = append(nodes, templateNode(g.Template, g.ID+"-upcoming"))
		}
	}
	for _, pod := range pending {
		if placeFirstFit(pod, nodes) {
			p.Absorbed = append(p.Absorbed, pod)
		} else {
			p.Remaining = append(p.Remaining, pod)
		}
	}
	if len(p.Remaining) == 0 {
		return p
	}
	for _, g := range groups {
		switch {
		case g.Skip != "":
			p.Skipped[g.ID] = g.Skip
			continue
		case g.Template == nil:
			p.Skipped[g.ID] = "no template"
			continue
		case g.Target >= g.Max:
			p.Skipped[g.ID] = "at max size"
			continue
		}
		o := binpackGroup(g, p.Remaining)
		if o.Pods == 0 {
			p.Skipped[g.ID] = "no pending pod fits its template"
			continue
		}
		p.Options = append(p.Options, o)
	}
	for i := range p.Options {
		if p.Best == nil || better(p.Options[i], *p.Best) {
			p.Best = &p.Options[i]
		}
	}
	return p
}

// better reports whether a beats b; b was listed earlier, so a tie keeps b.
func better(a, b option) bool {
	if a.Pods != b.Pods {
		return a.Pods > b.Pods
	}
	return len(a.Nodes) < len(b.Nodes)
}

func binpackGroup(g groupInput, pods []*corev1.Pod) option {
	o := option{Group: g.ID}
	room := g.Max - g.Target
	var nodes []*simNode
	for _, pod := range pods {
		if !fits(pod, templateNode(g.Template, "")) {
			continue
		}
		idx := firstFit(pod, nodes)
		if idx < 0 {
			if len(nodes) >= room {
				continue
			}
			nodes = append(nodes, templateNode(g.Template, g.ID+"-new"))
			o.Nodes = append(o.Nodes, nil)
			idx = len(nodes) - 1
		}
		take(pod, nodes[idx])
		o.Nodes[idx] = append(o.Nodes[idx], pod)
		o.Pods++
	}
	return o
}

func templateNode(t *corev1.Node, name string) *simNode {
	return &simNode{name: name, labels: t.Labels, taints: t.Spec.Taints, free: t.Status.Allocatable.DeepCopy()}
}

func placeFirstFit(pod *corev1.Pod, nodes []*simNode) bool {
	i := firstFit(pod, nodes)
	if i < 0 {
		return false
	}
	take(pod, nodes[i])
	return true
}

func firstFit(pod *corev1.Pod, nodes []*simNode) int {
	return slices.IndexFunc(nodes, func(n *simNode) bool { return fits(pod, n) })
}

// fits reports whether pod may run on n: its nodeSelector matches, it tolerates every
// NoSchedule and NoExecute taint, and its requests (plus one pod slot) fit n's free room.
func fits(pod *corev1.Pod, n *simNode) bool {
	if len(pod.Spec.NodeSelector) > 0 && !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(n.labels)) {
		return false
	}
	for i := range n.taints {
		t := &n.taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, t) }) {
			return false
		}
	}
	for name, want := range podRequests(pod) {
		if want.IsZero() {
			continue
		}
		have, ok := n.free[name]
		if !ok || have.Cmp(want) < 0 {
			return false
		}
	}
	return true
}

// tolerates is core/v1 Toleration.ToleratesTaint without its logger argument.
func tolerates(tol corev1.Toleration, t *corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != t.Key && !(tol.Key == "" && tol.Operator == corev1.TolerationOpExists) {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Value == t.Value
	}
	return false
}

func take(pod *corev1.Pod, n *simNode) {
	for name, q := range podRequests(pod) {
		have := n.free[name]
		have.Sub(q)
		n.free[name] = have
	}
}

// podRequests is what the scheduler reserves for pod: the sum of its containers' requests or
// the largest init container's, whichever is larger per resource, plus overhead and one pod
// slot.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range pod.Spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	for _, c := range pod.Spec.InitContainers {
		for name, q := range c.Resources.Requests {
			if cur, ok := out[name]; !ok || q.Cmp(cur) > 0 {
				out[name] = q.DeepCopy()
			}
		}
	}
	for name, q := range pod.Spec.Overhead {
		sum := out[name]
		sum.Add(q)
		out[name] = sum
	}
	out[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	return out
}

// nodeFree is n's allocatable less the requests of the pods bound to it.
func nodeFree(n *corev1.Node, bound []*corev1.Pod) corev1.ResourceList {
	free := n.Status.Allocatable.DeepCopy()
	for _, pod := range bound {
		for name, q := range podRequests(pod) {
			have := free[name]
			have.Sub(q)
			free[name] = have
		}
	}
	return free
}

// sortPods orders pods oldest first, then by namespace and name, as CA's equivalence
// grouping roughly does, so decisions are reproducible.
func sortPods(pods []*corev1.Pod) {
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}
