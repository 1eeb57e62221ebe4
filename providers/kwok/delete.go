package kwok

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok/providerid"
)

// Delete implements providers.Provider. It deletes the machine record
// first, then the Node: a record without a Node would be booted again, a
// Node without a record is only listed until the next Delete. Anything
// already gone is not an error. A Lease or Node of that name that isn't
// ours is left alone with a warning: as far as we are concerned, the
// machine is gone.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	name, err := providerid.Parse(providerID)
	if err != nil {
		return fmt.Errorf("kwok: delete: %w", err)
	}
	p.queue.remove(name)
	group, leaseGone, err := p.deleteLease(ctx, name)
	if err != nil {
		return fmt.Errorf("kwok: delete machine %q: %w", name, err)
	}
	nodeGone, err := p.deleteNode(ctx, name)
	if err != nil {
		return fmt.Errorf("kwok: delete machine %q: %w", name, err)
	}
	if leaseGone || nodeGone {
		p.log.Info("machine deleted", "group", group, "instance", name, "providerID", providerID)
	}
	return nil
}

// deleteLease deletes the machine record. changed is false when there was
// nothing to delete; group is the machine's group, for logs.
func (p *Provider) deleteLease(ctx context.Context, name string) (group string, changed bool, err error) {
	leases := p.client.CoordinationV1().Leases(p.namespace)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("get lease %s/%s: %w", p.namespace, name, err)
	}
	group = l.Labels[providers.LabelGroup]
	if owner := l.Labels[providers.LabelCluster]; owner != p.cluster {
		p.log.Warn("not deleting a lease of another cluster", "instance", name, "namespace", p.namespace, "owner", owner)
		return "", false, nil
	}
	if l.DeletionTimestamp != nil {
		return group, false, nil
	}
	err = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID}})
	switch {
	case apierrors.IsNotFound(err):
		return group, false, nil
	case err != nil:
		return group, false, fmt.Errorf("delete lease %s/%s: %w", p.namespace, name, err)
	}
	return group, true, nil
}

// deleteNode deletes the machine's Node if it exists and is ours.
func (p *Provider) deleteNode(ctx context.Context, name string) (changed bool, err error) {
	nodes := p.client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get node %q: %w", name, err)
	}
	if why := p.notOurs(n); why != "" {
		p.log.Warn("not deleting a node that isn't ours", "instance", name, "reason", why)
		return false, nil
	}
	if n.DeletionTimestamp != nil {
		return false, nil
	}
	err = nodes.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("delete node %q: %w", name, err)
	}
	return true, nil
}

// notOurs says why n isn't the Node of our machine of the same name, or ""
// if it is: it must carry our cluster label and the kwok providerID.
func (p *Provider) notOurs(n *corev1.Node) string {
	if owner := n.Labels[providers.LabelCluster]; owner != p.cluster {
		return fmt.Sprintf("it belongs to cluster %q, not %q", owner, p.cluster)
	}
	if got, want := n.Spec.ProviderID, providerid.Format(n.Name); got != want {
		return fmt.Sprintf("its providerID is %q, not %q", got, want)
	}
	return ""
}
