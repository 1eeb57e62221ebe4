package gce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"golang.org/x/time/rate"
	"google.golang.org/api/option"
	httptransport "google.golang.org/api/transport/http"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

// Defaults.
const (
	// DefaultImage and DefaultImageArm64 boot groups without an image
	// channel: Ubuntu 24.04 LTS, newest of its family, per architecture.
	DefaultImage      = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
	DefaultImageArm64 = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-arm64"
	// DefaultDiskSizeGB is the boot disk size.
	DefaultDiskSizeGB = 50
	// DefaultMachineTypeTTL is how long a machine type is cached.
	DefaultMachineTypeTTL = 10 * time.Minute
	// DefaultRate and DefaultBurst pace all requests of one provider.
	// Compute Engine's default limits are per project and minute, per
	// method group (reads, writes, operation polls), counted in the
	// thousands; 20/s leaves most of that to the other users of the
	// project.
	DefaultRate  = rate.Limit(20)
	DefaultBurst = 40
	// pageSize is the largest page the API serves.
	pageSize = 500
)

// Options configures a Provider.
type Options struct {
	// Project is the project instances live in. Required.
	Project string
	// CredentialsJSON is a service-account key. Empty means Application
	// Default Credentials, or no authentication when Endpoint is set (the
	// fake).
	CredentialsJSON []byte
	// Endpoint overrides the API URL (tests point it at gcefake).
	Endpoint string
	// Cluster is the value of providers.LabelCluster on everything we own.
	Cluster string
	// Image and ImageArm64 are the boot images of groups without an image
	// channel, by the machine type's architecture: an image
	// ("projects/<p>/global/images/<name>") or a family
	// (".../images/family/<family>"). Defaults DefaultImage and
	// DefaultImageArm64.
	Image      string
	ImageArm64 string
	// Network and Subnetwork attach each instance's one interface; empty
	// Network means the project's "default" network.
	Network    string
	Subnetwork string
	// ExternalIP gives each instance an ephemeral public address.
	ExternalIP bool
	// ServiceAccount is the e-mail of the service account instances run as;
	// empty means none.
	ServiceAccount string
	// BuilderZone is the zone image builders boot in when the build names
	// none (imagecatalog.BuilderSpec.Location); empty means the build must.
	BuilderZone string
	// DiskSizeGB is the boot disk size; default DefaultDiskSizeGB.
	DiskSizeGB int64
	// MachineTypeTTL defaults to DefaultMachineTypeTTL.
	MachineTypeTTL time.Duration
	// Prices are the machine types' prices per hour: the Compute API has
	// none. A type without an entry has no price (PricePerHour 0).
	Prices []Price
	// Rate and Burst pace every request; defaults DefaultRate and
	// DefaultBurst.
	Rate  rate.Limit
	Burst int
	// WireGuardFirewall makes Run keep the cluster's Cilium WireGuard
	// firewall rule (EnsureWireGuardFirewall) and gives every instance
	// Create makes the network tag it selects (WireGuardTag): a group has
	// the cilium-wireguard network mode.
	WireGuardFirewall bool
	// HTTPClient is the base client; default one from the credentials.
	HTTPClient *http.Client
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Provider is the Compute Engine provider. It implements providers.Provider
// and is safe for concurrent use.
type Provider struct {
	o         Options
	instances *compute.InstancesClient
	zoneOps   *compute.ZoneOperationsClient
	globalOps *compute.GlobalOperationsClient
	types     *compute.MachineTypesClient
	imagesAPI *compute.ImagesClient
	firewalls *compute.FirewallsClient
	images    *Images
	log       *slog.Logger

	// typesMu guards typeCache (machine types by "zone/name") and is held
	// through a cache miss's fetch.
	typesMu   sync.Mutex
	typeCache map[string]cachedType
}

type cachedType struct {
	mt providers.MachineType
	at time.Time
}

var _ providers.Provider = (*Provider)(nil)

// New returns a provider. It makes no API call.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.Project == "" {
		return nil, errors.New("gce: the project is required (providers.gce.project)")
	}
	if o.Cluster == "" {
		return nil, errors.New("gce: the cluster name is required: it labels every instance we own")
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.ImageArm64 == "" {
		o.ImageArm64 = DefaultImageArm64
	}
	if o.DiskSizeGB <= 0 {
		o.DiskSizeGB = DefaultDiskSizeGB
	}
	if o.MachineTypeTTL <= 0 {
		o.MachineTypeTTL = DefaultMachineTypeTTL
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	base := o.HTTPClient
	if base == nil {
		var authOpts []option.ClientOption
		switch {
		case len(o.CredentialsJSON) > 0:
			authOpts = append(authOpts, option.WithAuthCredentialsJSON(option.ServiceAccount, o.CredentialsJSON),
				option.WithScopes("https://www.googleapis.com/auth/compute"))
		case o.Endpoint != "":
			authOpts = append(authOpts, option.WithoutAuthentication())
		default:
			authOpts = append(authOpts, option.WithScopes("https://www.googleapis.com/auth/compute"))
		}
		hc, _, err := httptransport.NewClient(ctx, authOpts...)
		if err != nil {
			return nil, fmt.Errorf("gce: credentials: %w (set providers.gce.credentials to a service-account key file or env)", err)
		}
		base = hc
	}
	hc := *base
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc.Transport = &limited{next: next, lim: rate.NewLimiter(o.Rate, o.Burst)}
	opts := []option.ClientOption{option.WithHTTPClient(&hc)}
	if o.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(o.Endpoint))
	}
	p := &Provider{o: o, log: o.Logger, typeCache: map[string]cachedType{}}
	var err error
	if p.instances, err = compute.NewInstancesRESTClient(ctx, opts...); err != nil {
		return nil, fmt.Errorf("gce: instances client: %w", err)
	}
	if p.zoneOps, err = compute.NewZoneOperationsRESTClient(ctx, opts...); err != nil {
		return nil, fmt.Errorf("gce: zone operations client: %w", err)
	}
	if p.globalOps, err = compute.NewGlobalOperationsRESTClient(ctx, opts...); err != nil {
		return nil, fmt.Errorf("gce: global operations client: %w", err)
	}
	if p.types, err = compute.NewMachineTypesRESTClient(ctx, opts...); err != nil {
		return nil, fmt.Errorf("gce: machine types client: %w", err)
	}
	if p.imagesAPI, err = compute.NewImagesRESTClient(ctx, opts...); err != nil {
		return nil, fmt.Errorf("gce: images client: %w", err)
	}
	if p.firewalls, err = compute.NewFirewallsRESTClient(ctx, opts...); err != nil {
		return nil, fmt.Errorf("gce: firewalls client: %w", err)
	}
	p.images = &Images{p: p}
	return p, nil
}

