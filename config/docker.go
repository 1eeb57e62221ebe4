package config

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/distribution/reference"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

// Defaults of the docker provider; docs/configuration.md lists the same.
const defaultDockerImageRepository = "prebake-node"

// DockerProvider is the docker provider: each machine is a container that
// boots like a VM (systemd, cloud-init's NoCloud seed) on a Docker network
// per zone, through the Docker Engine API. See docs/docker.md.
type DockerProvider struct {
	// Host is the engine's address: unix:///path/to/docker.sock or
	// tcp://host:port. Empty means $DOCKER_HOST, else the default socket.
	Host string `yaml:"host"`
	// BaseImage is the image (a Docker reference on the engine; the
	// provider never pulls) machines boot without a catalog image. Required.
	BaseImage string `yaml:"baseImage"`
	// ImageRepository holds the catalog's images: an image id is a tag of it.
	ImageRepository string `yaml:"imageRepository"`
	// ContainerNamePrefix goes before each machine name to make its
	// container name (and providerID); it keeps clusters sharing an engine
	// apart. Hostnames and Node names stay the machine names.
	ContainerNamePrefix string `yaml:"containerNamePrefix"`
	// MachineTypes replaces the built-in machine types (docker-small,
	// docker-medium) when set: each type's cpu and memory are its
	// container's limits.
	MachineTypes []MachineType `yaml:"machineTypes"`
	// Capacity caps the machines per zone (a zone is a network): a zone
	// mapped to 0 fails every creation with an out-of-resources error. Zones
	// not listed are unlimited.
	Capacity map[string]int `yaml:"capacity"`
	// Node is what the nodes' containerd uses beyond what every docker node
	// needs (which the provider declares itself): the pod sandbox image and
	// registries reached at another endpoint, such as a plain-HTTP registry
	// on the zone network's gateway.
	Node *DockerNode `yaml:"node"`
}

// DockerNode is the providers.docker.node block.
type DockerNode struct {
	// SandboxImage is containerd's pod sandbox (pause) image; empty keeps
	// containerd's default, registry.k8s.io/pause, which needs that registry.
	SandboxImage string `yaml:"sandboxImage"`
	// Registries are registry hosts containerd pulls from at another
	// endpoint than their name says.
	Registries []DockerRegistry `yaml:"registries"`
}

// DockerRegistry is one registry host (as image names spell it: host[:port])
// and where containerd pulls its images from; the endpoint defaults to plain
// HTTP on the host.
type DockerRegistry struct {
	Host     string `yaml:"host"`
	Endpoint string `yaml:"endpoint"`
}

// NodeRuntime returns the node block as the bootstrap package takes it (the
// zero Runtime without one).
func (d DockerProvider) NodeRuntime() bootstrap.Runtime {
	if d.Node == nil {
		return bootstrap.Runtime{}
	}
	rt := bootstrap.Runtime{SandboxImage: d.Node.SandboxImage}
	for _, r := range d.Node.Registries {
		rt.Registries = append(rt.Registries, bootstrap.Registry{Host: r.Host, Endpoint: r.Endpoint})
	}
	return rt
}

// MachineTypeList returns the configured machine types as provider values,
// or nil when the config sets none (the provider then uses its own).
func (d DockerProvider) MachineTypeList() []providers.MachineType {
	return machineTypeList(d.MachineTypes)
}

// containerPrefixRE is what may start a Docker container name.
var containerPrefixRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

func (c *Config) applyDockerDefaults(set map[string]bool) {
	d := c.Providers.Docker
	if d == nil {
		return
	}
	const p = "providers.docker"
	if !set[p+".imageRepository"] {
		d.ImageRepository = defaultDockerImageRepository
	}
	for i := range d.MachineTypes {
		if !set[p+".machineTypes["+strconv.Itoa(i)+"].arch"] {
			d.MachineTypes[i].Arch = defaultArch
		}
	}
	if d.Node != nil {
		for i, r := range d.Node.Registries {
			if !set[p+".node.registries["+strconv.Itoa(i)+"].endpoint"] && r.Host != "" {
				d.Node.Registries[i].Endpoint = "http://" + r.Host
			}
		}
	}
}

