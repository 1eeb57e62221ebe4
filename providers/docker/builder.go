package docker

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"maps"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

// A builder is a container booted like a machine from the base image with
// the builder's user-data (bootstrap.RenderBuilder with the file report
// transport: install, then seal once cloud-init is done, which writes the
// report to bootstrap.BuildReportPath). It carries no cluster label, so
// List never counts it. BuilderReport reads the report out of the container
// (the engine's archive API, which needs no network path to the builder):
// the docker analogue of Hetzner's SSH and GCE's guest attributes. Snapshot
// halts systemd and commits the container.
var _ imagecatalog.BuildAPI = (*Provider)(nil)

// reportLimit caps the report read from a builder.
const reportLimit = 1 << 20

// BootBuilder implements imagecatalog.BuildAPI: a container named
// spec.Name (after NamePrefix) from spec.BaseImage (else the base image) on
// the network of spec.Location (else DefaultBuilderZone), with the machine
// type's limits when spec names one. One of that name that is a builder is
// returned as it is; another container of that name is an error.
func (p *Provider) BootBuilder(ctx context.Context, spec imagecatalog.BuilderSpec) (imagecatalog.BuilderState, error) {
	name := p.containerName(spec.Name)
	c, err := p.engine.ContainerInspect(ctx, name)
	switch {
	case err == nil && strings.TrimPrefix(c.Name, "/") == name:
		if c.Config == nil || c.Config.Labels[imagecatalog.LabelBuilder] == "" {
			return imagecatalog.BuilderState{}, fmt.Errorf("docker: container %q exists but is no builder (no %s label); remove it (`docker rm -f %s`)", name, imagecatalog.LabelBuilder, name)
		}
		if c.State != nil && c.State.Status == container.StateCreated {
			if err := p.bootAs(ctx, c.ID, name, nocloudSeed(spec.Name, spec.UserData), true); err != nil {
				return imagecatalog.BuilderState{}, err
			}
			return p.Builder(ctx, c.ID)
		}
		return builderState(c), nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return imagecatalog.BuilderState{}, fmt.Errorf("docker: find builder %q: %w", name, err)
	}
	var mt providers.MachineType
	if spec.MachineType != "" {
		if mt, err = p.machineType(spec.MachineType); err != nil {
			return imagecatalog.BuilderState{}, fmt.Errorf("%w (builder %q)", err, spec.Name)
		}
	}
	base := spec.BaseImage
	if base == "" {
		base = p.baseImage
	}
	if err := p.checkImage(ctx, base, ""); err != nil {
		return imagecatalog.BuilderState{}, fmt.Errorf("docker: builder %q: %w", spec.Name, err)
	}
	zone := spec.Location
	if zone == "" {
		zone = DefaultBuilderZone
	}
	if len(spec.Labels) == 0 || spec.Labels[imagecatalog.LabelBuilder] == "" {
		return imagecatalog.BuilderState{}, fmt.Errorf("docker: builder %q has no %s label, by which a leaked builder is found", spec.Name, imagecatalog.LabelBuilder)
	}
	p.netMu.RLock()
	defer p.netMu.RUnlock()
	netID, err := p.ensureNetwork(ctx, zone)
	if err != nil {
		return imagecatalog.BuilderState{}, err
	}
	if err := p.createVolume(ctx, name, spec.Labels); err != nil {
		return imagecatalog.BuilderState{}, err
	}
	cfg, hc, nc := p.nodeContainer(name, spec.Name, base, netID, nil, maps.Clone(spec.Labels), mt)
	resp, err := p.engine.ContainerCreate(ctx, cfg, hc, nc, nil, name)
	if err != nil {
		p.removeVolumeAfterFailure(ctx, name, true)
		return imagecatalog.BuilderState{}, fmt.Errorf("docker: create builder %q (image %s): %w", name, base, err)
	}
	// No kubelet patch: a builder is no node, and what it holds is committed.
	if err := p.bootAs(ctx, resp.ID, name, nocloudSeed(spec.Name, spec.UserData), true); err != nil {
		return imagecatalog.BuilderState{}, err
	}
	p.log.Info("builder created", "instance", spec.Name, "builder", resp.ID, "image", base, "zone", zone)
	return p.Builder(ctx, resp.ID)
}

