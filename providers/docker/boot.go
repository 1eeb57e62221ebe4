package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

// How a container boots like a VM lives in one place, baseimage.NodeContainer: the
// settings proven to run a kubelet (docs/docker.md has the evidence for each). This file
// maps a machine or a builder onto it, and owns the volume each one keeps containerd's
// root in.

// DefaultDevices are the host devices every machine gets where the host has them
// (baseimage.DefaultDevices: the kubelet reads the kernel log for OOM kills).
var DefaultDevices = baseimage.DefaultDevices

// volumeSuffix names a container's containerd volume: <container name>-containerd.
const volumeSuffix = "-containerd"

func volumeName(containerName string) string { return containerName + volumeSuffix }

// nodeContainer is the engine's configuration of a machine or builder called name (the
// container's name; hostname is the machine's) on the network netID, with the machine
// type's limits (none for a zero MachineType) and its containerd volume.
func (p *Provider) nodeContainer(name, hostname, imageRef, netID string, aliases []string, labels map[string]string, mt providers.MachineType) (*container.Config, *container.HostConfig, *network.NetworkingConfig) {
	return baseimage.NodeContainer(baseimage.NodeSpec{
		Name: hostname, Image: imageRef, Network: netID, Volume: volumeName(name),
		Labels: labels, Aliases: aliases, Devices: p.devices,
		NanoCPUs: mt.MilliCPU * 1_000_000, MemoryBytes: mt.MemoryBytes,
	})
}

// createVolume makes the containerd volume of container name, labelled like it. A volume
// of that name that exists already is returned by the engine as it is (a retried Create).
func (p *Provider) createVolume(ctx context.Context, name string, labels map[string]string) error {
	_, err := p.engine.VolumeCreate(ctx, volume.CreateOptions{Name: volumeName(name), Driver: "local", Labels: maps.Clone(labels)})
	if err != nil {
		return fmt.Errorf("docker: create volume %q (containerd's root of %s): %w", volumeName(name), name, err)
	}
	return nil
}

// removeVolume removes the containerd volume of container name when it is the cluster's
// (or, with builder set, a builder's); one that is gone is not an error.
func (p *Provider) removeVolume(ctx context.Context, name string, builder bool) error {
	v, err := p.engine.VolumeInspect(ctx, volumeName(name))
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("docker: inspect volume %q: %w", volumeName(name), err)
	case builder && v.Labels[imagecatalog.LabelBuilder] == "":
		return fmt.Errorf("docker: volume %q is no builder's (no %s label); left alone", v.Name, imagecatalog.LabelBuilder)
	case !builder && v.Labels[providers.LabelCluster] != p.cluster:
		return fmt.Errorf("docker: volume %q is not the cluster's (label %s=%q); left alone", v.Name, providers.LabelCluster, v.Labels[providers.LabelCluster])
	}
	if err := p.engine.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: remove volume %q: %w", v.Name, err)
	}
	return nil
}

// orphanVolumes removes the cluster's containerd volumes whose container is gone: what a
// process killed between creating the volume and the container left.
func (p *Provider) orphanVolumes(ctx context.Context) ([]string, error) {
	vs, err := p.engine.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(p.clusterFilter())})
	if err != nil {
		return nil, fmt.Errorf("docker: list the cluster's volumes: %w", err)
	}
	var removed []string
	var errs []error
	for _, v := range vs.Volumes {
		if v.Labels[providers.LabelStandby] != "" {
			continue // a standby record: nothing mounts it (orphanStandbyRecords)
		}
		users, err := p.engine.ContainerList(ctx, containerListOptions(filters.Arg("volume", v.Name)))
		if err != nil {
			errs = append(errs, fmt.Errorf("docker: list the containers of volume %q: %w", v.Name, err))
			continue
		}
		if len(users) > 0 {
			continue
		}
		switch err := p.engine.VolumeRemove(ctx, v.Name, false); {
		case err == nil:
			removed = append(removed, "volume "+v.Name)
		case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("docker: remove volume %q: %w", v.Name, err))
		}
	}
	return removed, errors.Join(errs...)
}

// IntrinsicNodeRuntime is what every node of this provider needs because it is a container
// on a shared host (docs/docker.md, "Findings"), whatever the config says:
//   - SharedKernel: the kernel is the host's; the node checks the sysctls the engine set on
//     its network namespace instead of writing them;
//   - RestrictOOMScoreAdj: without CAP_SYS_RESOURCE runc cannot lower an OOM score;
//   - failCgroupV1: false: kubelet v1.35 refuses a cgroup v1 host by default (harmless on
//     cgroup v2);
//   - SystemVerification is ignored at join: it reads the kernel config, which a container
//     has not, and warns about cgroup v1;
//   - PodNetwork: a bridge CNI configuration for the node's podCIDR, so it goes Ready
//     without a CNI add-on.
func IntrinsicNodeRuntime() bootstrap.Runtime {
	return bootstrap.Runtime{
		SharedKernel:          true,
		RestrictOOMScoreAdj:   true,
		Kubelet:               map[string]any{"failCgroupV1": false},
		IgnorePreflightErrors: []string{"SystemVerification"},
		PodNetwork:            &bootstrap.PodNetwork{},
	}
}

// mergeRuntime is the intrinsic runtime with what the config gives: its sandbox image and
// registries, its kubelet keys (which win over the intrinsic ones of the same name), more
// preflight errors, and its pod network settings when it has them.
func mergeRuntime(intrinsic, given bootstrap.Runtime) bootstrap.Runtime {
	rt := intrinsic
	rt.SharedKernel = rt.SharedKernel || given.SharedKernel
	rt.RestrictOOMScoreAdj = rt.RestrictOOMScoreAdj || given.RestrictOOMScoreAdj
	if given.SandboxImage != "" {
		rt.SandboxImage = given.SandboxImage
	}
	rt.Registries = append(slices.Clone(intrinsic.Registries), given.Registries...)
	rt.Kubelet = maps.Clone(intrinsic.Kubelet)
	if rt.Kubelet == nil && len(given.Kubelet) > 0 {
		rt.Kubelet = map[string]any{}
	}
	maps.Copy(rt.Kubelet, given.Kubelet)
	rt.IgnorePreflightErrors = slices.Clone(intrinsic.IgnorePreflightErrors)
	for _, c := range given.IgnorePreflightErrors {
		if !slices.Contains(rt.IgnorePreflightErrors, c) {
			rt.IgnorePreflightErrors = append(rt.IgnorePreflightErrors, c)
		}
	}
	if given.PodNetwork != nil {
		pn := *given.PodNetwork
		rt.PodNetwork = &pn
	} else if intrinsic.PodNetwork != nil {
		pn := *intrinsic.PodNetwork
		rt.PodNetwork = &pn
	}
	return rt
}