// dockerNode checks the node block by rendering user-data with it once: the
// renderer's own checks of the runtime name the field and the fix.
func (v *validator) dockerNode(n *DockerNode) {
	const p = "providers.docker.node"
	if n.Registries != nil && len(n.Registries) == 0 {
		v.errorf(p+".registries", "%s.registries is empty; list registries as {host, endpoint}, or leave the key out", p)
	}
	rt := DockerProvider{Node: n}.NodeRuntime()
	_, err := bootstrap.Render(bootstrap.Input{
		Provider: "docker", Cluster: bootstrap.Cluster{APIServerEndpoint: "192.0.2.1:6443", CACertHashes: []string{"sha256:" + strings.Repeat("0", 64)}},
		JoinToken: "abcdef.0123456789abcdef", NodeName: "check", Runtime: rt,
		Components: []bootstrap.Component{{Name: "containerd", Version: "1.6.20~ds1-1+b1"}},
	})
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimPrefix(strings.TrimPrefix(line, "bootstrap: "), "bootstrap input: ")
		rest, ok := strings.CutPrefix(line, "runtime.")
		if !ok {
			v.errorf(p, "%s: %s", p, line)
			continue
		}
		field, _, _ := strings.Cut(rest, " ")
		v.errorf(p+"."+strings.TrimSuffix(field, ":"), "%s.%s", p, rest)
	}
}

func (v *validator) docker(d *DockerProvider) {
	const p = "providers.docker"
	if d.Host != "" {
		u, err := url.Parse(d.Host)
		switch {
		case err != nil || (u.Scheme != "unix" && u.Scheme != "tcp"):
			v.errorf(p+".host", "%s.host %q is not an engine address; use unix:///var/run/docker.sock or tcp://HOST:PORT, or leave it out for $DOCKER_HOST", p, short(d.Host))
		case u.Scheme == "unix" && !strings.HasPrefix(u.Path, "/"):
			v.errorf(p+".host", "%s.host %q: a unix socket needs an absolute path, such as unix:///var/run/docker.sock", p, short(d.Host))
		case u.Scheme == "tcp" && (u.Hostname() == "" || u.Port() == ""):
			v.errorf(p+".host", "%s.host %q: a tcp address needs a host and a port, such as tcp://127.0.0.1:2375", p, short(d.Host))
		}
	}
	switch {
	case d.BaseImage == "":
		v.errorf(p+".baseImage", "%s.baseImage is required: the image machines boot without a catalog image (systemd and cloud-init, nothing of Kubernetes; see docs/docker.md), such as \"prebake-docker-base:bookworm\"", p)
	default:
		if _, err := reference.ParseAnyReference(d.BaseImage); err != nil {
			v.errorf(p+".baseImage", "%s.baseImage %q is not an image reference (%v); use NAME[:TAG] or an image id", p, short(d.BaseImage), err)
		}
	}
	if r, err := reference.ParseNormalizedNamed(d.ImageRepository); err != nil || !reference.IsNameOnly(r) {
		v.errorf(p+".imageRepository", "%s.imageRepository %q is not a repository name (lower-case, no tag), such as %q; leave it out for the default", p, short(d.ImageRepository), defaultDockerImageRepository)
	}
	if pf := d.ContainerNamePrefix; pf != "" && !containerPrefixRE.MatchString(pf) {
		v.errorf(p+".containerNamePrefix", "%s.containerNamePrefix %q can't start a container name: use letters, digits, '_', '.' and '-', starting with a letter or digit", p, short(pf))
	}
	if d.MachineTypes != nil && len(d.MachineTypes) == 0 {
		v.errorf(p+".machineTypes", "%s.machineTypes is empty; list at least one machine type, or leave the key out to use the built-in ones", p)
	}
	v.machineTypes(p+".machineTypes", d.MachineTypes, "docker-small")
	for i, m := range d.MachineTypes {
		if m.GPUs > 0 {
			ip := joinIndex(p+".machineTypes", i)
			v.errorf(ip+".gpus", "%s.gpus is %d; the docker provider passes no GPUs through, so use 0", ip, m.GPUs)
		}
	}
	if d.Node != nil {
		v.dockerNode(d.Node)
	}
	for _, zone := range sortedKeys(d.Capacity) {
		zp := joinKey(p+".capacity", zone)
		if zone == "" {
			v.errorf(zp, "%s: a zone name is empty", p+".capacity")
		} else {
			v.labelValue(zp, zone)
		}
		if n := d.Capacity[zone]; n < 0 {
			v.errorf(zp, "%s is %d; use 0 (no room) or more, or leave the zone out for no limit", zp, n)
		}
	}
}