func builderState(c container.InspectResponse) imagecatalog.BuilderState {
	st := imagecatalog.BuilderState{ID: c.ID}
	if c.State != nil {
		st.Status = c.State.Status
	}
	if c.Config != nil {
		st.Labels = maps.Clone(c.Config.Labels)
	}
	return st
}

// Builder implements imagecatalog.BuildAPI.
func (p *Provider) Builder(ctx context.Context, id string) (imagecatalog.BuilderState, error) {
	c, err := p.engine.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		return imagecatalog.BuilderState{}, fmt.Errorf("docker builder %.12s: %w (removed while building?)", id, imagecatalog.ErrNotFound)
	case err != nil:
		return imagecatalog.BuilderState{}, fmt.Errorf("docker: inspect builder %.12s: %w", id, err)
	}
	return builderState(c), nil
}

// BuilderReport implements imagecatalog.BuildAPI: it reads
// bootstrap.BuildReportPath out of the builder once the seal step has
// written it during this run (a report older than the container's start is
// the base image's, and not yet this builder's). A builder that stopped
// without one is unusable.
func (p *Provider) BuilderReport(ctx context.Context, b imagecatalog.BuilderState) ([]byte, bool, error) {
	c, err := p.engine.ContainerInspect(ctx, b.ID)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, false, fmt.Errorf("docker builder %.12s is gone: %w", b.ID, imagecatalog.ErrBuilderUnusable)
	case err != nil:
		return nil, false, fmt.Errorf("docker: inspect builder %.12s: %w", b.ID, err)
	case c.State == nil:
		return nil, false, fmt.Errorf("docker: inspect builder %.12s: no state in the engine's answer", b.ID)
	}
	switch c.State.Status {
	case container.StateRunning:
	case container.StateCreated, container.StateRestarting:
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("docker builder %.12s (%s) is %s (exit code %d) and wrote no report: `docker logs %s`: %w",
			b.ID, strings.TrimPrefix(c.Name, "/"), c.State.Status, c.State.ExitCode, strings.TrimPrefix(c.Name, "/"), imagecatalog.ErrBuilderUnusable)
	}
	started, err := time.Parse(time.RFC3339Nano, c.State.StartedAt)
	if err != nil {
		return nil, false, fmt.Errorf("docker builder %.12s: start time %q: %w", b.ID, c.State.StartedAt, err)
	}
	rc, _, err := p.engine.CopyFromContainer(ctx, b.ID, bootstrap.BuildReportPath)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("docker builder %.12s: read %s: %w", b.ID, bootstrap.BuildReportPath, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return nil, false, fmt.Errorf("docker builder %.12s: read %s: %w", b.ID, bootstrap.BuildReportPath, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, false, fmt.Errorf("docker builder %.12s: %s is not a regular file: %w", b.ID, bootstrap.BuildReportPath, imagecatalog.ErrBuilderUnusable)
	}
	if hdr.ModTime.Before(started.Truncate(time.Second)) {
		return nil, false, nil // the image's, from an earlier build
	}
	data, err := io.ReadAll(io.LimitReader(tr, reportLimit+1))
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("docker builder %.12s: read %s: %w", b.ID, bootstrap.BuildReportPath, err)
	case len(data) > reportLimit:
		return nil, false, fmt.Errorf("docker builder %.12s: the report is over %d bytes: %w", b.ID, reportLimit, imagecatalog.ErrBuilderUnusable)
	}
	return data, true, nil
}

