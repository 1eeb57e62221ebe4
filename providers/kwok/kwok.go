package kwok

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok/providerid"
)

// DefaultNamespace holds the machine records when Options.Namespace is empty.
const DefaultNamespace = "prebake-kwok"

// Node annotations.
const (
	// AnnotationKwokNode, set to "fake", hands the Node to the kwok
	// controller (--manage-nodes-with-annotation-selector).
	AnnotationKwokNode = "kwok.x-k8s.io/node"
	// AnnotationSimulatedBoot holds the simulated boot duration
	// (time.Duration.String) on every Node this provider creates.
	AnnotationSimulatedBoot = "prebake.dev/simulated-boot"
)

// BootProfile is how long the SIMULATED boot of a machine takes, by image
// kind. Zero means the Node appears at once.
type BootProfile struct {
	Prebaked       time.Duration
	RuntimeInstall time.Duration
}

// Options configures a Provider.
type Options struct {
	// Client talks to the target cluster, where the Leases and Nodes live.
	Client kubernetes.Interface
	// Cluster is the value of providers.LabelCluster on everything we own.
	Cluster string
	// Namespace holds the machine records (Leases). It is created if
	// missing. Default DefaultNamespace.
	Namespace string
	// Boot is the simulated boot time.
	Boot BootProfile
	// MachineTypes is the table of machine types. Default
	// DefaultMachineTypes().
	MachineTypes []providers.MachineType
	// Capacity maps a location (zone) to the most machines it holds; a zone
	// that is absent is unlimited. It simulates stockouts.
	Capacity map[string]int
	// Reserved is subtracted from capacity to give allocatable.
	Reserved providers.Reserved
	// GPULabel is the label key set on GPU nodes ("" for none).
	GPULabel string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now. It stamps the records and decides when a
	// simulated boot is over.
	Now func() time.Time
}

// Provider is the kwok provider. It implements providers.Provider and is
// safe for concurrent use.
type Provider struct {
	client    kubernetes.Interface
	cluster   string
	namespace string
	boot      BootProfile
	types     map[string]providers.MachineType
	typeNames []string // sorted, for error messages
	capacity  map[string]int
	reserved  providers.Reserved
	gpuLabel  string
	log       *slog.Logger
	now       func() time.Time

	// retryBase and retryMax bound the materialiser's backoff. Tests
	// shorten them before calling Run.
	retryBase, retryMax time.Duration

	// capacityMu serialises the count-then-create of machines in zones with
	// a Capacity limit, so two Creates in this process can't both take the
	// last slot.
	capacityMu sync.Mutex

	// queue holds the machines whose simulated boot has not yet produced a
	// Node. It has its own mutex.
	queue *bootQueue

	// running is set while Run runs; a second concurrent Run is refused.
	running atomic.Bool
}

var (
	_ providers.Provider = (*Provider)(nil)
	_ providers.Provider = (*Provider)(nil)
)

