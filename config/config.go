package config

import (
	"reflect"
	"strings"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

// APIVersion and Kind identify the one config format this build reads.
const (
	APIVersion = "prebake.dev/v1alpha1"
	Kind       = "ProviderConfig"
)

// Defaults, applied to fields the config leaves out. docs/configuration.md
// lists the same values.
const (
	defaultRefreshInterval    = 10 * time.Second
	defaultReservedCPU        = "100m"
	defaultReservedMemory     = "256Mi"
	defaultGPULabel           = "prebake.dev/gpu"
	defaultParallelism        = 8
	defaultQPS                = 20.0
	defaultRetries            = 3
	defaultKwokNamespace      = "prebake-kwok"
	defaultHcloudImage        = "ubuntu-24.04"
	defaultPrebakedBoot       = 20 * time.Second
	defaultRuntimeInstallBoot = 90 * time.Second
	defaultArch               = "amd64"
)

// Limits checked by Validate.
const (
	maxGroupIDLen   = 40 // the id prefixes machine names, which must stay DNS labels
	maxGroupSize    = 1000
	maxParallelism  = 256
	maxRetries      = 10
	maxQPS          = 10000
	maxBurst        = 100000
	maxPodsPerNode  = 10000
	maxCPUQuantity  = "10k" // cores; keeps MilliValue far from int64 overflow
	maxMemQuantity  = "1Pi"
	maxDiskQuantity = "1Ei"
)

// Config is the whole config of `prebake serve`. A *Config returned by Load
// or Parse has its defaults applied and has passed Validate.
type Config struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// ClusterName is the value of the ownership label prebake.dev/cluster on
	// every machine and Node the plugin creates. A DNS label.
	ClusterName string `yaml:"clusterName"`
	// RefreshInterval is how often Refresh may re-list a provider (the
	// snapshot's TTL).
	RefreshInterval Duration `yaml:"refreshInterval"`
	// KubeReserved is subtracted from a machine type's capacity to give the
	// allocatable of scale-from-zero templates.
	KubeReserved Resources `yaml:"kubeReserved"`
	// GPULabel is the label key put on nodes of machine types with GPUs.
	GPULabel  string    `yaml:"gpuLabel"`
	Workers   Workers   `yaml:"workers"`
	Providers Providers `yaml:"providers"`
	// ImageCatalog is where groups' image channels resolve. The zero value
	// means no catalog: every group installs at runtime.
	ImageCatalog ImageCatalog `yaml:"imageCatalog"`
	// Bootstrap renders each machine's user-data; nil means groups send
	// their userDataFile as is.
	Bootstrap  *Bootstrap  `yaml:"bootstrap"`
	NodeGroups []NodeGroup `yaml:"nodeGroups"`

	// source names the config in errors; lines maps a field path such as
	// "nodeGroups[1].maxSize" to the line it was written on. Both are set
	// by Parse; a Config built in code has neither and its errors carry no
	// line.
	source string
	lines  map[string]int
}

// Resources is an amount of CPU and memory.
type Resources struct {
	CPU    Quantity `yaml:"cpu"`
	Memory Quantity `yaml:"memory"`
}

// Workers configures the creation workers, one set per provider.
type Workers struct {
	// Parallelism is the number of concurrent creations per provider.
	Parallelism int `yaml:"parallelism"`
	// QPS and Burst rate-limit API calls per provider.
	QPS   float64 `yaml:"qps"`
	Burst int     `yaml:"burst"`
	// Retries is how often a retryable creation error is retried.
	Retries int `yaml:"retries"`
}

// Providers holds one optional section per provider; nil means not
// configured. Each provider is a pointer field tagged with its config key,
// which is also its providers.Provider.Name. hcloud, gce and static join
// here as sibling fields; Names, the strict decoder and the error messages
// pick a new field up from its tag.
type Providers struct {
	Kwok   *KwokProvider   `yaml:"kwok"`
	Hcloud *HcloudProvider `yaml:"hcloud"`
	Gce    *GceProvider    `yaml:"gce"`
	Static *StaticProvider `yaml:"static"`
	Docker *DockerProvider `yaml:"docker"`
}

// Names returns the keys of the configured providers, in field order.
func (p Providers) Names() []string {
	var names []string
	v := reflect.ValueOf(p)
	for i, f := range providerFields() {
		if !v.Field(i).IsNil() {
			names = append(names, f)
		}
	}
	return names
}

// providerFields returns the config keys of every provider this build
// knows, in field order.
func providerFields() []string {
	t := reflect.TypeFor[Providers]()
	names := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		names = append(names, yamlName(f))
	}
	return names
}

