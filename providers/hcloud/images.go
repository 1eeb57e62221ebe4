package hcloud

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"golang.org/x/crypto/ssh"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// The provider is the image catalog's Hetzner backend: snapshots are the
// images, their labels and description carry the catalog's labels and name,
// delete protection is real, and builders are servers whose report prebake
// reads over SSH.
var (
	_ imagecatalog.ImageAPI       = (*Provider)(nil)
	_ imagecatalog.BuildAPI       = (*Provider)(nil)
	_ imagecatalog.InstanceLister = (*Provider)(nil)
)

// builderPoll is how often Snapshot reads a builder that is shutting down.
const builderPoll = 2 * time.Second

func imageRef(id string) (*hcloud.Image, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("hcloud image id %q: want the snapshot's numeric id (`hcloud image list -t snapshot`)", id)
	}
	return &hcloud.Image{ID: n}, nil
}

func serverRef(id string) (*hcloud.Server, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("hcloud server id %q is not a number", id)
	}
	return &hcloud.Server{ID: n}, nil
}

func cloudImage(im *hcloud.Image) imagecatalog.CloudImage {
	return imagecatalog.CloudImage{ID: strconv.FormatInt(im.ID, 10), Description: im.Description,
		Labels: maps.Clone(im.Labels), Protected: im.Protection.Delete, Created: im.Created}
}

// ListImages implements imagecatalog.ImageAPI: the project's snapshots
// carrying every label in selector, in one paged scan.
func (p *Provider) ListImages(ctx context.Context, selector map[string]string) ([]imagecatalog.CloudImage, error) {
	var sel []string
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		sel = append(sel, k+"="+selector[k])
	}
	ims, err := p.client.Image.AllWithOpts(ctx, hcloud.ImageListOpts{
		ListOpts: hcloud.ListOpts{LabelSelector: strings.Join(sel, ","), PerPage: perPage},
		Type:     []hcloud.ImageType{hcloud.ImageTypeSnapshot},
	})
	if err != nil {
		return nil, fmt.Errorf("hcloud: list snapshots (%s): %w", strings.Join(sel, ","), err)
	}
	out := make([]imagecatalog.CloudImage, 0, len(ims))
	for _, im := range ims {
		out = append(out, cloudImage(im))
	}
	return out, nil
}

// GetImage implements imagecatalog.ImageGetter.
func (p *Provider) GetImage(ctx context.Context, id string) (imagecatalog.CloudImage, error) {
	ref, err := imageRef(id)
	if err != nil {
		return imagecatalog.CloudImage{}, err
	}
	im, _, err := p.client.Image.GetByID(ctx, ref.ID)
	switch {
	case err != nil:
		return imagecatalog.CloudImage{}, fmt.Errorf("hcloud: get image %s: %w", id, err)
	case im == nil:
		return imagecatalog.CloudImage{}, fmt.Errorf("hcloud image %s: %w", id, imagecatalog.ErrNotFound)
	}
	return cloudImage(im), nil
}

// SetLabels implements imagecatalog.ImageAPI.
func (p *Provider) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	ref, err := imageRef(id)
	if err != nil {
		return err
	}
	if _, _, err := p.client.Image.Update(ctx, ref, hcloud.ImageUpdateOpts{Labels: labels}); err != nil {
		return fmt.Errorf("hcloud: label image %s: %w", id, err)
	}
	return nil
}

// SetDeleteProtection implements imagecatalog.ImageAPI with Hetzner's
// delete protection, and waits until it applies.
func (p *Provider) SetDeleteProtection(ctx context.Context, id string, on bool) error {
	ref, err := imageRef(id)
	if err != nil {
		return err
	}
	a, _, err := p.client.Image.ChangeProtection(ctx, ref, hcloud.ImageChangeProtectionOpts{Delete: hcloud.Ptr(on)})
	if err == nil {
		err = p.client.Action.WaitFor(ctx, a)
	}
	if err != nil {
		return fmt.Errorf("hcloud: set delete protection of image %s to %v: %w", id, on, err)
	}
	return nil
}

