package static

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
	"github.com/prebake-dev/prebake/providers/static/providerid"
)

// Defaults for the zero values of Options.
const (
	DefaultNamespace    = "prebake-static"
	DefaultResetCommand = "kubeadm reset -f && rm -rf /etc/cni/net.d /var/lib/cni /etc/prebake"
	DefaultPort         = 22
	DefaultUser         = "root"
	DefaultDrainTimeout = 5 * time.Minute
)

// Machine is one machine of the pool.
type Machine struct {
	// Host names the machine: its providerID is static://<Host> and its
	// claim is the Lease named Host. A lowercase DNS-1123 subdomain.
	Host string
	// Address is what SSH dials (a DNS name or an IP); empty means Host.
	Address string
	// Port is the SSH port; 0 means DefaultPort.
	Port int
	// User logs in over SSH; empty means DefaultUser. A user other than
	// root runs the scripts through `sudo -n`.
	User string
	// MachineType names an entry of Options.MachineTypes.
	MachineType string
	// Zone is the machine's location; empty means it serves any zone.
	Zone string
	// Group reserves the machine for one node group; empty means any group.
	Group string
	// Labels are extra node labels of this machine only (a rack, a disk
	// kind), handed to the node script in EnvNodeLabels. Keys and values
	// must be valid Kubernetes labels.
	Labels map[string]string
}

func (m Machine) dialAddress() string {
	if m.Address != "" {
		return m.Address
	}
	return m.Host
}

// Options configures a Provider.
type Options struct {
	// Client talks to the target cluster, where the claims (Leases) live and
	// whose Nodes Delete drains.
	Client kubernetes.Interface
	// Cluster is the value of providers.LabelCluster on every claim.
	Cluster string
	// Namespace holds the claims; it is created if missing. Default
	// DefaultNamespace. Replicas and clusters sharing a pool must share it.
	Namespace string
	// Machines is the pool.
	Machines []Machine
	// MachineTypes describes the machines: a pool can't be asked, so the
	// config declares cpu and memory.
	MachineTypes []providers.MachineType
	// Shell runs scripts on the machines; NewSSHShell makes the real one.
	Shell Shell
	// ResetCommand is run over SSH before a machine is released. Default
	// DefaultResetCommand.
	ResetCommand string
	// DrainTimeout bounds cordon and eviction in Delete; what is left then
	// is reset anyway. Default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Shell runs a script on a machine: stdin is fed to `sh -s` (through
// `sudo -n` for a user other than root). It returns the command's error,
// which names the machine and says what went wrong.
type Shell interface {
	Run(ctx context.Context, m Machine, script []byte) error
}

// Provider is the static provider. It implements providers.Provider and is
// safe for concurrent use.
type Provider struct {
	client       kubernetes.Interface
	cluster      string
	namespace    string
	machines     []Machine          // in config order
	byHost       map[string]Machine // same machines, by Host
	types        map[string]providers.MachineType
	typeNames    []string // sorted, for messages
	shell        Shell
	reset        string
	drainTimeout time.Duration
	drainPoll    time.Duration // tests shorten it
	log          *slog.Logger
	now          func() time.Time

	// names serialises Creates of one machine name in this process, so a
	// retry racing its own first attempt can't claim two machines.
	names keyedMutex
	// hosts serialises Deletes of one host in this process.
	hosts keyedMutex
	// lostRaces counts claims another replica (or Create) took between
	// our list and our create; tests read it.
	lostRaces atomic.Int64
}

var _ providers.Provider = (*Provider)(nil)

// New checks o and returns a Provider. It makes no API call and opens no
// connection.
func New(o Options) (*Provider, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("static: Options.Client is nil: give a clientset for the target cluster, where the claims live")
	case o.Shell == nil:
		return nil, errors.New("static: Options.Shell is nil: give NewSSHShell's result")
	case o.Cluster == "":
		return nil, errors.New("static: Options.Cluster is empty: it labels (" + providers.LabelCluster + ") every claim")
	}
	if errs := validation.IsValidLabelValue(o.Cluster); len(errs) > 0 {
		return nil, fmt.Errorf("static: Options.Cluster %q is not a valid label value: %s", o.Cluster, strings.Join(errs, "; "))
	}
	ns := o.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, fmt.Errorf("static: Options.Namespace %q is not a valid namespace name: %s", ns, strings.Join(errs, "; "))
	}
	types := make(map[string]providers.MachineType, len(o.MachineTypes))
	for i, mt := range o.MachineTypes {
		switch {
		case mt.Name == "":
			return nil, fmt.Errorf("static: Options.MachineTypes[%d] has no name", i)
		case mt.MilliCPU <= 0 || mt.MemoryBytes <= 0:
			return nil, fmt.Errorf("static: machine type %q: declare its cpu and memory (got %d millicores, %d bytes)", mt.Name, mt.MilliCPU, mt.MemoryBytes)
		}
		if _, dup := types[mt.Name]; dup {
			return nil, fmt.Errorf("static: machine type %q is declared twice", mt.Name)
		}
		if mt.Arch == "" {
			mt.Arch = "amd64"
		}
		types[mt.Name] = mt
	}
	if len(o.Machines) == 0 {
		return nil, errors.New("static: the pool is empty: list at least one machine")
	}
	byHost := make(map[string]Machine, len(o.Machines))
	machines := make([]Machine, 0, len(o.Machines))
	for i, m := range o.Machines {
		if err := providerid.Valid(m.Host); err != nil {
			return nil, fmt.Errorf("static: machines[%d]: %w", i, err)
		}
		if _, dup := byHost[m.Host]; dup {
			return nil, fmt.Errorf("static: machine %q is listed twice; hosts must be unique", m.Host)
		}
		if _, ok := types[m.MachineType]; !ok {
			return nil, fmt.Errorf("static: machine %q: machine type %q is not declared; declared: %s", m.Host, m.MachineType, strings.Join(slices.Sorted(maps.Keys(types)), ", "))
		}
		if m.Port == 0 {
			m.Port = DefaultPort
		}
		if m.Port < 0 || m.Port > 65535 {
			return nil, fmt.Errorf("static: machine %q: port %d is not a TCP port", m.Host, m.Port)
		}
		if m.User == "" {
			m.User = DefaultUser
		}
		for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return nil, fmt.Errorf("static: machine %q: label key %q: %s", m.Host, k, strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(m.Labels[k]); len(errs) > 0 {
				return nil, fmt.Errorf("static: machine %q: label %s: value %q: %s", m.Host, k, m.Labels[k], strings.Join(errs, "; "))
			}
		}
		byHost[m.Host] = m
		machines = append(machines, m)
	}
	reset := o.ResetCommand
	if reset == "" {
		reset = DefaultResetCommand
	}
	drain := o.DrainTimeout
	if drain <= 0 {
		drain = DefaultDrainTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Provider{
		client:       o.Client,
		cluster:      o.Cluster,
		namespace:    ns,
		machines:     machines,
		byHost:       byHost,
		types:        types,
		typeNames:    slices.Sorted(maps.Keys(types)),
		shell:        o.Shell,
		reset:        reset,
		drainTimeout: drain,
		drainPoll:    defaultDrainPoll,
		log:          log.With("provider", "static", "cluster", o.Cluster),
		now:          now,
	}, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return "static" }

