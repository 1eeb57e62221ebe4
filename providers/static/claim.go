package static

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kubeapi"
	"github.com/prebake-dev/prebake/providers/static/providerid"
)

// Claim annotations. The claim's labels carry the cluster, group, machine
// name and image kind (providers.Label*).
const (
	annotationPrefix = "static.prebake.dev/"
	// AnnotationProviderID is static://<host>.
	AnnotationProviderID = annotationPrefix + "provider-id"
	// AnnotationPhase is the claim's phase (phase* below).
	AnnotationPhase       = annotationPrefix + "phase"
	annotationRequestedAt = annotationPrefix + "requested-at" // RFC3339Nano
)

// Claim phases.
const (
	// phaseBootstrapping: claimed; the node script has not finished.
	phaseBootstrapping = "bootstrapping"
	// phaseReady: the node script succeeded.
	phaseReady = "ready"
	// phaseReleasing: Delete has begun draining and resetting the machine.
	phaseReleasing = "releasing"
)

// listPageSize bounds one page of a List call.
const listPageSize = 500

// claimLease returns a new claim of m for req.
func (p *Provider) claimLease(m Machine, req providers.CreateRequest, kind providers.ImageKind, at time.Time) *coordinationv1.Lease {
	holder := p.cluster + "/" + req.Name
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.Host,
			Namespace: p.namespace,
			Labels: map[string]string{
				providers.LabelCluster:   p.cluster,
				providers.LabelGroup:     req.Group,
				providers.LabelMachine:   req.Name,
				providers.LabelImageKind: string(kind),
			},
			Annotations: map[string]string{
				AnnotationProviderID:  providerid.Format(m.Host),
				AnnotationPhase:       phaseBootstrapping,
				annotationRequestedAt: at.UTC().Format(time.RFC3339Nano),
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

// instanceFromClaim reads an Instance from a claim of this cluster.
func instanceFromClaim(l *coordinationv1.Lease) providers.Instance {
	inst := providers.Instance{
		ProviderID: providerid.Format(l.Name),
		Name:       l.Labels[providers.LabelMachine],
		Group:      l.Labels[providers.LabelGroup],
		State:      providers.StateCreating,
		ImageKind:  providers.ImageKind(l.Labels[providers.LabelImageKind]),
		CreatedAt:  l.CreationTimestamp.Time,
	}
	if t, err := time.Parse(time.RFC3339Nano, l.Annotations[annotationRequestedAt]); err == nil {
		inst.CreatedAt = t
	}
	switch {
	case l.DeletionTimestamp != nil, l.Annotations[AnnotationPhase] == phaseReleasing:
		inst.State = providers.StateDeleting
	case l.Annotations[AnnotationPhase] == phaseReady:
		inst.State = providers.StateRunning
	}
	return inst
}

func (p *Provider) ownedSelector(extra labels.Set) string {
	set := labels.Set{providers.LabelCluster: p.cluster}
	for k, v := range extra {
		set[k] = v
	}
	return labels.SelectorFromSet(set).String()
}

// listClaims returns the claims in the namespace that match selector, page
// by page. A missing namespace holds no claims.
func (p *Provider) listClaims(ctx context.Context, selector string) ([]coordinationv1.Lease, error) {
	var out []coordinationv1.Lease
	opts := metav1.ListOptions{LabelSelector: selector, Limit: listPageSize}
	for {
		l, err := p.client.CoordinationV1().Leases(p.namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list claims (leases) in namespace %q: %w", p.namespace, err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// claimOf returns this cluster's claim for the machine name the core chose,
// or nil.
func (p *Provider) claimOf(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	ls, err := p.listClaims(ctx, p.ownedSelector(labels.Set{providers.LabelMachine: name}))
	if err != nil {
		return nil, err
	}
	switch len(ls) {
	case 0:
		return nil, nil
	case 1:
		return &ls[0], nil
	}
	hosts := make([]string, 0, len(ls))
	for _, l := range ls {
		hosts = append(hosts, l.Name)
	}
	return nil, fmt.Errorf("machine %q holds %d claims (%v) in namespace %q; delete all but one of those Leases", name, len(ls), hosts, p.namespace)
}

// createClaim creates l. taken=true with a nil error means another claim of
// the machine exists.
func (p *Provider) createClaim(ctx context.Context, l *coordinationv1.Lease) (created *coordinationv1.Lease, taken bool, err error) {
	leases := p.client.CoordinationV1().Leases(p.namespace)
	created, err = leases.Create(ctx, l, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		// The namespace is missing: create it and try once more.
		if err := p.ensureNamespace(ctx); err != nil {
			return nil, false, err
		}
		created, err = leases.Create(ctx, l, metav1.CreateOptions{})
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("create claim (lease) %s/%s: %w", p.namespace, l.Name, err)
	}
	return created, false, nil
}

func (p *Provider) ensureNamespace(ctx context.Context) error {
	created, err := kubeapi.EnsureNamespace(ctx, p.client, p.namespace, "claims")
	if created {
		p.log.Info("created namespace for claims", "namespace", p.namespace)
	}
	return err
}

// setPhase moves the claim l to phase. The update carries l's
// resourceVersion, so a claim changed meanwhile (released, taken over) is a
// conflict, not overwritten.
func (p *Provider) setPhase(ctx context.Context, l *coordinationv1.Lease, phase string) (*coordinationv1.Lease, error) {
	if l.Annotations[AnnotationPhase] == phase {
		return l, nil
	}
	l = l.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationPhase] = phase
	out, err := p.client.CoordinationV1().Leases(p.namespace).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("set claim %s/%s to phase %s: %w", p.namespace, l.Name, phase, err)
	}
	return out, nil
}

// deleteClaim deletes l if it is still the same claim (UID precondition).
func (p *Provider) deleteClaim(ctx context.Context, l *coordinationv1.Lease) error {
	err := p.client.CoordinationV1().Leases(p.namespace).Delete(ctx, l.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &l.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release claim %s/%s: %w", p.namespace, l.Name, err)
	}
	return nil
}
