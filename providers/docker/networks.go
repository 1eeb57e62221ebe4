package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/prebake-dev/prebake/providers"
)

// A zone is a Docker network the provider creates on first use and owns:
// a bridge named prebake-<cluster>-<zone>, labelled with the cluster and
// the zone. Cleanup removes the empty ones.

// networkName is the network of zone.
func (p *Provider) networkName(zone string) string {
	return "prebake-" + p.cluster + "-" + zone
}

func (p *Provider) networkLabels(zone string) map[string]string {
	return map[string]string{providers.LabelCluster: p.cluster, providers.LabelZone: zone}
}

// networkConflictError is a network with our zone's name that we don't own.
type networkConflictError struct {
	name, zone string
	labels     map[string]string
}

func (e *networkConflictError) Error() string {
	return fmt.Sprintf("docker: network %q exists but is not the zone network of cluster %q, zone %q (labels %s=%q, %s=%q); remove it (`docker network rm %s`) or use another cluster name or zone",
		e.name, e.labels[providers.LabelCluster], e.zone, providers.LabelCluster, e.labels[providers.LabelCluster], providers.LabelZone, e.labels[providers.LabelZone], e.name)
}

// ensureNetwork returns the id of zone's network, creating it when missing.
// The caller holds netMu for reading. Creates are serialised in this
// process: the engine's duplicate-name check is best effort, and
// concurrent creates of one name make several networks. Should another
// process have raced us to that, the oldest is the zone's (containers join
// it by id), and Cleanup removes the others once they are empty.
func (p *Provider) ensureNetwork(ctx context.Context, zone string) (string, error) {
	p.netCreateMu.Lock()
	defer p.netCreateMu.Unlock()
	name := p.networkName(zone)
	if id, err := p.findNetwork(ctx, name, zone); err != nil || id != "" {
		return id, err
	}
	_, err := p.engine.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: p.networkLabels(zone)})
	switch {
	case err == nil:
		p.log.Info("zone network created", "zone", zone, "network", name)
	case !cerrdefs.IsConflict(err): // a conflict: another process made it first
		return "", fmt.Errorf("docker: create zone network %q: %w", name, err)
	}
	// The oldest of that name is the zone's, should another process have
	// made one too.
	id, err := p.findNetwork(ctx, name, zone)
	if err == nil && id == "" {
		err = fmt.Errorf("docker: zone network %q was gone as soon as it was made (removed by hand?); retry", name)
	}
	return id, err
}

// findNetwork returns the id of the oldest network called name, "" when
// there is none; one that is not zone's network of the cluster is a
// *networkConflictError.
func (p *Provider) findNetwork(ctx context.Context, name, zone string) (string, error) {
	nets, err := p.engine.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", name))})
	if err != nil {
		return "", fmt.Errorf("docker: find zone network %q: %w", name, err)
	}
	var found *network.Summary
	for i, n := range nets {
		if n.Name != name { // the filter matches parts of names too
			continue
		}
		if n.Labels[providers.LabelCluster] != p.cluster || n.Labels[providers.LabelZone] != zone {
			return "", &networkConflictError{name: name, zone: zone, labels: n.Labels}
		}
		if found == nil || n.Created.Before(found.Created) || n.Created.Equal(found.Created) && n.ID < found.ID {
			found = &nets[i]
		}
	}
	if found == nil {
		return "", nil
	}
	return found.ID, nil
}

// Cleanup removes what the provider owns and no longer uses: each zone
// network of the cluster that no container is attached to, containerd
// volumes of the cluster whose container is gone, and label records
// (images.go) whose image is gone. It returns what it removed. It
// never removes a network that a Create of this process is about to use,
// and a later Create makes the network again, so it is safe at any time:
// at shutdown, after a test, or now and then.
func (p *Provider) Cleanup(ctx context.Context) (removed []string, err error) {
	p.netMu.Lock()
	defer p.netMu.Unlock()
	nets, err := p.engine.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", providers.LabelCluster+"="+p.cluster))})
	if err != nil {
		return nil, fmt.Errorf("docker: list the cluster's networks: %w", err)
	}
	var errs []error
	for _, n := range nets {
		if n.Labels[providers.LabelZone] == "" {
			continue
		}
		// The list does not say which containers are attached; inspect does.
		full, err := p.engine.NetworkInspect(ctx, n.ID, network.InspectOptions{})
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("docker: inspect network %q: %w", n.Name, err))
			continue
		}
		if len(full.Containers) > 0 {
			continue
		}
		// A created container that never started is not attached yet.
		users, err := p.engine.ContainerList(ctx, containerListOptions(filters.Arg("network", n.ID)))
		if err != nil {
			errs = append(errs, fmt.Errorf("docker: list containers of network %q: %w", n.Name, err))
			continue
		}
		if len(users) > 0 {
			continue
		}
		switch err := p.engine.NetworkRemove(ctx, n.ID); {
		case err == nil:
			p.log.Info("zone network removed", "zone", n.Labels[providers.LabelZone], "network", n.Name)
			removed = append(removed, "network "+n.Name)
		case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
			// Gone already, or in use after all ("has active endpoints").
		default:
			errs = append(errs, fmt.Errorf("docker: remove network %q: %w", n.Name, err))
		}
	}
	vols, err := p.orphanVolumes(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	removed = append(removed, vols...)
	standbys, err := p.orphanStandbyRecords(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	removed = append(removed, standbys...)
	recs, err := p.orphanRecords(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range recs {
		if err := p.removeImage(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("docker: remove label record %s: %w", r, err))
			continue
		}
		removed = append(removed, "label record "+r)
	}
	return removed, errors.Join(errs...)
}
