package baseimage

import (
	"maps"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
)

// ContainerdDir is the node's containerd root. It must not be on the engine's storage
// driver: containerd's overlayfs snapshotter cannot stack its overlays on it (this host's is
// fuse-overlayfs), so it is a volume (a directory of the host's own filesystem). The engine
// fills a new, empty volume with what the image holds at that path, so an image made from a
// builder (the provider's Snapshot puts the builder's volume into the image) starts every
// node with the builder's containerd content: its pod images.
const ContainerdDir = "/var/lib/containerd"

// StopSignal is systemd's "halt". The engine's image import refuses STOPSIGNAL ("stopsignal
// is not a valid change command"), so it is set on each container.
const StopSignal = "SIGRTMIN+3"

// DefaultDevices are the host devices a node gets: the kubelet's OOM watcher opens the
// kernel log.
var DefaultDevices = []string{"/dev/kmsg"}

// NodeSpec is one node container: its hostname (the Node's name; the container's own name
// is ContainerCreate's argument), the image (this package's, or one made from it), the
// Docker network (a name or id), labels, and the volume that holds ContainerdDir (create
// it first, with the same labels).
type NodeSpec struct {
	Name, Image, Network, Volume string
	Labels                       map[string]string
	// Aliases are the container's names on Network besides its own.
	Aliases []string
	// Sysctls are set on the container's network namespace: the per-namespace kernel
	// settings a node needs (DefaultNodeSysctls when nil).
	Sysctls map[string]string
	// Devices are host devices given to the node; nil means DefaultDevices.
	Devices []string
	// NanoCPUs and MemoryBytes limit the container; 0 means no limit. A memory limit comes
	// without swap: the machine has the memory it says.
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
// It is the one place these settings live: the docker provider's machines and builders and
// the e2e scenarios all boot through it. Every setting is there for a reason docs/docker.md
// shows:
//   - PID 1 is InitPath (prebake-container-init, which execs systemd), whatever the image's
//     own entrypoint and command;
//   - every capability but CAP_SYS_RESOURCE, and no seccomp or AppArmor profile: systemd,
//     containerd, runc and the kubelet mount, create namespaces and set up networks;
//   - a private cgroup namespace: the node's cgroups are a subtree of its own, so several
//     kubelets never share /kubepods; prebake-container-init makes the controllers writable;
//   - /run, /run/lock and /tmp as tmpfs (exec: Docker's tmpfs is noexec by default), which
//     systemd expects;
//   - /dev/kmsg, which the kubelet's OOM watcher opens (it exits without it);
//   - StopSignal, systemd's "halt";
//   - ContainerdDir on a volume, the per-namespace sysctls, and container=docker, which
//     tells systemd where it runs.
func NodeContainer(s NodeSpec) (*container.Config, *container.HostConfig, *network.NetworkingConfig) {
	sysctls := s.Sysctls
	if sysctls == nil {
		sysctls = maps.Clone(DefaultNodeSysctls)
	}
	devices := s.Devices
	if devices == nil {
		devices = DefaultDevices
	}
	cfg := &container.Config{
		Hostname:   s.Name,
		Image:      s.Image,
		Entrypoint: []string{InitPath},
		Env:        []string{"container=docker"},
		Labels:     maps.Clone(s.Labels),
		StopSignal: StopSignal,
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
		},
	}
	if s.MemoryBytes > 0 {
		host.MemorySwap = s.MemoryBytes
	}
	for _, d := range devices {
		host.Devices = append(host.Devices, container.DeviceMapping{PathOnHost: d, PathInContainer: d, CgroupPermissions: "rwm"})
	}
	ep := &network.EndpointSettings{}
	if len(s.Aliases) > 0 {
		ep.Aliases = append([]string(nil), s.Aliases...)
	}
	net := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{s.Network: ep}}
	return cfg, host, net
}
