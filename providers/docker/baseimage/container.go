package baseimage

import (
	"maps"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
)

// ContainerdDir is the node's containerd root. It must not be on the engine's storage
// driver: containerd's overlayfs snapshotter cannot stack its overlays on it (this host's is
// fuse-overlayfs), so it is a volume (a directory of the host's own filesystem).
const ContainerdDir = "/var/lib/containerd"

// NodeSpec is one node container: its name (also its hostname and the node's name), the
// image (this package's, or one made from it), the Docker network, labels, and the volume
// that holds ContainerdDir (create it first, with the same labels).
type NodeSpec struct {
	Name, Image, Network, Volume string
	Labels                       map[string]string
	// Sysctls are set on the container's network namespace: the per-namespace kernel
	// settings a node needs (DefaultNodeSysctls when nil).
	Sysctls map[string]string
	// NanoCPUs and MemoryBytes limit the container; 0 means no limit.
	NanoCPUs, MemoryBytes int64
}

// DefaultNodeSysctls are what bootstrap's default sysctls ask for, set where they live in a
// container: its own network namespace.
var DefaultNodeSysctls = map[string]string{
	"net.ipv4.ip_forward":                 "1",
	"net.bridge.bridge-nf-call-iptables":  "1",
	"net.bridge.bridge-nf-call-ip6tables": "1",
}

// NodeContainer is the Engine API configuration that boots the image like a VM without
// --privileged (which this engine refuses: CAP_SYS_RESOURCE is not in its bounding set).
// Every setting is there for a reason docs/docker.md shows:
//   - every capability but CAP_SYS_RESOURCE, and no seccomp or AppArmor profile: systemd,
//     containerd, runc and the kubelet mount, create namespaces and set up networks;
//   - a private cgroup namespace: the node's cgroups are a subtree of its own, so several
//     kubelets never share /kubepods; prebake-container-init makes the controllers writable;
//   - /run, /run/lock and /tmp as tmpfs (exec: Docker's tmpfs is noexec by default), which
//     systemd expects;
//   - /dev/kmsg, which the kubelet's OOM watcher opens (it exits without it);
//   - SIGRTMIN+3 as the stop signal, systemd's "halt";
//   - ContainerdDir on a volume, the per-namespace sysctls, and container=docker, which
//     tells systemd where it runs.
func NodeContainer(s NodeSpec) (*container.Config, *container.HostConfig, *network.NetworkingConfig) {
	sysctls := s.Sysctls
	if sysctls == nil {
		sysctls = maps.Clone(DefaultNodeSysctls)
	}
	cfg := &container.Config{
		Hostname:   s.Name,
		Image:      s.Image,
		Env:        []string{"container=docker"},
		Labels:     maps.Clone(s.Labels),
		StopSignal: "SIGRTMIN+3",
	}
	host := &container.HostConfig{
		NetworkMode:  container.NetworkMode(s.Network),
		CapAdd:       []string{"ALL"},
		CapDrop:      []string{"SYS_RESOURCE"},
		SecurityOpt:  []string{"seccomp=unconfined", "apparmor=unconfined"},
		CgroupnsMode: container.CgroupnsModePrivate,
		Tmpfs:        map[string]string{"/run": "rw,exec", "/run/lock": "rw", "/tmp": "rw,exec"},
		Sysctls:      sysctls,
		Mounts:       []mount.Mount{{Type: mount.TypeVolume, Source: s.Volume, Target: ContainerdDir}},
		Resources: container.Resources{
			NanoCPUs: s.NanoCPUs,
			Memory:   s.MemoryBytes,
			Devices:  []container.DeviceMapping{{PathOnHost: "/dev/kmsg", PathInContainer: "/dev/kmsg", CgroupPermissions: "r"}},
		},
	}
	net := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{s.Network: {}}}
	return cfg, host, net
}
