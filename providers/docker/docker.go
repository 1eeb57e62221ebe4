package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/providerid"
)

// Defaults.
const (
	// DefaultImageRepository holds the catalog's images: a catalog image id
	// is a tag of it (prebake-node:<image name>).
	DefaultImageRepository = "prebake-node"
	// DefaultBuilderZone is the zone (network) builders run in when a build
	// names none.
	DefaultBuilderZone = "builder"
	// stopTimeout bounds a builder's clean halt before Snapshot commits it.
	stopTimeout = 2 * time.Minute
)

// engine is the part of the Docker Engine API this package uses;
// *client.Client implements it.
type engine interface {
	ClientVersion() string
	Info(ctx context.Context) (system.Info, error)

	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, options container.StartOptions) error
	ContainerStop(ctx context.Context, id string, options container.StopOptions) error
	ContainerRemove(ctx context.Context, id string, options container.RemoveOptions) error
	ContainerCommit(ctx context.Context, id string, options container.CommitOptions) (container.CommitResponse, error)
	CopyToContainer(ctx context.Context, id, dstPath string, content io.Reader, options container.CopyToContainerOptions) error
	CopyFromContainer(ctx context.Context, id, srcPath string) (io.ReadCloser, container.PathStat, error)

	ImageInspect(ctx context.Context, id string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageImport(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error)
	ImageRemove(ctx context.Context, id string, options image.RemoveOptions) ([]image.DeleteResponse, error)

	NetworkCreate(ctx context.Context, name string, options network.CreateOptions) (network.CreateResponse, error)
	NetworkInspect(ctx context.Context, id string, options network.InspectOptions) (network.Inspect, error)
	NetworkList(ctx context.Context, options network.ListOptions) ([]network.Summary, error)
	NetworkRemove(ctx context.Context, id string) error

	VolumeCreate(ctx context.Context, options volume.CreateOptions) (volume.Volume, error)
	VolumeInspect(ctx context.Context, id string) (volume.Volume, error)
	VolumeList(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error)
	VolumeRemove(ctx context.Context, id string, force bool) error
}

var _ engine = (*client.Client)(nil)

