package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/providerid"
)

// Warm-pool standbys (docs/warm-pool.md). A container's labels can't change
// after it is created, so a standby's marker (providers.LabelStandby) lives
// on a record beside it: an empty volume named <container>-standby, labelled
// like the container plus the marker. The record is made before the
// container and removed by Resume before the container gets its join
// user-data and starts, so a machine is never both a standby and joined,
// whenever the process dies.
//
// Parked is "stopped": the container is stopped (systemd halts, as for a
// builder's snapshot) and started again by Resume, which first writes a new
// NoCloud seed: the resume's user-data under a new instance-id, so
// cloud-init runs it at that boot (seed.go, nocloudSeedAs). Pausing
// (suspended) is not offered.

// standbyStopTimeout bounds a standby's clean halt before the engine kills it.
const standbyStopTimeout = time.Minute

// recordSuffix names a standby's record: <container name>-standby.
const recordSuffix = "-standby"

func recordName(containerName string) string { return containerName + recordSuffix }

// standbyStates are the states Capabilities declares.
var standbyStates = []providers.StandbyState{providers.StandbyStopped}

// createRecord makes the standby record of container name. One that exists
// already (a retried Create) is returned by the engine as it is.
func (p *Provider) createRecord(ctx context.Context, name string, req providers.CreateRequest) error {
	labels := map[string]string{
		providers.LabelCluster: p.cluster,
		providers.LabelGroup:   req.Group,
		providers.LabelMachine: req.Name,
		providers.LabelStandby: string(req.Standby),
	}
	if _, err := p.engine.VolumeCreate(ctx, volume.CreateOptions{Name: recordName(name), Driver: "local", Labels: labels}); err != nil {
		return fmt.Errorf("docker: create the standby record %q of %s: %w", recordName(name), name, err)
	}
	return nil
}

// removeRecord removes the standby record of container name; one that is
// gone is not an error, one that is not the cluster's is left alone.
func (p *Provider) removeRecord(ctx context.Context, name string) error {
	v, err := p.engine.VolumeInspect(ctx, recordName(name))
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("docker: inspect the standby record %q: %w", recordName(name), err)
	case v.Labels[providers.LabelCluster] != p.cluster || v.Labels[providers.LabelStandby] == "":
		return fmt.Errorf("docker: volume %q is not a standby record of cluster %q; left alone", v.Name, p.cluster)
	}
	if err := p.engine.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: remove the standby record %q: %w", v.Name, err)
	}
	return nil
}

// records returns the cluster's standby records: the state each container
// (by name) rests in.
func (p *Provider) standbyRecords(ctx context.Context) (map[string]providers.StandbyState, error) {
	vs, err := p.engine.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(p.clusterFilter(), filters.Arg("label", providers.LabelStandby))})
	if err != nil {
		return nil, fmt.Errorf("docker: list the cluster's standby records: %w", err)
	}
	out := make(map[string]providers.StandbyState, len(vs.Volumes))
	for _, v := range vs.Volumes {
		if name, ok := strings.CutSuffix(v.Name, recordSuffix); ok && v.Labels[providers.LabelStandby] != "" {
			out[name] = providers.StandbyState(v.Labels[providers.LabelStandby])
		}
	}
	return out, nil
}

// standbyInstance makes in, the view of container name whose engine state
// is state, a standby resting in rest: parked once the container is
// stopped, else prepared or warming as its node script's status says.
func (p *Provider) standbyInstance(ctx context.Context, in providers.Instance, name, state string, rest providers.StandbyState) providers.Instance {
	in.Standby = providers.Standby{State: rest, Phase: providers.StandbyWarming}
	switch state {
	case container.StateExited, container.StateDead:
		// Halted on purpose (Park); one that stopped before it was
		// prepared (an engine restart) is parked too: its resume runs the
		// whole script, which installs what the first run did not.
		in.Standby.Phase, in.State, in.Error = providers.StandbyParked, providers.StateRunning, nil
	case container.StateRunning:
		st, err := p.standbyStatus(ctx, name)
		switch {
		case err != nil:
			p.log.Debug("standby status not read", "container", name, "err", err)
		case st.Result == bootstrap.StatusPrepared:
			in.Standby.Phase = providers.StandbyPrepared
		case st.Result == "failed":
			in.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: "standby_failed",
				Message: fmt.Sprintf("standby %s: its node script failed: %s (`docker logs %s`)", name, st.Error, name)}
		}
	}
	return in
}