// Snapshot implements imagecatalog.BuildAPI: systemd halts (the stop
// signal is SIGRTMIN+3), then the container is committed as
// <repository>:<description> with the labels, and the labels' record is
// written. The description is the catalog image's name, and the tag its id.
//
// A commit leaves volumes out, and containerd's root is one
// (baseimage.ContainerdDir): a VM's snapshot would hold its whole disk, so
// the builder's containerd content (the pod images it pulled) is put into
// the image too: copied out of the stopped builder, into a container of the
// first commit, which is committed again under the same tag. The engine fills
// every node's new, empty volume from it.
func (p *Provider) Snapshot(ctx context.Context, builderID, description string, labels map[string]string) (imagecatalog.CloudImage, error) {
	if err := checkID(description); err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("docker: snapshot builder %.12s: %w", builderID, err)
	}
	timeout := int(stopTimeout / time.Second)
	if err := p.engine.ContainerStop(ctx, builderID, container.StopOptions{Timeout: &timeout}); err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("docker: stop builder %.12s: %w", builderID, err)
	}
	change, err := labelChange(labels)
	if err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("docker: snapshot builder %.12s: %w", builderID, err)
	}
	ref := p.imageRef(description)
	commit := container.CommitOptions{Reference: ref, Comment: "prebake image " + description, Changes: []string{change}}
	if _, err := p.engine.ContainerCommit(ctx, builderID, commit); err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("docker: commit builder %.12s as %s: %w", builderID, ref, err)
	}
	if err := p.commitContainerdDir(ctx, builderID, ref, commit); err != nil {
		return imagecatalog.CloudImage{}, err
	}
	// The commit also keeps the builder's own labels (prebake.dev/builder);
	// the record holds exactly the catalog's.
	if err := p.writeRecord(ctx, description, labels); err != nil {
		return imagecatalog.CloudImage{}, err
	}
	p.log.Info("builder committed", "builder", builderID, "image", ref)
	return p.GetImage(ctx, description)
}

// commitContainerdDir puts the builder's containerd root (its volume) into the image ref,
// committed from it: a container of ref that never runs gets the directory's content, and
// is committed as ref. A builder without the directory leaves ref as it is.
func (p *Provider) commitContainerdDir(ctx context.Context, builderID, ref string, commit container.CommitOptions) error {
	rc, _, err := p.engine.CopyFromContainer(ctx, builderID, baseimage.ContainerdDir)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("docker: read %s out of builder %.12s: %w", baseimage.ContainerdDir, builderID, err)
	}
	defer rc.Close()
	tmp, err := p.engine.ContainerCreate(ctx, &container.Config{Image: ref},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return fmt.Errorf("docker: create a container of %s to add %s to: %w", ref, baseimage.ContainerdDir, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if err := p.engine.ContainerRemove(rctx, tmp.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			p.log.Error("snapshot helper container not removed; remove it by hand", "container", tmp.ID, "err", err)
		}
	}()
	if err := p.engine.CopyToContainer(ctx, tmp.ID, path.Dir(baseimage.ContainerdDir), rc, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("docker: copy builder %.12s's %s into %s: %w", builderID, baseimage.ContainerdDir, ref, err)
	}
	if _, err := p.engine.ContainerCommit(ctx, tmp.ID, commit); err != nil {
		return fmt.Errorf("docker: commit %s with %s: %w", ref, baseimage.ContainerdDir, err)
	}
	return nil
}

// DeleteBuilder implements imagecatalog.BuildAPI: the container and its
// volumes go; one already gone is not an error.
func (p *Provider) DeleteBuilder(ctx context.Context, id string) error {
	c, err := p.engine.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("docker: inspect builder %.12s: %w", id, err)
	}
	err = p.engine.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !(cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress")) {
		return fmt.Errorf("docker: delete builder %.12s: %w", id, err)
	}
	return p.removeVolume(ctx, strings.TrimPrefix(c.Name, "/"), true)
}
