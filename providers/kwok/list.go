package kwok

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok/providerid"
)

// listPageSize bounds one page of a List call.
const listPageSize = 500

// List implements providers.Provider. A machine with a Node is running; one
// with only its record is still booting (creating); a record or Node being
// deleted is deleting. A Node we own (by its labels and kwok providerID)
// without a record is listed as running, so Delete can clean it up.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	leases, err := p.listLeases(ctx)
	if err != nil {
		return nil, fmt.Errorf("kwok: list machines: %w", err)
	}
	nodes, err := p.listNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("kwok: list machines: %w", err)
	}
	byName := make(map[string]providers.Instance, len(leases))
	for i := range leases {
		inst := instanceFromLease(&leases[i])
		byName[inst.Name] = inst
	}
	for i := range nodes {
		n := &nodes[i]
		if _, err := providerid.Parse(n.Spec.ProviderID); err != nil {
			continue // another provider's node in the same cluster
		}
		inst, ok := byName[n.Name]
		switch {
		case !ok:
			inst = instanceFromNode(n)
		case inst.State == providers.StateDeleting:
		case n.DeletionTimestamp != nil:
			inst.State = providers.StateDeleting
		default:
			inst.State = providers.StateRunning
		}
		byName[n.Name] = inst
	}
	out := make([]providers.Instance, 0, len(byName))
	for _, inst := range byName {
		out = append(out, inst)
	}
	slices.SortFunc(out, func(a, b providers.Instance) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

func (p *Provider) ownedSelector() string {
	return labels.SelectorFromSet(labels.Set{providers.LabelCluster: p.cluster}).String()
}

// listLeases returns every machine record of this cluster, page by page.
func (p *Provider) listLeases(ctx context.Context) ([]coordinationv1.Lease, error) {
	var out []coordinationv1.Lease
	opts := metav1.ListOptions{LabelSelector: p.ownedSelector(), Limit: listPageSize}
	for {
		l, err := p.client.CoordinationV1().Leases(p.namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list leases in %q: %w", p.namespace, err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// listNodes returns every Node labelled with this cluster, page by page.
// Other providers' Nodes carry the label too; callers filter by providerID.
func (p *Provider) listNodes(ctx context.Context) ([]corev1.Node, error) {
	var out []corev1.Node
	opts := metav1.ListOptions{LabelSelector: p.ownedSelector(), Limit: listPageSize}
	for {
		l, err := p.client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}
