package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker"
	"github.com/prebake-dev/prebake/providers/gce"
	"github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/kwok"
	"github.com/prebake-dev/prebake/providers/metrics"
	"github.com/prebake-dev/prebake/providers/static"
)

// Deps are what a provider constructor may need besides its config block.
type Deps struct {
	// Logger gets the provider's name as an attribute.
	Logger *slog.Logger
	// BuilderDial, when set, dials image builders over SSH for the provider
	// whose API is at endpoint (tests route it to a stand-in sshd); nil dials
	// the builder's address.
	BuilderDial func(endpoint string) func(ctx context.Context, network, addr string) (net.Conn, error)
	// Kube, when set, is the cluster a provider's kubeconfig would name (kwok's target);
	// tests pass a fake.
	Kube kubernetes.Interface
}

// Built is one provider built from a config.
type Built struct {
	Provider providers.Provider
	// Kube is the workload cluster the provider's config names (kwok's
	// target, static's claims), nil for providers without one.
	Kube kubernetes.Interface
}

// factory builds the provider of one config block.
type factory func(ctx context.Context, cfg *config.Config, d Deps) (Built, error)

// factories is the one table of providers: `prebake serve` builds every
// configured provider through it, `prebake images` the one whose images it
// works on. Adding a provider touches its package, the config schema and
// this table.
var factories = map[string]struct {
	build factory
	// images: the provider implements the image catalog's build API, so
	// `prebake images` can build, sync and gc its images.
	images bool
}{
	"kwok":   {build: newKwok},
	"hcloud": {build: newHcloud, images: true},
	"gce":    {build: newGCE, images: true},
	"static": {build: newStatic},
	"docker": {build: newDocker, images: true},
}

// ImageProviders are the providers cfg configures whose images the catalog
// manages, in config order; AllImageProviders all this build has.
func ImageProviders(cfg *config.Config) []string {
	var out []string
	for _, n := range cfg.Providers.Names() {
		if factories[n].images {
			out = append(out, n)
		}
	}
	return out
}