// DeleteImage implements imagecatalog.ImageAPI. A protected image is an
// error (gc clears protection first); one already gone is not.
func (p *Provider) DeleteImage(ctx context.Context, id string) error {
	ref, err := imageRef(id)
	if err != nil {
		return err
	}
	if _, err := p.client.Image.Delete(ctx, ref); err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return fmt.Errorf("hcloud: delete image %s: %w", id, err)
	}
	return nil
}

// ListInstances implements imagecatalog.InstanceLister: every server of the
// cluster and the image it booted from, as Hetzner reports it (the image
// label the core writes is used when the API omits it).
func (p *Provider) ListInstances(ctx context.Context) ([]imagecatalog.Instance, error) {
	servers, err := p.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{
		ListOpts: hcloud.ListOpts{LabelSelector: providers.LabelCluster + "=" + p.cluster, PerPage: perPage},
	})
	if err != nil {
		return nil, fmt.Errorf("hcloud: list servers of cluster %q: %w", p.cluster, err)
	}
	out := make([]imagecatalog.Instance, 0, len(servers))
	for _, s := range servers {
		in := imagecatalog.Instance{ID: strconv.FormatInt(s.ID, 10), Image: s.Labels[providers.LabelImage]}
		if s.Image != nil && s.Image.ID != 0 {
			in.Image = strconv.FormatInt(s.Image.ID, 10)
		}
		out = append(out, in)
	}
	return out, nil
}

func builderState(s *hcloud.Server) imagecatalog.BuilderState {
	st := imagecatalog.BuilderState{ID: strconv.FormatInt(s.ID, 10), Status: string(s.Status), Labels: maps.Clone(s.Labels)}
	if ip := s.PublicNet.IPv4.IP; ip != nil && !ip.IsUnspecified() {
		st.Address = ip.String()
	}
	return st
}

// BootBuilder implements imagecatalog.BuildAPI: a server from the base
// image (a name such as ubuntu-24.04, or a numeric id) with the user-data
// and SSH access for prebake alone (see BuilderReport). It joins none of the
// cluster's networks and carries no cluster label, so the autoscaler never
// counts it. A builder of the same name that this process did not boot (one
// left by an earlier run, whose keys died with it) is deleted and booted
// anew: nothing could log in to it.
func (p *Provider) BootBuilder(ctx context.Context, spec imagecatalog.BuilderSpec) (imagecatalog.BuilderState, error) {
	if s, _, err := p.client.Server.GetByName(ctx, spec.Name); err != nil {
		return imagecatalog.BuilderState{}, fmt.Errorf("hcloud: find builder %q: %w", spec.Name, err)
	} else if s != nil {
		id := strconv.FormatInt(s.ID, 10)
		if _, ok := p.builderAccess(id); ok {
			return builderState(s), nil
		}
		p.log.Warn("hcloud builder left by an earlier run: its SSH keys are gone, replacing it", "builder", s.ID, "instance", spec.Name)
		// Its name is free again once the delete is done.
		res, _, err := p.client.Server.DeleteWithResult(ctx, s)
		if err == nil && res.Action != nil {
			err = p.client.Action.WaitFor(ctx, res.Action)
		}
		if err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
			return imagecatalog.BuilderState{}, fmt.Errorf("hcloud: delete builder %s left by an earlier run (delete it by hand): %w", id, err)
		}
	}
	access, cfg, err := newBuilderAccess(p.now())
	if err != nil {
		return imagecatalog.BuilderState{}, fmt.Errorf("hcloud builder %q: %w", spec.Name, err)
	}
	userData, err := bootstrap.WithSSHAccess(spec.UserData, cfg)
	if err != nil {
		return imagecatalog.BuilderState{}, fmt.Errorf("hcloud builder %q: %w", spec.Name, err)
	}
	img := &hcloud.Image{Name: spec.BaseImage}
	if n, err := strconv.ParseInt(spec.BaseImage, 10, 64); err == nil {
		img = &hcloud.Image{ID: n}
	}
	opts := hcloud.ServerCreateOpts{
		Name: spec.Name, ServerType: &hcloud.ServerType{Name: spec.MachineType}, Image: img,
		UserData: string(userData), Labels: spec.Labels, SSHKeys: p.sshKeys, Firewalls: p.fws,
	}
	if spec.Location != "" {
		opts.Location = &hcloud.Location{Name: spec.Location}
	}
	res, resp, err := p.client.Server.Create(ctx, opts)
	if err != nil {
		return imagecatalog.BuilderState{}, fmt.Errorf("hcloud: create builder %q (type %s, image %s): %w",
			spec.Name, spec.MachineType, spec.BaseImage, wrapStatus(err, resp))
	}
	st := builderState(res.Server)
	p.buildersMu.Lock()
	p.builders[st.ID] = access
	p.buildersMu.Unlock()
	p.log.Info("hcloud builder created", "instance", spec.Name, "builder", res.Server.ID, "hostKey", ssh.FingerprintSHA256(access.hostKey))
	return st, nil
}