// KwokProvider is the embedded default provider: its machines are Node
// objects in a cluster that kwok keeps Ready. Boot times are SIMULATED.
type KwokProvider struct {
	// Kubeconfig is the target cluster's kubeconfig path. Empty means
	// $KUBECONFIG, then the in-cluster config; the provider resolves it.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the machine records (Leases).
	Namespace     string        `yaml:"namespace"`
	SimulatedBoot SimulatedBoot `yaml:"simulatedBoot"`
	// MachineTypes replaces the kwok provider's built-in machine types when
	// set. nil means "use the built-in ones".
	MachineTypes []MachineType `yaml:"machineTypes"`
	// Capacity caps the machines per zone (simulated stockout): a zone
	// mapped to 0 fails every creation with an out-of-resources error. Zones
	// not listed are unlimited.
	Capacity map[string]int `yaml:"capacity"`
}

// HcloudProvider is the Hetzner Cloud provider. Node groups are emulated
// with server labels; every server carries the prebake.dev labels.
type HcloudProvider struct {
	// Token is the API token (read and write), from a file or an
	// environment variable; never inline.
	Token SecretRef `yaml:"token"`
	// Endpoint overrides the API URL; empty means Hetzner's
	// (https://api.hetzner.cloud/v1). Tests point it at the fake.
	Endpoint string `yaml:"endpoint"`
	// Image is the image name or id every server boots until the image
	// catalog resolves channels; Hetzner picks the build for the server
	// type's architecture.
	Image string `yaml:"image"`
	// Networks, Firewalls and SSHKeys are ids attached to every server.
	Networks  []int64 `yaml:"networks"`
	Firewalls []int64 `yaml:"firewalls"`
	SSHKeys   []int64 `yaml:"sshKeys"`
	// PlacementGroup is the id of a spread placement group every server
	// joins; 0 means none. Hetzner holds at most 10 servers in one.
	PlacementGroup int64 `yaml:"placementGroup"`
	// StandbySSHKey is the SSH client key (unencrypted, PEM or OpenSSH)
	// prebake logs in to warm-pool standbys with, as root, to read their
	// status and run their join: a Hetzner server's user-data can't change
	// after it is created. From a file (a mounted Secret) or an environment
	// variable, so a restarted prebake still reaches the standbys it made.
	// A warmPool on an hcloud group needs it.
	StandbySSHKey SecretRef `yaml:"standbySSHKey"`
	// StandbySSHAddress is the address of a standby prebake dials: public
	// (its public IPv4) or private (its IP in the first of Networks, for a
	// prebake inside that network).
	StandbySSHAddress string `yaml:"standbySSHAddress"`
}

// Values of HcloudProvider.StandbySSHAddress.
const (
	StandbySSHPublic  = "public"
	StandbySSHPrivate = "private"
)

// HasStandbySSHKey reports whether StandbySSHKey names a key.
func (h *HcloudProvider) HasStandbySSHKey() bool {
	return h != nil && h.StandbySSHKey != (SecretRef{})
}

// SimulatedBoot is how long a kwok machine takes from creation until its
// Node appears, by image kind.
type SimulatedBoot struct {
	Prebaked       Duration `yaml:"prebaked"`
	RuntimeInstall Duration `yaml:"runtimeInstall"`
}

// MachineType describes a machine type in the config.
type MachineType struct {
	Name   string   `yaml:"name"`
	CPU    Quantity `yaml:"cpu"`
	Memory Quantity `yaml:"memory"`
	// EphemeralStorage is the root disk; zero means unknown.
	EphemeralStorage Quantity `yaml:"ephemeralStorage"`
	// Pods is the kubelet's max pods; 0 means providers.DefaultMaxPods.
	Pods    int64  `yaml:"pods"`
	GPUs    int64  `yaml:"gpus"`
	GPUType string `yaml:"gpuType"`
	// Arch is amd64 or arm64.
	Arch         string  `yaml:"arch"`
	PricePerHour float64 `yaml:"pricePerHour"`
}

// MachineTypeList returns the configured machine types as provider values,
// or nil when the config sets none (the provider then uses its own).
func (k KwokProvider) MachineTypeList() []providers.MachineType {
	return machineTypeList(k.MachineTypes)
}