// AllImageProviders are the providers with an image API in this build,
// sorted.
func AllImageProviders() []string {
	var out []string
	for n, f := range factories {
		if f.images {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// NewProvider builds the provider name of cfg, unwrapped: the concrete type,
// with the image API and builders of providers that have them.
func NewProvider(ctx context.Context, cfg *config.Config, name string, d Deps) (Built, error) {
	f, ok := factories[name]
	if !ok || f.build == nil {
		return Built{}, fmt.Errorf("provider %q: this build has no such provider", name)
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Logger = d.Logger.With("provider", name)
	b, err := f.build(ctx, cfg, d)
	if err != nil {
		return Built{}, fmt.Errorf("providers.%s: %w", name, err)
	}
	return b, nil
}

// builtProviders are the configured providers as the core serves them.
type builtProviders struct {
	providers map[string]providers.Provider
	// kube is the workload cluster, when a provider brought one (the first
	// in config order).
	kube kubernetes.Interface
}

// buildProviders builds every configured provider, each measured.
func buildProviders(ctx context.Context, cfg *config.Config, m *metrics.APIMetrics, log *slog.Logger, kube kubernetes.Interface) (builtProviders, error) {
	out := builtProviders{providers: map[string]providers.Provider{}}
	for _, name := range cfg.Providers.Names() {
		b, err := NewProvider(ctx, cfg, name, Deps{Logger: log, Kube: kube})
		if err != nil {
			return out, err
		}
		out.providers[name] = metrics.Wrap(b.Provider, m)
		if out.kube == nil {
			out.kube = b.Kube
		}
	}
	return out, nil
}

func newKwok(_ context.Context, cfg *config.Config, d Deps) (Built, error) {
	k := cfg.Providers.Kwok
	if d.Kube != nil {
		return kwokOn(d.Kube, cfg, d)
	}
	rc, err := restConfig(k.Kubeconfig, "providers.kwok.kubeconfig")
	var noCluster error
	if errors.Is(err, errNoKubeconfig) {
		// Serve the groups and templates anyway; List fails with the fix
		// until the config names a cluster, so /readyz stays 503 and
		// Refresh answers Unavailable: nothing is created blind.
		d.Logger.Warn("kwok provider has no target cluster; serving read-only until one is configured", "err", err)
		noCluster, rc, err = fmt.Errorf("providers.kwok: %w", err), &rest.Config{}, nil
	}
	if err != nil {
		return Built{}, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Built{}, err
	}
	if noCluster == nil {
		return kwokOn(client, cfg, d)
	}
	b, err := kwokOn(client, cfg, d)
	if err != nil {
		return Built{}, err
	}
	return Built{Provider: offline{Provider: b.Provider, err: noCluster}}, nil
}

// kwokOn is the kwok provider of cfg on the cluster of client.
func kwokOn(client kubernetes.Interface, cfg *config.Config, d Deps) (Built, error) {
	k := cfg.Providers.Kwok
	p, err := kwok.New(kwok.Options{
		Client:       client,
		Cluster:      cfg.ClusterName,
		Namespace:    k.Namespace,
		Boot:         kwok.BootProfile{Prebaked: k.SimulatedBoot.Prebaked.Duration, RuntimeInstall: k.SimulatedBoot.RuntimeInstall.Duration},
		MachineTypes: k.MachineTypeList(),
		Capacity:     k.Capacity,
		Reserved:     cfg.Reserved(),
		GPULabel:     cfg.GPULabel,
		Logger:       d.Logger,
	})
	if err != nil {
		return Built{}, err
	}
	return Built{Provider: p, Kube: client}, nil
}

func newHcloud(_ context.Context, cfg *config.Config, d Deps) (Built, error) {
	h := cfg.Providers.Hcloud
	token, err := h.Token.Resolve()
	if err != nil {
		return Built{}, fmt.Errorf("token: %w", err)
	}
	o := hcloud.Options{
		Token:          token,
		Endpoint:       h.Endpoint,
		Cluster:        cfg.ClusterName,
		Image:          h.Image,
		Networks:       h.Networks,
		Firewalls:      h.Firewalls,
		SSHKeys:        h.SSHKeys,
		PlacementGroup: h.PlacementGroup,
		// Kept by the provider's Run, so only a serving prebake does it.
		WireGuardFirewall: cfg.UsesCiliumWireGuard("hcloud"),
		Logger:            d.Logger,
	}
	if d.BuilderDial != nil {
		o.BuilderDial = d.BuilderDial(h.Endpoint)
	}
	if h.HasStandbySSHKey() {
		// The warm pool's standbys are joined over SSH with it.
		key, err := h.StandbySSHKey.Resolve()
		if err != nil {
			return Built{}, fmt.Errorf("standbySSHKey: %w", err)
		}
		o.StandbySSHKey = []byte(key + "\n")
		o.StandbySSHPrivate = h.StandbySSHAddress == config.StandbySSHPrivate
	}
	p, err := hcloud.New(o)
	if err != nil {
		return Built{}, err
	}
	return Built{Provider: p}, nil
}

// newGCE builds the Compute Engine provider. Builders boot in the one zone
// of cfg's gce node groups when they use exactly one and the build names
// none.
func newGCE(ctx context.Context, cfg *config.Config, d Deps) (Built, error) {
	g := cfg.Providers.Gce
	var key []byte
	if g.Credentials != (config.SecretRef{}) {
		k, err := g.Credentials.Resolve()
		if err != nil {
			return Built{}, fmt.Errorf("credentials: %w", err)
		}
		key = []byte(k)
	}
	zones := map[string]bool{}
	for _, ng := range cfg.NodeGroups {
		if ng.Provider == "gce" && ng.Location != "" {
			zones[ng.Location] = true
		}
	}
	builderZone := ""
	if len(zones) == 1 {
		for z := range zones {
			builderZone = z
		}
	}
	prices := make([]gce.Price, 0, len(g.Prices))
	for _, p := range g.Prices {
		prices = append(prices, gce.Price{MachineType: p.MachineType, Region: p.Region, PerHour: p.PricePerHour})
	}
	p, err := gce.New(ctx, gce.Options{
		Project:           g.Project,
		CredentialsJSON:   key,
		Endpoint:          g.Endpoint,
		Cluster:           cfg.ClusterName,
		Image:             g.Image,
		ImageArm64:        g.ImageArm64,
		Network:           g.Network,
		Subnetwork:        g.Subnetwork,
		ExternalIP:        g.ExternalIP,
		ServiceAccount:    g.ServiceAccount,
		BuilderZone:       builderZone,
		DiskSizeGB:        g.DiskSizeGB,
		Prices:            prices,
		Rate:              rate.Limit(g.QPS),
		Burst:             g.Burst,
		WireGuardFirewall: cfg.UsesCiliumWireGuard("gce"),
		Logger:            d.Logger,
	})
	if err != nil {
		return Built{}, err
	}
	return Built{Provider: p}, nil
}

// newStatic builds the static provider. Unlike kwok it needs its cluster
// to serve at all: the claims are the pool's only state.
func newStatic(_ context.Context, cfg *config.Config, d Deps) (Built, error) {
	s := cfg.Providers.Static
	rc, err := restConfig(s.Kubeconfig, "providers.static.kubeconfig")
	if err != nil {
		return Built{}, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Built{}, err
	}
	key, err := s.PrivateKey.Resolve()
	if err != nil {
		return Built{}, fmt.Errorf("privateKey: %w", err)
	}
	shell, err := static.NewSSHShell(static.SSHOptions{
		PrivateKey:     []byte(key + "\n"),
		KnownHostsFile: s.KnownHosts,
		ConnectTimeout: s.ConnectTimeout.Duration,
		CommandTimeout: s.CommandTimeout.Duration,
	})
	if err != nil {
		return Built{}, err
	}
	machines := make([]static.Machine, 0, len(s.Machines))
	for _, m := range s.Machines {
		machines = append(machines, static.Machine{
			Host: m.Host, Address: m.Address, Port: m.Port, User: m.User,
			MachineType: m.MachineType, Zone: m.Zone, Group: m.Group, Labels: m.Labels,
		})
	}
	p, err := static.New(static.Options{
		Client:       client,
		Cluster:      cfg.ClusterName,
		Namespace:    s.Namespace,
		Machines:     machines,
		MachineTypes: s.MachineTypeList(),
		Shell:        shell,
		ResetCommand: s.ResetCommand,
		DrainTimeout: s.DrainTimeout.Duration,
		Logger:       d.Logger,
	})
	if err != nil {
		return Built{}, err
	}
	return Built{Provider: p, Kube: client}, nil
}

func newDocker(_ context.Context, cfg *config.Config, d Deps) (Built, error) {
	k := cfg.Providers.Docker
	p, err := docker.New(docker.Options{
		Host:            k.Host,
		Cluster:         cfg.ClusterName,
		BaseImage:       k.BaseImage,
		ImageRepository: k.ImageRepository,
		NamePrefix:      k.ContainerNamePrefix,
		MachineTypes:    k.MachineTypeList(),
		Capacity:        k.Capacity,
		NodeRuntime:     k.NodeRuntime(),
		Reserved:        cfg.Reserved(),
		Logger:          d.Logger,
	})
	if err != nil {
		return Built{}, err
	}
	return Built{Provider: p}, nil
}

// offline is a provider without its cloud: every call that needs the cloud
// fails with err, which says how to configure it.
type offline struct {
	providers.Provider
	err error
}

func (o offline) List(context.Context) ([]providers.Instance, error) { return nil, o.err }
func (o offline) Create(context.Context, providers.CreateRequest) (providers.Instance, error) {
	return providers.Instance{}, o.err
}
func (o offline) Delete(context.Context, string) error { return o.err }
func (o offline) Run(context.Context) error            { return nil }