// Builder implements imagecatalog.BuildAPI.
func (p *Provider) Builder(ctx context.Context, id string) (imagecatalog.BuilderState, error) {
	ref, err := serverRef(id)
	if err != nil {
		return imagecatalog.BuilderState{}, err
	}
	s, _, err := p.client.Server.GetByID(ctx, ref.ID)
	switch {
	case err != nil:
		return imagecatalog.BuilderState{}, fmt.Errorf("hcloud: get builder %s: %w", id, err)
	case s == nil:
		return imagecatalog.BuilderState{}, fmt.Errorf("hcloud builder %s: %w (deleted while building?)", id, imagecatalog.ErrNotFound)
	}
	return builderState(s), nil
}

// Snapshot implements imagecatalog.BuildAPI: a graceful shutdown (so the
// disk is consistent), then create_image of type snapshot, waiting until the
// image is available.
func (p *Provider) Snapshot(ctx context.Context, builderID, description string, labels map[string]string) (imagecatalog.CloudImage, error) {
	ref, err := serverRef(builderID)
	if err != nil {
		return imagecatalog.CloudImage{}, err
	}
	a, _, err := p.client.Server.Shutdown(ctx, ref)
	if err == nil {
		err = p.client.Action.WaitFor(ctx, a)
	}
	if err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("hcloud: shut builder %s down: %w", builderID, err)
	}
	// The shutdown action ends when the signal is sent; the server is off
	// a little later.
	for {
		s, _, err := p.client.Server.GetByID(ctx, ref.ID)
		if err != nil {
			return imagecatalog.CloudImage{}, fmt.Errorf("hcloud: get builder %s: %w", builderID, err)
		}
		if s == nil {
			return imagecatalog.CloudImage{}, fmt.Errorf("hcloud builder %s: %w while shutting down", builderID, imagecatalog.ErrNotFound)
		}
		if s.Status == hcloud.ServerStatusOff {
			break
		}
		select {
		case <-ctx.Done():
			return imagecatalog.CloudImage{}, fmt.Errorf("hcloud: builder %s did not power off (status %s): %w", builderID, s.Status, ctx.Err())
		case <-time.After(builderPoll):
		}
	}
	res, _, err := p.client.Server.CreateImage(ctx, ref, &hcloud.ServerCreateImageOpts{
		Type: hcloud.ImageTypeSnapshot, Description: hcloud.Ptr(description), Labels: labels})
	if err == nil {
		err = p.client.Action.WaitFor(ctx, res.Action)
	}
	if err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("hcloud: snapshot builder %s: %w", builderID, err)
	}
	return p.GetImage(ctx, strconv.FormatInt(res.Image.ID, 10))
}

// DeleteBuilder implements imagecatalog.BuildAPI.
func (p *Provider) DeleteBuilder(ctx context.Context, id string) error {
	ref, err := serverRef(id)
	if err != nil {
		return err
	}
	if _, _, err := p.client.Server.DeleteWithResult(ctx, ref); err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return fmt.Errorf("hcloud: delete builder %s: %w", id, err)
	}
	p.buildersMu.Lock()
	delete(p.builders, id)
	p.buildersMu.Unlock()
	return nil
}