// Options configures a Provider. config.DockerProvider maps onto it.
type Options struct {
	// Host is the engine's address, such as unix:///var/run/docker.sock or
	// tcp://127.0.0.1:2375. Empty means $DOCKER_HOST, else the default
	// socket.
	Host string
	// Cluster is the value of providers.LabelCluster on everything we own.
	Cluster string
	// BaseImage is the image (a Docker reference) machines boot when their
	// request names no catalog image: the runtime-install path. Required.
	BaseImage string
	// ImageRepository holds the catalog's images; default
	// DefaultImageRepository.
	ImageRepository string
	// NamePrefix goes before each machine name to make its container name
	// (and so its providerID); the hostname and Node name stay the machine
	// name. It keeps several clusters, or test runs, on one engine apart.
	NamePrefix string
	// MachineTypes is the table of machine types; default
	// DefaultMachineTypes().
	MachineTypes []providers.MachineType
	// Capacity maps a zone to the most machines it holds; a zone that is
	// absent is unlimited.
	Capacity map[string]int
	// Devices are host devices given to every machine; nil means
	// DefaultDevices, each where this host has it.
	Devices []string
	// NodeRuntime is what the config adds to the runtime every node of this
	// provider needs (IntrinsicNodeRuntime): containerd's sandbox image and
	// registries, say. Capabilities declares the two merged, and the core
	// renders that into every machine's user-data.
	NodeRuntime bootstrap.Runtime
	// Reserved is what the config's kubeReserved takes from a machine type
	// in its template; the kubelet of each machine reserves the same
	// (kubeletPatch), so the Node's allocatable is the template's.
	Reserved providers.Reserved
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Provider is the docker provider. It implements providers.Provider and
// the image catalog's interfaces (images.go,
// builder.go), and is safe for concurrent use.
type Provider struct {
	engine     engine
	cluster    string
	baseImage  string
	repo       string
	namePrefix string
	types      map[string]providers.MachineType
	typeNames  []string // sorted, for error messages
	capacity   map[string]int
	devices    []string
	runtime    bootstrap.Runtime
	reserved   providers.Reserved
	log        *slog.Logger

	// capacityMu serialises the count-then-create of machines in zones with
	// a Capacity limit, so two Creates in this process can't both take the
	// last slot.
	capacityMu sync.Mutex
	// netMu is held for reading from a zone network's check to the start of
	// the container that uses it, and for writing by Cleanup, so Cleanup
	// never removes a network a Create in this process is about to use.
	netMu sync.RWMutex
	// netCreateMu serialises the find-then-create of zone networks.
	netCreateMu sync.Mutex

	// hostMu guards host: the engine host's CPUs and memory, read once by
	// the first Create that needs them.
	hostMu sync.Mutex
	host   *hostInfo
}

var (
	_ providers.Provider = (*Provider)(nil)
)

// New checks o and returns a Provider with an engine client that
// negotiates the API version on its first call (an engine of API 1.41, such
// as Docker 20.10, is served at 1.41). It makes no API call.
func New(o Options) (*Provider, error) {
	if o.Cluster == "" {
		return nil, errors.New("docker: Options.Cluster is empty: it labels (" + providers.LabelCluster + ") everything the provider owns")
	}
	if errs := validation.IsValidLabelValue(o.Cluster); len(errs) > 0 {
		return nil, fmt.Errorf("docker: Options.Cluster %q is not a valid label value: %s", o.Cluster, strings.Join(errs, "; "))
	}
	if o.BaseImage == "" {
		return nil, errors.New("docker: Options.BaseImage is empty: name the image machines boot without a catalog image (providers.docker.baseImage)")
	}
	if o.ImageRepository == "" {
		o.ImageRepository = DefaultImageRepository
	}
	repo, err := reference.ParseNormalizedNamed(o.ImageRepository)
	if err != nil || !reference.IsNameOnly(repo) {
		return nil, fmt.Errorf("docker: Options.ImageRepository %q is not a repository name (such as %q, without a tag): %v", o.ImageRepository, DefaultImageRepository, err)
	}
	// The engine lists tags in their familiar form (prebake-node:x, not
	// docker.io/library/prebake-node:x).
	o.ImageRepository = reference.FamiliarName(repo)
	if o.NamePrefix != "" {
		if err := providerid.Valid(o.NamePrefix + "x"); err != nil {
			return nil, fmt.Errorf("docker: Options.NamePrefix %q can't start a container name: %w", o.NamePrefix, err)
		}
	}
	mts := o.MachineTypes
	if len(mts) == 0 {
		mts = DefaultMachineTypes()
	}
	types := make(map[string]providers.MachineType, len(mts))
	for i, mt := range mts {
		switch {
		case mt.Name == "":
			return nil, fmt.Errorf("docker: Options.MachineTypes[%d] has no name", i)
		case mt.MilliCPU <= 0 || mt.MemoryBytes <= 0:
			return nil, fmt.Errorf("docker: machine type %q: MilliCPU and MemoryBytes must be positive (got %d, %d): they are the container's limits", mt.Name, mt.MilliCPU, mt.MemoryBytes)
		case mt.GPUs > 0:
			return nil, fmt.Errorf("docker: machine type %q has GPUs; the docker provider passes none through", mt.Name)
		}
		if _, dup := types[mt.Name]; dup {
			return nil, fmt.Errorf("docker: machine type %q is listed twice in Options.MachineTypes", mt.Name)
		}
		if mt.Arch == "" {
			mt.Arch = hostArch()
		}
		types[mt.Name] = mt
	}
	capacity := make(map[string]int, len(o.Capacity))
	for zone, n := range o.Capacity {
		if n < 0 {
			return nil, fmt.Errorf("docker: Options.Capacity[%q] = %d: want 0 or more (absent means unlimited)", zone, n)
		}
		capacity[zone] = n
	}
	devices := o.Devices
	if devices == nil {
		for _, d := range DefaultDevices {
			if _, err := os.Stat(d); err == nil {
				devices = append(devices, d)
			}
		}
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if o.Host != "" {
		opts = append(opts, client.WithHost(o.Host))
	}
	c, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: engine client for %q: %w", o.Host, err)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Provider{
		engine:     c,
		cluster:    o.Cluster,
		baseImage:  o.BaseImage,
		repo:       o.ImageRepository,
		namePrefix: o.NamePrefix,
		types:      types,
		typeNames:  slices.Sorted(maps.Keys(types)),
		capacity:   capacity,
		devices:    devices,
		runtime:    mergeRuntime(IntrinsicNodeRuntime(), o.NodeRuntime),
		reserved:   o.Reserved,
		log:        log.With("provider", "docker", "cluster", o.Cluster),
	}, nil
}

// Close releases the engine client's connections.
func (p *Provider) Close() error {
	if c, ok := p.engine.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// APIVersion is the Engine API version the client speaks: after the first
// call, the lower of the engine's and the client's.
func (p *Provider) APIVersion() string { return p.engine.ClientVersion() }

// Name implements providers.Provider.
func (p *Provider) Name() string { return "docker" }

// ProviderID implements providers.Provider: the container's name is the
// machine's name (after NamePrefix), so the id is known before it exists.
func (p *Provider) ProviderID(req providers.CreateRequest) (string, bool) {
	return providerid.Format(p.containerName(req.Name)), true
}

func (p *Provider) containerName(machine string) string { return p.namePrefix + machine }

// Capabilities implements providers.Provider: a machine boots a catalog
// image (a tag of ImageRepository) when its request names one, reads
// user-data with cloud-init's NoCloud datasource, and is a container on a
// shared host, whose node needs IntrinsicNodeRuntime with
// Options.NodeRuntime merged in. Prices are the machine types' own (the
// built-in ones carry made-up prices). Warm-pool standbys park stopped
// (standby.go).
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{BootsImages: true, UserData: providers.UserDataCloudInit, NodeRuntime: p.NodeRuntime(),
		PriceFix: "set pricePerHour on the machine type in providers.docker.machineTypes", Standby: slices.Clone(standbyStates)}
}

// NodeRuntime is what every node (and builder) of this provider runs with: the intrinsic
// runtime merged with the config's. Each call returns a copy.
func (p *Provider) NodeRuntime() bootstrap.Runtime {
	return mergeRuntime(p.runtime, bootstrap.Runtime{})
}

// TopologyLabels implements providers.Provider: nodes carry zone=<network>.
func (p *Provider) TopologyLabels(string) map[string]string { return nil }

// Run implements providers.Provider: the provider has no background work.
func (p *Provider) Run(context.Context) error { return nil }

// MachineType implements providers.Provider. Every type exists in every
// zone; Options.Capacity limits how many machines a zone takes.
func (p *Provider) MachineType(_ context.Context, name, location string) (providers.MachineType, error) {
	mt, err := p.machineType(name)
	if err != nil {
		return providers.MachineType{}, fmt.Errorf("%w (location %q)", err, location)
	}
	return mt, nil
}

func (p *Provider) machineType(name string) (providers.MachineType, error) {
	mt, ok := p.types[name]
	if !ok {
		return providers.MachineType{}, fmt.Errorf("docker: machine type %q: %w; known types: %s (providers.docker.machineTypes)", name, providers.ErrNotFound, strings.Join(p.typeNames, ", "))
	}
	return mt, nil
}

const gib = int64(1) << 30

// DefaultMachineTypes is the table used when Options.MachineTypes is empty:
// small enough for a laptop.
func DefaultMachineTypes() []providers.MachineType {
	return []providers.MachineType{
		{Name: "docker-small", MilliCPU: 1000, MemoryBytes: 1 * gib, Pods: providers.DefaultMaxPods, Arch: hostArch(), PricePerHour: 0.01},
		{Name: "docker-medium", MilliCPU: 2000, MemoryBytes: 4 * gib, Pods: providers.DefaultMaxPods, Arch: hostArch(), PricePerHour: 0.02},
	}
}

// hostArch is this host's Kubernetes arch; the engine runs images of its
// own.
func hostArch() string {
	if runtime.GOARCH == "arm64" {
		return "arm64"
	}
	return "amd64"
}

// hostInfo is what a kubelet in a container sees of the machine: the
// engine host's CPUs and memory.
type hostInfo struct {
	milliCPU    int64
	memoryBytes int64
}

func (p *Provider) hostInfo(ctx context.Context) (hostInfo, error) {
	p.hostMu.Lock()
	defer p.hostMu.Unlock()
	if p.host != nil {
		return *p.host, nil
	}
	info, err := p.engine.Info(ctx)
	if err != nil {
		return hostInfo{}, fmt.Errorf("docker: read the engine host's CPUs and memory: %w", err)
	}
	h := hostInfo{milliCPU: int64(info.NCPU) * 1000, memoryBytes: info.MemTotal}
	p.host = &h
	return h, nil
}

// Reserved is Options.Reserved: what each machine's kubelet reserves on top of the host
// beyond its machine type.
func (p *Provider) Reserved() providers.Reserved { return p.reserved }
