package hcloud

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/providerid"
)

// withoutFailed drops the servers whose create_server action failed: they
// are no machines of a group (the core keeps the failed creation and its
// error for CA), and they are deleted. A delete of one that failed before
// is tried again here, until one is accepted; once a List no longer finds
// the server, it is forgotten.
func (p *Provider) withoutFailed(ctx context.Context, servers []*hcloud.Server) []providers.Instance {
	out := make([]providers.Instance, 0, len(servers))
	var retry []*hcloud.Server
	p.failedMu.Lock()
	seen := map[int64]bool{}
	for _, s := range servers {
		if deleting, ok := p.failed[s.ID]; ok {
			seen[s.ID] = true
			if !deleting {
				retry = append(retry, s)
			}
			continue
		}
		out = append(out, p.listed(s, instance(s)))
	}
	for id := range p.failed {
		if !seen[id] {
			delete(p.failed, id) // gone
		}
	}
	p.failedMu.Unlock()
	for _, s := range retry {
		_ = p.cleanUp(ctx, s)
	}
	return out
}

// cleanUp deletes a server whose create failed and records whether the
// delete was accepted; it returns the delete's error.
func (p *Provider) cleanUp(ctx context.Context, s *hcloud.Server) error {
	_, resp, err := p.client.Server.DeleteWithResult(ctx, s)
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		err = nil
	}
	p.failedMu.Lock()
	p.failed[s.ID] = err == nil
	p.failedMu.Unlock()
	if err == nil {
		p.recordDeleted(s, false)
	}
	if err != nil {
		err = wrapStatus(err, resp)
		p.log.Warn("hcloud: deleting a server whose create failed; trying again at the next list", "providerID", providerid.Format(s.ID), "err", err)
	}
	return err
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
		Standby:    standbyOf(s),
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

// Create implements providers.Provider. It returns once the server's
// create_server action has ended; the boot is followed through List.
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
	if req.Standby != "" {
		if err := p.checkStandbyRequest(req); err != nil {
			return providers.Instance{}, err
		}
		ud, pin, err := p.standbyUserData(req)
		if err != nil {
			return providers.Instance{}, err
		}
		opts.UserData = string(ud)
		labels[providers.LabelStandby] = string(req.Standby)
		labels[LabelStandbyHostKey] = pin
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
	// Accepted is not created: the create_server action can still fail,
	// and only waiting for it tells (one poll or a few, see PollInterval).
	// The start_server that follows is left to List.
	if err := p.client.Action.WaitFor(ctx, res.Action); err != nil {
		var ae hcloud.ActionError
		if errors.As(err, &ae) {
			return providers.Instance{}, p.createFailed(ctx, req, res.Server, ae)
		}
		// The answer was lost (a timeout, a 5xx while polling): the
		// server exists, and a retry of Create finds it by name.
		return providers.Instance{}, fmt.Errorf("hcloud: create server %q (group %q, id %d): wait for its create_server action: %w",
			req.Name, req.Group, res.Server.ID, err)
	}
	p.recordCreated(res.Server, req.Name)
	in := instance(res.Server)
	// The create answer may omit labels in edge cases; the request's are
	// the truth.
	if in.Group == "" {
		in.Group, in.Name = req.Group, req.Name
	}
	if req.Standby != "" && in.Standby.State == "" {
		in.Standby = providers.Standby{State: req.Standby, Phase: providers.StandbyWarming}
	}
	p.log.Info("hcloud server created", "group", req.Group, "instance", req.Name, "providerID", in.ProviderID)
	return in, nil
}

// createActionError is a create_server action that ended in error.
type createActionError struct {
	name, group string
	id          int64
	action      hcloud.ActionError
	cleanup     error // our first delete of the server left behind; nil if accepted
}

func (e *createActionError) Error() string {
	msg := fmt.Sprintf("hcloud: create server %q (group %q): its create_server action failed: %s (%s)",
		e.name, e.group, e.action.Message, e.action.Code)
	if e.cleanup != nil {
		msg += fmt.Sprintf("; deleting server %d, left behind, failed too (%v): it is tried again at every list", e.id, e.cleanup)
	}
	return msg
}

// createFailed handles a create_server action that ended in error. The
// server may be left behind, broken (reports of failed creates describe
// servers left off): it is deleted, and List leaves it out from now on, so
// the core keeps the failed creation with its error, which CA fails over
// on, and never adopts the broken server as a machine.
func (p *Provider) createFailed(ctx context.Context, req providers.CreateRequest, s *hcloud.Server, ae hcloud.ActionError) error {
	p.failedMu.Lock()
	p.failed[s.ID] = false // before the delete: a List meanwhile must leave it out
	p.failedMu.Unlock()
	p.recordCreated(s, req.Name)
	e := &createActionError{name: req.Name, group: req.Group, id: s.ID, action: ae}
	e.cleanup = p.cleanUp(ctx, s)
	p.log.Warn("hcloud create_server action failed", "group", req.Group, "instance", req.Name, "providerID", providerid.Format(s.ID),
		"code", ae.Code, "cleanedUp", e.cleanup == nil)
	return e
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
	p.recordCreated(s, name) // a retry's: the inventory may not know it yet
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
		p.recordDeleted(&hcloud.Server{ID: n}, true)
		return nil
	}
	if s.Labels[providers.LabelCluster] != p.cluster {
		return fmt.Errorf("hcloud: refusing to delete server %s (%q): it is not owned by cluster %q", id, s.Name, p.cluster)
	}
	if s.Status == hcloud.ServerStatusDeleting {
		p.recordDeleted(s, false)
		return nil
	}
	_, resp, err = p.client.Server.DeleteWithResult(ctx, s)
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		p.recordDeleted(s, true)
		return nil
	}
	if err != nil {
		return fmt.Errorf("hcloud: delete server %s (%q): %w", id, s.Name, wrapStatus(err, resp))
	}
	p.recordDeleted(s, false)
	p.log.Info("hcloud server deleted", "group", s.Labels[providers.LabelGroup], "instance", s.Name, "providerID", id)
	return nil
}
