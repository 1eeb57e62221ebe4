package docker

import (
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/strslice"

	"github.com/prebake-dev/prebake/providers"
)

// This file is the one place that says how a container boots like a VM:
// systemd as PID 1 with what it needs from the engine, without
// --privileged (which engines such as this project's CI refuse: CAP_SYS_RESOURCE
// is not in their bounding set). docs/docker.md gives the reason for each
// setting; change them here and there together.

// DefaultDevices are the host devices every machine gets where the host has
// them: the kubelet reads the kernel log (/dev/kmsg) for OOM kills.
var DefaultDevices = []string{"/dev/kmsg"}

var (
	// bootEntrypoint is PID 1. It replaces the image's entrypoint and
	// command, so an image made for something else still boots as a node.
	bootEntrypoint = strslice.StrSlice{"/sbin/init"}
	// bootEnv tells systemd it runs in a container (it then skips what a
	// container can't do, such as loading kernel modules of its own).
	bootEnv = []string{"container=docker"}
	// bootStopSignal halts systemd cleanly; SIGTERM only makes it re-exec.
	bootStopSignal = "SIGRTMIN+3"
	// Every capability but CAP_SYS_RESOURCE, which the engine's bounding set
	// may lack (then "--privileged" and "--cap-add ALL" alone fail).
	bootCapAdd  = strslice.StrSlice{"ALL"}
	bootCapDrop = strslice.StrSlice{"SYS_RESOURCE"}
	// No seccomp or AppArmor profile: systemd, containerd and runc make
	// mounts and namespaces that the default profiles refuse.
	bootSecurityOpt = []string{"seccomp=unconfined", "apparmor=unconfined"}
	// The host's cgroup namespace and hierarchy, writable: systemd and the
	// kubelet manage cgroups of their own under it.
	bootCgroupns = container.CgroupnsModeHost
	bootBinds    = []string{"/sys/fs/cgroup:/sys/fs/cgroup:rw"}
	// systemd wants /run and /run/lock on tmpfs; /run and /tmp must allow
	// exec (containerd and runc run binaries from them), which the engine's
	// tmpfs default (noexec) forbids.
	bootTmpfs = map[string]string{"/run": "exec", "/run/lock": "", "/tmp": "exec"}
)

// bootConfig is the container config of a machine or builder: the image,
// PID 1, the hostname and the labels.
func bootConfig(imageRef, hostname string, labels map[string]string) *container.Config {
	return &container.Config{
		Image:      imageRef,
		Hostname:   hostname,
		Entrypoint: bootEntrypoint,
		Env:        append([]string(nil), bootEnv...),
		StopSignal: bootStopSignal,
		Labels:     labels,
	}
}

// bootHostConfig is the host config of a machine or builder: the boot
// settings above, its network (by id), its devices and the machine type's limits
// (none for a zero MachineType).
func bootHostConfig(networkID string, devices []string, mt providers.MachineType) *container.HostConfig {
	hc := &container.HostConfig{
		NetworkMode:  container.NetworkMode(networkID),
		CapAdd:       append(strslice.StrSlice(nil), bootCapAdd...),
		CapDrop:      append(strslice.StrSlice(nil), bootCapDrop...),
		SecurityOpt:  append([]string(nil), bootSecurityOpt...),
		CgroupnsMode: bootCgroupns,
		Binds:        append([]string(nil), bootBinds...),
		Tmpfs:        map[string]string{},
	}
	for k, v := range bootTmpfs {
		hc.Tmpfs[k] = v
	}
	for _, d := range devices {
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: d, PathInContainer: d, CgroupPermissions: "rwm"})
	}
	if mt.MilliCPU > 0 {
		hc.NanoCPUs = mt.MilliCPU * 1_000_000
	}
	if mt.MemoryBytes > 0 {
		// Swap as large as nothing: the machine has the memory it says.
		hc.Memory, hc.MemorySwap = mt.MemoryBytes, mt.MemoryBytes
	}
	return hc
}
