package hcloud

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/providerid"
)

// List implements providers.Provider: one paged scan by the cluster label.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	servers, err := p.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{
		ListOpts: hcloud.ListOpts{LabelSelector: providers.LabelCluster + "=" + p.cluster, PerPage: perPage},
	})
	if err != nil {
		return nil, fmt.Errorf("hcloud: list servers of cluster %q: %w", p.cluster, err)
	}
	out := make([]providers.Instance, 0, len(servers))
	for _, s := range servers {
		out = append(out, instance(s))
	}
	return out, nil
}

// instance is the core's view of a server.
func instance(s *hcloud.Server) providers.Instance {
	name := s.Labels[providers.LabelMachine]
	if name == "" {
		name = s.Name
	}
	in := providers.Instance{
		ProviderID: providerid.Format(s.ID),
		Name:       name,
		Group:      s.Labels[providers.LabelGroup],
		State:      state(s.Status),
		ImageKind:  providers.ImageKind(s.Labels[providers.LabelImageKind]),
		Image:      s.Labels[providers.LabelImage],
		CreatedAt:  s.Created,
	}
	if in.ImageKind == "" {
		in.ImageKind = providers.ImageRuntimeInstall
	}
	return in
}

// state maps a server status to the lifecycle CA sees. A server that exists
// in any other status (off, migrating, rebuilding, unknown) is running as
// far as the autoscaler is concerned: whether its node is healthy is CA's
// call, from the Node.
func state(s hcloud.ServerStatus) providers.InstanceState {
	switch s {
	case hcloud.ServerStatusInitializing, hcloud.ServerStatusStarting:
		return providers.StateCreating
	case hcloud.ServerStatusDeleting, hcloud.ServerStatusStopping:
		return providers.StateDeleting
	}
	return providers.StateRunning
}

// Create implements providers.Provider. It returns once the API accepted the
// server; the boot is followed through List.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	if in, found, err := p.byName(ctx, req.Name); err != nil || found {
		return in, err
	}
	kind := req.ImageKind
	if kind == "" {
		kind = providers.ImageRuntimeInstall
	}
	labels := map[string]string{
		providers.LabelCluster:   p.cluster,
		providers.LabelGroup:     req.Group,
		providers.LabelMachine:   req.Name,
		providers.LabelImageKind: string(kind),
	}
	image := &hcloud.Image{Name: p.image}
	if req.Image != "" {
		// A catalog image: Hetzner snapshot ids are numeric and immutable.
		id, err := strconv.ParseInt(req.Image, 10, 64)
		if err != nil {
			return providers.Instance{}, fmt.Errorf("hcloud: machine %q: image %q is not a Hetzner image id: %w", req.Name, req.Image, err)
		}
		image = &hcloud.Image{ID: id}
		labels[providers.LabelImage] = req.Image
	}
	opts := hcloud.ServerCreateOpts{
		Name:           req.Name,
		ServerType:     &hcloud.ServerType{Name: req.MachineType},
		Image:          image,
		Location:       &hcloud.Location{Name: req.Location},
		UserData:       string(req.UserData),
		Labels:         labels,
		Networks:       p.networks,
		Firewalls:      p.fws,
		SSHKeys:        p.sshKeys,
		PlacementGroup: p.pg,
	}
	if req.Location == "" {
		opts.Location = nil
	}
	res, resp, err := p.client.Server.Create(ctx, opts)
	if hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) {
		// An earlier attempt won the race, or its answer was lost: that
		// server is the one.
		if in, found, lerr := p.byName(ctx, req.Name); lerr != nil || found {
			return in, lerr
		}
	}
	if err != nil {
		return providers.Instance{}, fmt.Errorf("hcloud: create server %q (group %q, type %s, location %s): %w",
			req.Name, req.Group, req.MachineType, req.Location, wrapStatus(err, resp))
	}
	in := instance(res.Server)
	// The create answer may omit labels in edge cases; the request's are
	// the truth.
	if in.Group == "" {
		in.Group, in.Name = req.Group, req.Name
	}
	p.log.Info("hcloud server created", "group", req.Group, "instance", req.Name, "providerID", in.ProviderID)
	return in, nil
}

// byName finds our server with this name.
func (p *Provider) byName(ctx context.Context, name string) (providers.Instance, bool, error) {
	s, resp, err := p.client.Server.GetByName(ctx, name)
	if err != nil {
		return providers.Instance{}, false, fmt.Errorf("hcloud: look up server %q: %w", name, wrapStatus(err, resp))
	}
	if s == nil {
		return providers.Instance{}, false, nil
	}
	if s.Labels[providers.LabelCluster] != p.cluster {
		return providers.Instance{}, false, &foreignError{name: name, id: s.ID, labels: maps.Clone(s.Labels)}
	}
	return instance(s), true, nil
}

// foreignError is a server whose name we want but that is not ours.
type foreignError struct {
	name   string
	id     int64
	labels map[string]string
}

func (e *foreignError) Error() string {
	return fmt.Sprintf("hcloud: server %q (id %d) exists but is not owned by this cluster (label %s=%q); rename or delete it, or use another cluster name",
		e.name, e.id, providers.LabelCluster, e.labels[providers.LabelCluster])
}

// Delete implements providers.Provider. A server that is gone, or going, is
// not an error; a server that is not ours is refused.
func (p *Provider) Delete(ctx context.Context, id string) error {
	n, err := providerid.Parse(id)
	if err != nil {
		return err
	}
	s, resp, err := p.client.Server.GetByID(ctx, n)
	if err != nil {
		return fmt.Errorf("hcloud: get server %s: %w", id, wrapStatus(err, resp))
	}
	if s == nil {
		return nil
	}
	if s.Labels[providers.LabelCluster] != p.cluster {
		return fmt.Errorf("hcloud: refusing to delete server %s (%q): it is not owned by cluster %q", id, s.Name, p.cluster)
	}
	if s.Status == hcloud.ServerStatusDeleting {
		return nil
	}
	_, resp, err = p.client.Server.DeleteWithResult(ctx, s)
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hcloud: delete server %s (%q): %w", id, s.Name, wrapStatus(err, resp))
	}
	p.log.Info("hcloud server deleted", "group", s.Labels[providers.LabelGroup], "instance", s.Name, "providerID", id)
	return nil
}