// standbyStatus reads the node script's status file out of container name;
// a file not written yet is the zero Status.
func (p *Provider) standbyStatus(ctx context.Context, name string) (bootstrap.Status, error) {
	rc, _, err := p.engine.CopyFromContainer(ctx, name, bootstrap.DefaultStatusPath)
	switch {
	case cerrdefs.IsNotFound(err):
		return bootstrap.Status{}, nil
	case err != nil:
		return bootstrap.Status{}, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return bootstrap.Status{}, err
	}
	data, err := io.ReadAll(io.LimitReader(tr, reportLimit))
	if err != nil {
		return bootstrap.Status{}, err
	}
	return bootstrap.ParseStatus(data)
}

// Park implements providers.Provider: the standby's container is stopped
// (systemd halts; the engine kills it after standbyStopTimeout). A stopped
// one is left as it is.
func (p *Provider) Park(ctx context.Context, id string, state providers.StandbyState) error {
	if state != providers.StandbyStopped {
		return fmt.Errorf("docker: park %s %s: %w: the docker provider parks standbys stopped only", id, state, providers.ErrStandbyUnsupported)
	}
	name, err := providerid.Parse(id)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	c, found, err := p.existing(ctx, name)
	switch {
	case err != nil:
		return fmt.Errorf("docker: refusing to park %s: %w", id, err)
	case !found:
		return fmt.Errorf("docker: park %s: container %q: %w", id, name, providers.ErrNotFound)
	}
	if _, err := p.engine.VolumeInspect(ctx, recordName(name)); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker: park %s: it has no standby record %q: it is no standby (taken already?)", id, recordName(name))
		}
		return fmt.Errorf("docker: park %s: inspect its standby record: %w", id, err)
	}
	if c.State.Status != container.StateRunning && c.State.Status != container.StateRestarting {
		return nil
	}
	timeout := int(standbyStopTimeout / time.Second)
	if err := p.engine.ContainerStop(ctx, c.ID, container.StopOptions{Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: park %s: stop container %q: %w", id, name, err)
	}
	p.log.Info("standby parked", "group", c.Config.Labels[providers.LabelGroup], "instance", c.Config.Labels[providers.LabelMachine], "providerID", id)
	return nil
}

// Resume implements providers.Provider: the standby record goes first, then
// the container gets a new NoCloud seed (userData, never logged, under a new
// instance-id) and starts. A running container is returned as it is.
func (p *Provider) Resume(ctx context.Context, id string, userData []byte) (providers.Instance, error) {
	name, err := providerid.Parse(id)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("docker: %w", err)
	}
	c, found, err := p.existing(ctx, name)
	switch {
	case err != nil:
		return providers.Instance{}, fmt.Errorf("docker: refusing to resume %s: %w", id, err)
	case !found:
		return providers.Instance{}, fmt.Errorf("docker: resume %s: container %q: %w", id, name, providers.ErrNotFound)
	}
	// From here on every List shows a machine that joins.
	if err := p.removeRecord(ctx, name); err != nil {
		return providers.Instance{}, err
	}
	if c.State.Status == container.StateRunning {
		return inspected(c), nil
	}
	seed := nocloudSeedAs(c.Config.Labels[providers.LabelMachine], fmt.Sprintf("%s-r%d", name, time.Now().UnixNano()), userData)
	tarball, err := seedArchive(seed, time.Now())
	if err != nil {
		return providers.Instance{}, err
	}
	p.netMu.RLock()
	defer p.netMu.RUnlock()
	if err := p.engine.CopyToContainer(ctx, c.ID, "/", bytes.NewReader(tarball), container.CopyToContainerOptions{}); err != nil {
		return providers.Instance{}, fmt.Errorf("docker: resume %s: write the NoCloud seed (%s): %w", id, SeedDir, err)
	}
	if err := p.engine.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return providers.Instance{}, &bootError{name: name, err: err}
	}
	p.log.Info("standby resumed", "group", c.Config.Labels[providers.LabelGroup], "instance", c.Config.Labels[providers.LabelMachine], "providerID", id)
	if ci, err := p.engine.ContainerInspect(ctx, c.ID); err == nil {
		return inspected(ci), nil
	}
	return instance(name, c.Config.Labels, container.StateRunning, "", time.Now()), nil
}

// orphanRecords removes the cluster's standby records whose container is
// gone: what a process killed between making the record and the container
// left, or a Delete interrupted.
func (p *Provider) orphanStandbyRecords(ctx context.Context) ([]string, error) {
	recs, err := p.standbyRecords(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for name := range recs {
		_, found, err := p.existing(ctx, name)
		var foreign *foreignError
		switch {
		case errors.As(err, &foreign):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		case found:
			continue
		}
		if err := p.removeRecord(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "standby record "+recordName(name))
	}
	return removed, errors.Join(errs...)
}
