package kwok

import (
	"context"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kubeapi"
	"github.com/prebake-dev/prebake/providers/kwok/providerid"
)

// Create implements providers.Provider. It writes the machine record and
// hands the machine to Run's materialiser; the Node appears when the
// simulated boot ends. A retry with the same req.Name returns the existing
// machine, even when its zone is now full.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	rec, err := p.newRecord(req)
	if err != nil {
		return providers.Instance{}, err
	}
	log := p.log.With("group", rec.Group, "instance", rec.Name, "providerID", rec.ProviderID)
	lease, err := rec.lease(p.cluster, p.namespace)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("kwok: create machine %q: %w", rec.Name, err)
	}

	created, err := p.createLease(ctx, rec, lease)
	switch {
	case err != nil:
		return providers.Instance{}, fmt.Errorf("kwok: create machine %q in group %q: %w", rec.Name, rec.Group, err)
	case !created:
		inst, found, err := p.existing(ctx, rec.Name)
		if err != nil {
			return providers.Instance{}, fmt.Errorf("kwok: create machine %q: %w", rec.Name, err)
		}
		if !found {
			return providers.Instance{}, fmt.Errorf("kwok: create machine %q: its record %s/%s was deleted while we read it; retry", rec.Name, p.namespace, rec.Name)
		}
		log.Debug("machine already exists", "state", inst.State)
		return inst, nil
	}
	p.queue.add(bootItem{name: rec.Name, group: rec.Group, due: rec.BootEndsAt})
	log.Info("machine requested", "machineType", rec.MachineType, "zone", rec.Zone,
		"imageKind", rec.ImageKind, "simulatedBoot", rec.bootDuration())
	return providers.Instance{
		ProviderID: rec.ProviderID,
		Name:       rec.Name,
		Group:      rec.Group,
		State:      providers.StateCreating,
		ImageKind:  rec.ImageKind,
		CreatedAt:  rec.RequestedAt,
	}, nil
}

// newRecord checks req and returns the record of the machine it asks for.
func (p *Provider) newRecord(req providers.CreateRequest) (record, error) {
	if _, err := providerid.Parse(providerid.Format(req.Name)); err != nil {
		return record{}, fmt.Errorf("kwok: machine name %q is not a valid Node name: %w", req.Name, err)
	}
	if errs := validation.IsValidLabelValue(req.Name); len(errs) > 0 {
		return record{}, fmt.Errorf("kwok: machine name %q can't be the %s label: %s", req.Name, providers.LabelHostname, strings.Join(errs, "; "))
	}
	if req.Cluster != "" && req.Cluster != p.cluster {
		return record{}, fmt.Errorf("kwok: machine %q is for cluster %q, but this provider owns cluster %q", req.Name, req.Cluster, p.cluster)
	}
	if req.Group == "" {
		return record{}, fmt.Errorf("kwok: machine %q has no group", req.Name)
	}
	if errs := validation.IsValidLabelValue(req.Group); len(errs) > 0 {
		return record{}, fmt.Errorf("kwok: machine %q: group %q is not a valid label value: %s", req.Name, req.Group, strings.Join(errs, "; "))
	}
	if _, err := p.machineType(req.MachineType); err != nil {
		return record{}, fmt.Errorf("%w (machine %q, group %q)", err, req.Name, req.Group)
	}
	kind := req.ImageKind
	boot := p.boot.RuntimeInstall
	switch kind {
	case providers.ImagePrebaked:
		boot = p.boot.Prebaked
	case providers.ImageRuntimeInstall:
	case "":
		kind = providers.ImageRuntimeInstall
	default:
		return record{}, fmt.Errorf("kwok: machine %q: unknown image kind %q; want %q or %q", req.Name, kind, providers.ImagePrebaked, providers.ImageRuntimeInstall)
	}
	taints := providers.CoreTaints(req.NodeTaints)
	if taints == nil {
		taints = []corev1.Taint{}
	}
	labels := req.NodeLabels
	if labels == nil {
		labels = map[string]string{}
	}
	// UTC without a monotonic reading: what Create returns equals what List
	// later reads back from the record.
	now := p.now().UTC().Round(0)
	return record{
		Name:        req.Name,
		ProviderID:  providerid.Format(req.Name),
		Group:       req.Group,
		ImageKind:   kind,
		Image:       req.Image,
		MachineType: req.MachineType,
		Zone:        req.Location,
		Region:      req.NodeLabels[providers.LabelRegion],
		RequestedAt: now,
		BootEndsAt:  now.Add(boot),
		NodeLabels:  labels,
		NodeTaints:  taints,
	}, nil
}

// createLease writes the record. created=false with a nil error means a
// machine of that name already exists. In a zone with a Capacity limit it
// counts the zone's machines first and fails with a *capacityError when the
// zone is full.
func (p *Provider) createLease(ctx context.Context, rec record, lease *coordinationv1.Lease) (created bool, err error) {
	if limit, limited := p.capacity[rec.Zone]; limited {
		p.capacityMu.Lock()
		defer p.capacityMu.Unlock()
		// A retry of a machine that exists must not fail because its
		// own zone is full.
		leases, err := p.listLeases(ctx)
		if err != nil {
			return false, err
		}
		n := 0
		for _, l := range leases {
			if l.Name == rec.Name {
				return false, nil
			}
			if l.Annotations[annotationZone] == rec.Zone {
				n++
			}
		}
		if n >= limit {
			return false, &capacityError{zone: rec.Zone, limit: limit}
		}
	}

	leases := p.client.CoordinationV1().Leases(p.namespace)
	_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		// The namespace is missing: create it and try once more.
		if err := p.ensureNamespace(ctx); err != nil {
			return false, err
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create lease %s/%s: %w", p.namespace, rec.Name, err)
	}
	return true, nil
}

func (p *Provider) ensureNamespace(ctx context.Context) error {
	created, err := kubeapi.EnsureNamespace(ctx, p.client, p.namespace, "machine records")
	if created {
		p.log.Info("created namespace for machine records", "namespace", p.namespace)
	}
	return err
}

// existing returns the machine recorded under name, if any. A machine still
// booting is handed to the materialiser again: harmless if it already is
// there, and it resumes a machine a restarted plugin's Run hasn't listed yet.
func (p *Provider) existing(ctx context.Context, name string) (providers.Instance, bool, error) {
	lease, err := p.client.CoordinationV1().Leases(p.namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return providers.Instance{}, false, nil
	case err != nil:
		return providers.Instance{}, false, fmt.Errorf("get lease %s/%s: %w", p.namespace, name, err)
	}
	if owner := lease.Labels[providers.LabelCluster]; owner != p.cluster {
		return providers.Instance{}, false, fmt.Errorf("lease %s/%s exists but belongs to cluster %q, not %q; pick another machine name", p.namespace, name, owner, p.cluster)
	}
	inst := instanceFromLease(lease)
	if inst.State == providers.StateDeleting {
		return inst, true, nil
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if rec, err := recordFromLease(lease); err == nil {
			p.queue.add(bootItem{name: name, group: rec.Group, due: rec.BootEndsAt})
		}
	case err != nil:
		return providers.Instance{}, false, fmt.Errorf("get node %q: %w", name, err)
	case node.DeletionTimestamp != nil:
		inst.State = providers.StateDeleting
	default:
		inst.State = providers.StateRunning
	}
	return inst, true, nil
}
