package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/providerid"
)

// removeTimeout bounds the removal of a container whose boot failed, which
// runs even when the Create's context has ended.
const removeTimeout = time.Minute

func containerListOptions(f ...filters.KeyValuePair) container.ListOptions {
	return container.ListOptions{All: true, Filters: filters.NewArgs(f...)}
}

func (p *Provider) clusterFilter() filters.KeyValuePair {
	return filters.Arg("label", providers.LabelCluster+"="+p.cluster)
}

// List implements providers.Provider: one scan of the engine's containers
// by the cluster label, and one of the standby records (standby.go); a
// running standby's status file is read to tell warming from prepared.
// Builders carry no cluster label, so they are never listed.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	cs, err := p.engine.ContainerList(ctx, containerListOptions(p.clusterFilter()))
	if err != nil {
		return nil, fmt.Errorf("docker: list containers of cluster %q: %w", p.cluster, err)
	}
	// Read after the containers: a Resume between the two reads shows its
	// machine without a marker, never a taken machine as a standby.
	recs, err := p.standbyRecords(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]providers.Instance, 0, len(cs))
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		in := instance(name, c.Labels, c.State, c.Status, time.Unix(c.Created, 0))
		if rest, ok := recs[name]; ok {
			in = p.standbyInstance(ctx, in, name, c.State, rest)
		}
		out = append(out, in)
	}
	return out, nil
}

// instance is the core's view of a container. status is the engine's
// words for its state ("Exited (137) 2 minutes ago").
func instance(name string, labels map[string]string, state, status string, created time.Time) providers.Instance {
	in := providers.Instance{
		ProviderID: providerid.Format(name),
		Name:       labels[providers.LabelMachine],
		Group:      labels[providers.LabelGroup],
		Image:      labels[providers.LabelImage],
		ImageKind:  providers.ImageKind(labels[providers.LabelImageKind]),
		CreatedAt:  created.UTC(),
	}
	if in.Name == "" {
		in.Name = name
	}
	if in.ImageKind == "" {
		in.ImageKind = providers.ImageRuntimeInstall
	}
	switch state {
	case container.StateCreated:
		in.State = providers.StateCreating
	case container.StateRemoving:
		in.State = providers.StateDeleting
	case container.StateExited, container.StateDead:
		// A VM that halted: it won't come back by itself.
		in.State = providers.StateRunning
		in.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: "container_exited",
			Message: fmt.Sprintf("container %s stopped (%s); its machine is gone: delete it", name, status)}
	default: // running, restarting, paused
		in.State = providers.StateRunning
	}
	return in
}

// Create implements providers.Provider: a container on the zone's network
// from the request's image (else the base image), with the NoCloud seed
// and the kubelet's capacity patch written into it, then started. A retry
// returns the container of the same name as it is (starting it if an
// earlier attempt stopped short of that); a container of that name that is
// not ours is an error.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	in, err := p.create(ctx, req)
	if err == nil && req.Standby != "" {
		in.Standby = providers.Standby{State: req.Standby, Phase: providers.StandbyWarming}
	}
	return in, err
}

func (p *Provider) create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	mt, err := p.checkRequest(req)
	if err != nil {
		return providers.Instance{}, err
	}
	name := p.containerName(req.Name)
	log := p.log.With("group", req.Group, "instance", req.Name, "providerID", providerid.Format(name))

	if c, found, err := p.existing(ctx, name); err != nil || found {
		if err != nil {
			return providers.Instance{}, err
		}
		return p.resume(ctx, c, req, mt)
	}

	imageRef := p.baseImage
	if req.Image != "" {
		imageRef = p.imageRef(req.Image)
	}
	if err := p.checkImage(ctx, imageRef, req.Image); err != nil {
		return providers.Instance{}, fmt.Errorf("docker: machine %q (group %q): %w", req.Name, req.Group, err)
	}
	host, err := p.hostInfo(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	if mt.MilliCPU > host.milliCPU || mt.MemoryBytes > host.memoryBytes {
		return providers.Instance{}, &machineTooBigError{mt: mt, host: host}
	}

	id, err := p.createAndBoot(ctx, req, name, imageRef, mt, host)
	if err != nil {
		return providers.Instance{}, err
	}
	if id == "" { // an earlier attempt's container won the name
		c, found, err := p.existing(ctx, name)
		switch {
		case err != nil:
			return providers.Instance{}, err
		case !found:
			return providers.Instance{}, fmt.Errorf("docker: machine %q: its container %q was removed while we created it; retry", req.Name, name)
		}
		return p.resume(ctx, c, req, mt)
	}
	log.Info("machine created", "image", imageRef, "zone", req.Location, "machineType", mt.Name)
	c, err := p.engine.ContainerInspect(ctx, id)
	if err != nil {
		// It was created and started: what we know stands in.
		return instance(name, p.machineLabels(req, mt), container.StateRunning, "", time.Now()), nil
	}
	return inspected(c), nil
}