func machineTypeList(list []MachineType) []providers.MachineType {
	if list == nil {
		return nil
	}
	out := make([]providers.MachineType, 0, len(list))
	for _, m := range list {
		out = append(out, providers.MachineType{
			Name:                  m.Name,
			MilliCPU:              m.CPU.MilliValue(),
			MemoryBytes:           m.Memory.Value(),
			EphemeralStorageBytes: m.EphemeralStorage.Value(),
			Pods:                  m.Pods,
			GPUs:                  m.GPUs,
			GPUType:               m.GPUType,
			Arch:                  m.Arch,
			PricePerHour:          m.PricePerHour,
		})
	}
	return out
}

// NodeGroup is one CA node group.
type NodeGroup struct {
	// ID is unique and prefixes machine names: a DNS label of at most 40
	// characters.
	ID string `yaml:"id"`
	// Provider is the key of a configured provider, such as "kwok".
	Provider    string `yaml:"provider"`
	MinSize     int    `yaml:"minSize"`
	MaxSize     int    `yaml:"maxSize"`
	MachineType string `yaml:"machineType"`
	// Location is the zone; Region is optional.
	Location string            `yaml:"location"`
	Region   string            `yaml:"region"`
	Labels   map[string]string `yaml:"labels"`
	// TaintSpecs are the group's taints as written; Taints returns them as
	// provider values. (The field can't be called Taints: that is the
	// method.)
	TaintSpecs []Taint `yaml:"taints"`
	// Image selects a prebaked image; the zero Image means runtime-install.
	Image Image `yaml:"image"`
	// Network is the nodes' network mode (docs/networking.md); nil means
	// none.
	Network *Network `yaml:"network"`
	// UserDataFile is sent verbatim as user-data instead of what the
	// bootstrap block renders. Load makes a relative path relative to the
	// config file's directory.
	UserDataFile string `yaml:"userDataFile"`
	// WarmPool keeps standby machines for the group (docs/warm-pool.md);
	// nil keeps none.
	WarmPool *WarmPool `yaml:"warmPool"`
}

// Taint is a node taint as written in the config.
type Taint struct {
	Key    string `yaml:"key"`
	Value  string `yaml:"value"`
	Effect string `yaml:"effect"` // NoSchedule, PreferNoSchedule or NoExecute
}

// Image selects the image a group boots from.
type Image struct {
	// Channel is an image catalog channel such as "stable".
	Channel string `yaml:"channel"`
	// OS and K8sMinor narrow the channel's key: "ubuntu-2404", "1.35".
	// Empty matches any; a channel that then matches two images is an
	// error at create time (the group installs at runtime and says why).
	// OS's family (debian, ubuntu, flatcar, fcos) also says how nodes are
	// configured when no image resolves: flatcar and fcos render Ignition.
	OS       string `yaml:"os"`
	K8sMinor string `yaml:"k8sMinor"`
	// ContainerImages are the container images the group's pods use, fully
	// qualified (registry.k8s.io/pause:3.10, optionally @sha256:...). The
	// channel still decides the image; when it matches several, the one
	// that holds all of these is chosen, and a booted image that lacks some
	// is reported (docs/images.md, "Baked container images").
	ContainerImages []string `yaml:"containerImages"`
}

// ImageCatalog locates the image catalog document (`prebake images`
// writes it). The core reloads it on every refresh.
type ImageCatalog struct {
	// File is the catalog YAML; a relative path is relative to the config
	// file.
	File string `yaml:"file"`
	// ConfigMap is "namespace/name" of a ConfigMap holding the catalog (what
	// the image-refresh CronJob writes). Set File or ConfigMap, not both.
	ConfigMap string `yaml:"configMap"`
	// Kubeconfig is the cluster of ConfigMap. Empty: the client the kwok
	// provider or the bootstrap block brings, else $KUBECONFIG, else
	// in-cluster.
	Kubeconfig string `yaml:"kubeconfig"`
}

// ConfigMapRef returns ConfigMap's namespace and name; ok is false when it
// is not set.
func (c ImageCatalog) ConfigMapRef() (namespace, name string, ok bool) {
	ns, n, found := strings.Cut(c.ConfigMap, "/")
	return ns, n, found && ns != "" && n != ""
}

// Taints returns the group's taints as provider values, nil when it has
// none.
func (g NodeGroup) Taints() []providers.Taint {
	if len(g.TaintSpecs) == 0 {
		return nil
	}
	out := make([]providers.Taint, 0, len(g.TaintSpecs))
	for _, t := range g.TaintSpecs {
		out = append(out, providers.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return out
}

// Reserved returns kubeReserved as the provider value that templates
// subtract from capacity.
func (c *Config) Reserved() providers.Reserved {
	return providers.Reserved{
		MilliCPU:    c.KubeReserved.CPU.MilliValue(),
		MemoryBytes: c.KubeReserved.Memory.Value(),
	}
}