// Close releases the clients' connections.
func (p *Provider) Close() error {
	return errors.Join(p.instances.Close(), p.zoneOps.Close(), p.globalOps.Close(), p.types.Close(), p.imagesAPI.Close(), p.firewalls.Close())
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return "gce" }

// Capabilities implements providers.Provider: instances boot catalog images
// (images.go) and read the user-data metadata item with cloud-init (or
// Ignition). Prices come from Options.Prices: the Compute API has none.
// Warm-pool standbys park stopped or suspended and get their join through
// the resume hook (standby.go).
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{BootsImages: true, UserData: providers.UserDataCloudInit,
		PriceFix: "add the machine type and the group's region to providers.gce.prices (the Compute API has no prices; " +
			"Google publishes them at https://cloud.google.com/compute/vm-instance-pricing)",
		Standby: standbyStates, StandbyResume: bootstrap.ResumeByGCEMetadata}
}

// TopologyLabels implements providers.Provider: nodes carry zone=<zone> and
// the zone's region, as GCE's cloud controller labels them.
func (p *Provider) TopologyLabels(string) map[string]string { return nil }

// Run implements providers.Provider: with Options.WireGuardFirewall it
// ensures the cluster's WireGuard firewall rule, retrying with backoff until
// that succeeds (instances created meanwhile carry the tag already, and the
// rule selects them once it exists); otherwise there is no background work.
func (p *Provider) Run(ctx context.Context) error {
	if !p.o.WireGuardFirewall {
		return nil
	}
	for delay := 5 * time.Second; ; delay = min(2*delay, 5*time.Minute) {
		res, err := p.EnsureWireGuardFirewall(ctx)
		if err == nil {
			p.log.Info("gce: WireGuard firewall rule in place", "firewall", res.Name, "created", res.Created, "updated", res.Updated)
			return nil
		}
		p.log.Warn("gce: WireGuard firewall rule not in place; retrying", "err", err, "retryIn", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Project is the project the provider works in.
func (p *Provider) Project() string { return p.o.Project }

// limited is an http.RoundTripper that paces requests with one token
// bucket. It waits on the request's context; the compute library's list
// calls (aggregatedList, list) send their requests without the caller's
// context, so their wait can't be cut short by it.
type limited struct {
	next http.RoundTripper
	lim  *rate.Limiter
}

func (l *limited) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := l.lim.Wait(req.Context()); err != nil {
		return nil, err
	}
	return l.next.RoundTrip(req)
}

// waitZone waits for a zone operation to be DONE and returns its error, if
// it ended with one. operations.wait returns after at most two minutes
// even when the operation runs on, so it loops until ctx ends.
func (p *Provider) waitZone(ctx context.Context, zone string, op *compute.Operation) error {
	pb := op.Proto()
	pause := pollPause()
	for pb.GetStatus() != computepb.Operation_DONE {
		if err := pause(ctx); err != nil {
			return fmt.Errorf("wait for operation %s: %w", op.Name(), err)
		}
		var err error
		pb, err = p.zoneOps.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: p.o.Project, Zone: zone, Operation: pb.GetName()})
		if err != nil {
			return fmt.Errorf("wait for operation %s: %w", op.Name(), err)
		}
	}
	return operationError(pb)
}

// waitGlobalProto is waitZone for global operations (images).
func (p *Provider) waitGlobalProto(ctx context.Context, pb *computepb.Operation) error {
	name := pb.GetName()
	pause := pollPause()
	for pb.GetStatus() != computepb.Operation_DONE {
		if err := pause(ctx); err != nil {
			return fmt.Errorf("wait for operation %s: %w", name, err)
		}
		var err error
		pb, err = p.globalOps.Wait(ctx, &computepb.WaitGlobalOperationRequest{Project: p.o.Project, Operation: name})
		if err != nil {
			return fmt.Errorf("wait for operation %s: %w", name, err)
		}
	}
	return operationError(pb)
}

// pollPause returns the pause before each operations.wait call: none
// before the first; after a wait that came back early without DONE (the
// API may), a backoff from 50ms doubling to 2s, so a loop never spins.
func pollPause() func(ctx context.Context) error {
	var d time.Duration
	return func(ctx context.Context) error {
		if d == 0 {
			d = 50 * time.Millisecond
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		d = min(2*d, 2*time.Second)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
}