// createAndBoot creates the container and boots it, holding netMu so that
// Cleanup can't remove its network in between. It returns "" when a
// container of that name exists already.
func (p *Provider) createAndBoot(ctx context.Context, req providers.CreateRequest, name, imageRef string, mt providers.MachineType, host hostInfo) (string, error) {
	p.netMu.RLock()
	defer p.netMu.RUnlock()
	id, err := p.createContainer(ctx, req, name, imageRef, mt)
	if err != nil || id == "" {
		return "", err
	}
	if err := p.boot(ctx, id, name, p.machineSeed(req, mt, host)); err != nil {
		return "", err
	}
	return id, nil
}

// checkRequest checks what Create needs of req and returns its machine type.
func (p *Provider) checkRequest(req providers.CreateRequest) (providers.MachineType, error) {
	if err := providerid.Valid(p.containerName(req.Name)); err != nil {
		return providers.MachineType{}, fmt.Errorf("docker: machine name %q: %w", req.Name, err)
	}
	if errs := validation.IsDNS1123Label(req.Name); len(errs) > 0 {
		return providers.MachineType{}, fmt.Errorf("docker: machine name %q is not a hostname (a DNS label): %s", req.Name, strings.Join(errs, "; "))
	}
	if req.Cluster != "" && req.Cluster != p.cluster {
		return providers.MachineType{}, fmt.Errorf("docker: machine %q is for cluster %q, but this provider owns cluster %q", req.Name, req.Cluster, p.cluster)
	}
	if req.Group == "" {
		return providers.MachineType{}, fmt.Errorf("docker: machine %q has no group", req.Name)
	}
	if errs := validation.IsValidLabelValue(req.Group); len(errs) > 0 {
		return providers.MachineType{}, fmt.Errorf("docker: machine %q: group %q is not a valid label value: %s", req.Name, req.Group, strings.Join(errs, "; "))
	}
	if req.Location == "" {
		return providers.MachineType{}, fmt.Errorf("docker: machine %q (group %q) has no location: set the group's location, the zone whose network it joins", req.Name, req.Group)
	}
	if err := providerid.Valid(p.networkName(req.Location)); err != nil {
		return providers.MachineType{}, fmt.Errorf("docker: machine %q: location %q can't name a network: %w", req.Name, req.Location, err)
	}
	mt, err := p.machineType(req.MachineType)
	if err != nil {
		return providers.MachineType{}, fmt.Errorf("%w (machine %q, group %q)", err, req.Name, req.Group)
	}
	if req.Standby != "" && !slices.Contains(standbyStates, req.Standby) {
		return providers.MachineType{}, fmt.Errorf("docker: machine %q: standby state %q: %w: the docker provider parks standbys stopped only", req.Name, req.Standby, providers.ErrStandbyUnsupported)
	}
	return mt, nil
}

// machineLabels are the ownership labels of a machine's container, as the
// clouds' servers carry them, plus its zone and type.
func (p *Provider) machineLabels(req providers.CreateRequest, mt providers.MachineType) map[string]string {
	kind := req.ImageKind
	if kind == "" {
		kind = providers.ImageRuntimeInstall
	}
	l := map[string]string{
		providers.LabelCluster:      p.cluster,
		providers.LabelGroup:        req.Group,
		providers.LabelMachine:      req.Name,
		providers.LabelImageKind:    string(kind),
		providers.LabelZone:         req.Location,
		providers.LabelInstanceType: mt.Name,
	}
	if req.Image != "" {
		l[providers.LabelImage] = req.Image
	}
	return l
}