// New checks o and returns a Provider. It makes no API call.
func New(o Options) (*Provider, error) {
	if o.Client == nil {
		return nil, errors.New("kwok: Options.Client is nil: give a clientset for the target cluster")
	}
	if o.Cluster == "" {
		return nil, errors.New("kwok: Options.Cluster is empty: it labels (" + providers.LabelCluster + ") everything the provider owns")
	}
	if errs := validation.IsValidLabelValue(o.Cluster); len(errs) > 0 {
		return nil, fmt.Errorf("kwok: Options.Cluster %q is not a valid label value: %s", o.Cluster, strings.Join(errs, "; "))
	}
	ns := o.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, fmt.Errorf("kwok: Options.Namespace %q is not a valid namespace name: %s", ns, strings.Join(errs, "; "))
	}
	if o.Boot.Prebaked < 0 || o.Boot.RuntimeInstall < 0 {
		return nil, fmt.Errorf("kwok: Options.Boot has a negative duration (prebaked %s, runtime-install %s)", o.Boot.Prebaked, o.Boot.RuntimeInstall)
	}
	mts := o.MachineTypes
	if len(mts) == 0 {
		mts = DefaultMachineTypes()
	}
	types := make(map[string]providers.MachineType, len(mts))
	for i, mt := range mts {
		switch {
		case mt.Name == "":
			return nil, fmt.Errorf("kwok: Options.MachineTypes[%d] has no name", i)
		case mt.MilliCPU <= 0 || mt.MemoryBytes <= 0:
			return nil, fmt.Errorf("kwok: machine type %q: MilliCPU and MemoryBytes must be positive (got %d, %d)", mt.Name, mt.MilliCPU, mt.MemoryBytes)
		}
		if _, dup := types[mt.Name]; dup {
			return nil, fmt.Errorf("kwok: machine type %q is listed twice in Options.MachineTypes", mt.Name)
		}
		if errs := validation.IsValidLabelValue(mt.Name); len(errs) > 0 {
			return nil, fmt.Errorf("kwok: machine type %q is not a valid label value (it becomes %s): %s", mt.Name, providers.LabelInstanceType, strings.Join(errs, "; "))
		}
		types[mt.Name] = mt
	}
	capacity := make(map[string]int, len(o.Capacity))
	for zone, n := range o.Capacity {
		if n < 0 {
			return nil, fmt.Errorf("kwok: Options.Capacity[%q] = %d: want 0 or more (absent means unlimited)", zone, n)
		}
		capacity[zone] = n
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	names := slices.Sorted(maps.Keys(types))
	return &Provider{
		client:    o.Client,
		cluster:   o.Cluster,
		namespace: ns,
		boot:      o.Boot,
		types:     types,
		typeNames: names,
		capacity:  capacity,
		reserved:  o.Reserved,
		gpuLabel:  o.GPULabel,
		log:       log.With("provider", "kwok", "cluster", o.Cluster),
		now:       now,
		retryBase: 200 * time.Millisecond,
		retryMax:  30 * time.Second,
		queue:     newBootQueue(),
	}, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return "kwok" }

// ProviderID implements providers.Provider: a kwok providerID is known
// before the Node exists.
func (p *Provider) ProviderID(req providers.CreateRequest) (string, bool) {
	return providerid.Format(req.Name), true
}

// Capabilities implements providers.Provider. kwok "boots" any image, since
// none is booted at all (the image kind only picks the simulated boot time),
// and its machines take no user-data: nothing runs on them. Prices are the
// machine types' own (the built-in ones carry made-up prices).
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{BootsImages: true, UserData: providers.UserDataNone,
		PriceFix: "set pricePerHour on the machine type in providers.kwok.machineTypes"}
}

// TopologyLabels implements providers.Provider: kwok nodes carry
// zone=<location> and the group's region.
func (p *Provider) TopologyLabels(string) map[string]string { return nil }

// MachineType implements providers.Provider. Every type exists in every
// location; Options.Capacity limits how many machines a zone takes.
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
		return providers.MachineType{}, fmt.Errorf("kwok: machine type %q: %w; known types: %s", name, providers.ErrNotFound, strings.Join(p.typeNames, ", "))
	}
	return mt, nil
}

const (
	gib = int64(1) << 30
)

// DefaultMachineTypes is the table used when Options.MachineTypes is empty.
// Its prices are made up (kwok machines cost nothing), in proportion to
// size, so that CA's price expander works on the built-in types too.
func DefaultMachineTypes() []providers.MachineType {
	mt := func(name string, cpu, memGiB, gpus int64, gpuType string, price float64) providers.MachineType {
		return providers.MachineType{
			Name:                  name,
			MilliCPU:              cpu * 1000,
			MemoryBytes:           memGiB * gib,
			EphemeralStorageBytes: 100 * gib,
			Pods:                  providers.DefaultMaxPods,
			GPUs:                  gpus,
			GPUType:               gpuType,
			Arch:                  "amd64",
			PricePerHour:          price,
		}
	}
	return []providers.MachineType{
		mt("kwok-small", 2, 4, 0, "", 0.01),
		mt("kwok-medium", 4, 8, 0, "", 0.02),
		mt("kwok-large", 8, 32, 0, "", 0.04),
		mt("kwok-gpu", 8, 32, 1, "nvidia-t4", 0.40),
	}
}

// Park implements providers.Provider: this provider keeps no warm pool;
// kwok's machines are Node objects: there is nothing to stop.
func (p *Provider) Park(context.Context, string, providers.StandbyState) error {
	return providers.StandbyUnsupported("kwok")
}

// Resume implements providers.Provider: this provider keeps no warm pool.
func (p *Provider) Resume(context.Context, string, []byte) (providers.Instance, error) {
	return providers.Instance{}, providers.StandbyUnsupported("kwok")
}