// ProviderID implements providers.Provider: which machine a request gets is
// decided when Create claims one, so the id is not known before.
func (p *Provider) ProviderID(providers.CreateRequest) (string, bool) { return "", false }

// Capabilities implements providers.Provider: a pool machine runs whatever
// is installed on it, so every node takes the runtime-install path, and it
// has no datasource: the node script itself is piped to its shell. Prices
// are what the config declares of its machine types.
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{BootsImages: false, UserData: providers.UserDataScript,
		PriceFix: "set pricePerHour on the machine type in providers.static.machineTypes"}
}

// TopologyLabels implements providers.Provider: nodes carry zone=<zone>.
func (p *Provider) TopologyLabels(string) map[string]string { return nil }

// Run implements providers.Provider: the provider has no background work.
func (p *Provider) Run(context.Context) error { return nil }

// MachineType implements providers.Provider, from the declared types. The
// location does not matter: a type is what the config says it is.
func (p *Provider) MachineType(_ context.Context, name, location string) (providers.MachineType, error) {
	mt, ok := p.types[name]
	if !ok {
		return providers.MachineType{}, fmt.Errorf("static: machine type %q (location %q): %w; declared types: %s", name, location, providers.ErrNotFound, strings.Join(p.typeNames, ", "))
	}
	return mt, nil
}

// keyedMutex is a set of mutexes by key, made on first use and dropped when
// unused.
type keyedMutex struct {
	mu    sync.Mutex // guards locks
	locks map[string]*keyedLock
}

type keyedLock struct {
	mu    sync.Mutex
	users int // goroutines holding or waiting for mu; guarded by keyedMutex.mu
}

// lock locks key and returns its unlock.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// Park implements providers.Provider: this provider keeps no warm pool;
// a pool machine is someone else's to power: it is claimed, never stopped.
func (p *Provider) Park(context.Context, string, providers.StandbyState) error {
	return providers.StandbyUnsupported("static")
}

// Resume implements providers.Provider: this provider keeps no warm pool.
func (p *Provider) Resume(context.Context, string, []byte) (providers.Instance, error) {
	return providers.Instance{}, providers.StandbyUnsupported("static")
}