// machineSeed is what a machine's container gets before it starts.
func (p *Provider) machineSeed(req providers.CreateRequest, mt providers.MachineType, host hostInfo) []seedFile {
	return append(nocloudSeed(req.Name, req.UserData), kubeletPatch(host, mt, p.reserved))
}

// createContainer creates the machine's container, in its zone's network,
// when the zone has room. It returns "" when a container of that name
// exists already. The caller holds netMu for reading.
func (p *Provider) createContainer(ctx context.Context, req providers.CreateRequest, name, imageRef string, mt providers.MachineType) (string, error) {
	if limit, limited := p.capacity[req.Location]; limited {
		p.capacityMu.Lock()
		defer p.capacityMu.Unlock()
		in, err := p.engine.ContainerList(ctx, containerListOptions(p.clusterFilter(), filters.Arg("label", providers.LabelZone+"="+req.Location)))
		if err != nil {
			return "", fmt.Errorf("docker: count the machines of zone %q: %w", req.Location, err)
		}
		if len(in) >= limit {
			return "", &capacityError{zone: req.Location, limit: limit}
		}
	}
	netID, err := p.ensureNetwork(ctx, req.Location)
	if err != nil {
		return "", err
	}
	if req.Standby != "" {
		// Before the container: no moment shows it without its marker. The
		// caller's netMu keeps Cleanup from taking the record for an orphan.
		if err := p.createRecord(ctx, name, req); err != nil {
			return "", err
		}
	}
	labels := p.machineLabels(req, mt)
	if err := p.createVolume(ctx, name, labels); err != nil {
		return "", err
	}
	cfg, hc, nc := p.nodeContainer(name, req.Name, imageRef, netID, []string{req.Name}, labels, mt)
	resp, err := p.engine.ContainerCreate(ctx, cfg, hc, nc, nil, name)
	switch {
	case cerrdefs.IsConflict(err):
		return "", nil // the earlier attempt's container has the volume
	case err != nil:
		p.removeVolumeAfterFailure(ctx, name, false)
		if req.Standby != "" {
			p.removeRecordAfterFailure(ctx, name)
		}
		return "", fmt.Errorf("docker: create container %q (group %q, type %s, zone %s, image %s): %w", name, req.Group, mt.Name, req.Location, imageRef, err)
	}
	for _, w := range resp.Warnings {
		p.log.Warn("engine warning on create", "instance", req.Name, "warning", w)
	}
	return resp.ID, nil
}

// removeVolumeAfterFailure removes name's containerd volume after a creation that failed,
// also when ctx has ended.
func (p *Provider) removeVolumeAfterFailure(ctx context.Context, name string, builder bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if err := p.removeVolume(rctx, name, builder); err != nil {
		p.log.Error("volume of a container that failed to boot not removed; remove it by hand", "container", name, "err", err)
	}
}

// boot writes files into the created container and starts it. A container
// that can't be booted is removed with its volume, so a retry starts afresh.
func (p *Provider) boot(ctx context.Context, id, name string, files []seedFile) error {
	return p.bootAs(ctx, id, name, files, false)
}

func (p *Provider) bootAs(ctx context.Context, id, name string, files []seedFile, builder bool) error {
	tarball, err := seedArchive(files, time.Now())
	if err == nil {
		err = p.engine.CopyToContainer(ctx, id, "/", bytes.NewReader(tarball), container.CopyToContainerOptions{})
		if err != nil {
			err = fmt.Errorf("write the NoCloud seed (%s): %w", SeedDir, err)
		}
	}
	if err == nil {
		err = p.engine.ContainerStart(ctx, id, container.StartOptions{})
	}
	if err == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if rerr := p.engine.ContainerRemove(rctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
		p.log.Error("container that failed to boot not removed; remove it by hand", "container", name, "err", rerr)
	} else {
		p.removeVolumeAfterFailure(ctx, name, builder)
		if !builder {
			p.removeRecordAfterFailure(ctx, name)
		}
	}
	return &bootError{name: name, err: err}
}

// removeRecordAfterFailure removes name's standby record, if it has one,
// after a creation that failed, also when ctx has ended.
func (p *Provider) removeRecordAfterFailure(ctx context.Context, name string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if err := p.removeRecord(rctx, name); err != nil {
		p.log.Error("standby record of a container that failed to boot not removed; Cleanup removes it", "container", name, "err", err)
	}
}

// existing inspects the container called name. found is false when there
// is none; a container of that name that the cluster does not own is a
// *foreignError.
func (p *Provider) existing(ctx context.Context, name string) (container.InspectResponse, bool, error) {
	c, err := p.engine.ContainerInspect(ctx, name)
	switch {
	case cerrdefs.IsNotFound(err):
		return container.InspectResponse{}, false, nil
	case err != nil:
		return container.InspectResponse{}, false, fmt.Errorf("docker: inspect container %q: %w", name, err)
	case c.ContainerJSONBase == nil || c.Config == nil || c.State == nil:
		return container.InspectResponse{}, false, fmt.Errorf("docker: inspect container %q: the engine's answer lacks its config or state", name)
	case strings.TrimPrefix(c.Name, "/") != name:
		// The engine also resolves an id prefix; that is not this name.
		return container.InspectResponse{}, false, nil
	case c.Config.Labels[providers.LabelCluster] != p.cluster:
		return container.InspectResponse{}, false, &foreignError{name: name, id: c.ID, cluster: c.Config.Labels[providers.LabelCluster]}
	}
	return c, true, nil
}

// resume returns our existing container c as Create's answer, booting it
// first when an earlier attempt created it but did not start it.
func (p *Provider) resume(ctx context.Context, c container.InspectResponse, req providers.CreateRequest, mt providers.MachineType) (providers.Instance, error) {
	name := strings.TrimPrefix(c.Name, "/")
	if c.State.Status != container.StateCreated {
		p.log.Debug("machine already exists", "instance", req.Name, "state", c.State.Status)
		return inspected(c), nil
	}
	host, err := p.hostInfo(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	p.netMu.RLock()
	defer p.netMu.RUnlock()
	if _, err := p.ensureNetwork(ctx, req.Location); err != nil {
		return providers.Instance{}, err
	}
	if err := p.boot(ctx, c.ID, name, p.machineSeed(req, mt, host)); err != nil {
		return providers.Instance{}, err
	}
	p.log.Info("machine created earlier started", "group", req.Group, "instance", req.Name, "providerID", providerid.Format(name))
	if c, err := p.engine.ContainerInspect(ctx, c.ID); err == nil {
		return inspected(c), nil
	}
	return instance(name, c.Config.Labels, container.StateRunning, "", time.Now()), nil
}

// inspected is the core's view of an inspected container.
func inspected(c container.InspectResponse) providers.Instance {
	created, _ := time.Parse(time.RFC3339Nano, c.Created)
	status := c.State.Status
	if c.State.Status == container.StateExited {
		status = fmt.Sprintf("exited with code %d at %s", c.State.ExitCode, c.State.FinishedAt)
	}
	return instance(strings.TrimPrefix(c.Name, "/"), c.Config.Labels, c.State.Status, status, created)
}

// Delete implements providers.Provider: the container goes, with its
// anonymous volumes and its containerd volume. One that is gone is not an
// error (its volume, should it be left, goes too); one that is not ours is
// refused; one being removed already is left to that removal, and its volume
// to the next Delete or Cleanup.
func (p *Provider) Delete(ctx context.Context, id string) error {
	name, err := providerid.Parse(id)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	c, found, err := p.existing(ctx, name)
	switch {
	case err != nil:
		return fmt.Errorf("docker: refusing to delete %s: %w", id, err)
	case !found:
		return errors.Join(p.removeVolume(ctx, name, false), p.removeRecord(ctx, name))
	}
	err = p.engine.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
	case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"):
		return nil
	default:
		return fmt.Errorf("docker: delete container %q: %w", name, err)
	}
	if err := errors.Join(p.removeVolume(ctx, name, false), p.removeRecord(ctx, name)); err != nil {
		return err
	}
	p.log.Info("machine deleted", "group", c.Config.Labels[providers.LabelGroup], "instance", c.Config.Labels[providers.LabelMachine], "providerID", id)
	return nil
}
