package hcloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"golang.org/x/time/rate"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

// Defaults.
const (
	// DefaultImage is the base image: what a machine boots when its group
	// has no image channel or the channel gives no snapshot (runtime
	// install). Hetzner picks the build for the server type's architecture.
	DefaultImage = "ubuntu-24.04"
	// DefaultServerTypeTTL is how long the server type table is cached.
	DefaultServerTypeTTL = 10 * time.Minute
	// DefaultRate and DefaultBurst pace requests while the RateLimit
	// headers show plenty of budget (Hetzner: 3600/h, so 1/s sustained).
	DefaultRate  = rate.Limit(5)
	DefaultBurst = 20
	// DefaultPollInterval is Options.PollInterval's default: a
	// create_server action takes seconds, so polls at 1, 3, 7 and 15 s
	// see most through in four requests.
	DefaultPollInterval = time.Second
	// perPage is the largest page the API serves.
	perPage = 50
)

// Options configures a Provider.
type Options struct {
	// Token is the API token. Required.
	Token string
	// Endpoint overrides the API URL (tests point it at hcloudfake).
	Endpoint string
	// Cluster is the value of providers.LabelCluster on everything we own.
	Cluster string
	// Image is the image name or id every server boots; default
	// DefaultImage.
	Image string
	// Networks, Firewalls and SSHKeys are ids attached to every server;
	// PlacementGroup, when not 0, is the spread group they join.
	Networks       []int64
	Firewalls      []int64
	SSHKeys        []int64
	PlacementGroup int64
	// ServerTypeTTL defaults to DefaultServerTypeTTL.
	ServerTypeTTL time.Duration
	// Rate and Burst pace requests while budget is plentiful; defaults
	// DefaultRate and DefaultBurst.
	Rate  rate.Limit
	Burst int
	// ScanShare is the share of the hourly request budget (RateLimit-Limit)
	// that full scans of the cluster's servers may use; it sets how often
	// List scans (see inventory). Default DefaultScanShare. Negative: a
	// full scan on every List, the behaviour before the inventory (kept
	// for the benchmark's comparison).
	ScanShare float64
	// Budget, when above 0, is the hourly request budget scans are paced
	// by, in place of the RateLimit-Limit the API reports (3,600 by
	// default). The benchmark sets it: its fake API's limit is off.
	Budget int
	// PollInterval is the first wait before an action (a create_server that
	// Create waits for, an image's snapshot) is polled; later waits double
	// up to ten times it. Default DefaultPollInterval.
	PollInterval time.Duration
	// RetryBase is the first backoff of hcloud-go's retries (429, conflict,
	// 502, 504), doubled each time with full jitter up to a minute; default
	// 1s. MaxRetries defaults to 3; negative means none.
	RetryBase  time.Duration
	MaxRetries int
	// HTTPClient is the base transport's client; default http.DefaultClient.
	HTTPClient *http.Client
	// WireGuardFirewall makes Run keep the cluster's Cilium WireGuard
	// firewall (EnsureWireGuardFirewall): a group has the cilium-wireguard
	// network mode.
	WireGuardFirewall bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// BuilderDial connects to the SSH port of an image builder (see
	// BuilderReport) or a warm-pool standby (standby.go); default a
	// net.Dialer. Tests point it at a stand-in sshd on loopback.
	BuilderDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// StandbySSHKey is the SSH client key (unencrypted, PEM or OpenSSH)
	// prebake logs in to warm-pool standbys with, as root (standby.go). nil
	// keeps no warm pool: Capabilities.Standby is empty.
	StandbySSHKey []byte
	// StandbySSHPrivate dials a standby at its IP in the first of Networks
	// instead of its public IPv4.
	StandbySSHPrivate bool
}

// Provider is the Hetzner Cloud provider. It implements providers.Provider
// and is safe for concurrent use.
type Provider struct {
	wireGuard bool // Options.WireGuardFirewall
	client    *hcloud.Client
	cluster   string
	image     string
	networks  []*hcloud.Network
	fws       []*hcloud.ServerCreateFirewall
	sshKeys   []*hcloud.SSHKey
	pg        *hcloud.PlacementGroup
	typeTTL   time.Duration
	pacer     *pacer
	log       *slog.Logger
	// scanShare and budget are Options.ScanShare and Budget; inv is what
	// List answers from.
	scanShare float64
	budget    int
	inv       *inventory
	now       func() time.Time

	builderDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// poll is Options.PollInterval: how often stopServer looks whether a
	// standby is off.
	poll time.Duration

	// standby is how prebake logs in to warm-pool standbys; nil keeps no
	// warm pool.
	standby *standbyAccess
	// standbyMu guards probes and resuming (standby.go).
	standbyMu sync.Mutex
	probes    map[int64]standbyProbe
	resuming  map[int64]bool

	// buildersMu guards builders: the SSH keys of the image builders this
	// process booted, by server id. They live in memory only.
	buildersMu sync.Mutex
	builders   map[string]builderAccess

	// zonesMu guards zones: each location's datacenter, which Hetzner's CCM
	// sets as the node's zone; "" where a location has several. Loaded once,
	// by the first MachineType that succeeds.
	zonesMu sync.Mutex
	zones   map[string]string

	// failedMu guards failed: the servers whose create_server action
	// ended in error, by id, until a List no longer finds them; true once
	// our delete of one was accepted.
	failedMu sync.Mutex
	failed   map[int64]bool

	// typesMu guards types and typesAt: the cached server type table.
	typesMu sync.Mutex
	types   map[string]*hcloud.ServerType
	typesAt time.Time
}

var _ providers.Provider = (*Provider)(nil)

// New returns a provider. It makes no API call.
func New(o Options) (*Provider, error) {
	if o.Token == "" {
		return nil, errors.New("hcloud: an API token is required (providers.hcloud.token)")
	}
	if o.Cluster == "" {
		return nil, errors.New("hcloud: the cluster name is required: it labels every server we own")
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.ServerTypeTTL <= 0 {
		o.ServerTypeTTL = DefaultServerTypeTTL
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.RetryBase <= 0 {
		o.RetryBase = time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.ScanShare == 0 {
		o.ScanShare = DefaultScanShare
	}
	switch {
	case o.MaxRetries == 0:
		o.MaxRetries = 3
	case o.MaxRetries < 0:
		o.MaxRetries = 0
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BuilderDial == nil {
		o.BuilderDial = (&net.Dialer{}).DialContext
	}
	base := http.DefaultTransport
	hc := &http.Client{}
	if o.HTTPClient != nil {
		*hc = *o.HTTPClient
		if hc.Transport != nil {
			base = hc.Transport
		}
	}
	pc := newPacer(base, o.Rate, o.Burst, o.Now)
	hc.Transport = pc
	opts := []hcloud.ClientOption{
		hcloud.WithToken(o.Token),
		hcloud.WithApplication("prebake", ""),
		hcloud.WithHTTPClient(hc),
		hcloud.WithRetryOpts(hcloud.RetryOpts{
			BackoffFunc: hcloud.ExponentialBackoffWithOpts(hcloud.ExponentialBackoffOpts{
				Base: o.RetryBase, Multiplier: 2, Cap: time.Minute, Jitter: true,
			}),
			MaxRetries: o.MaxRetries,
		}),
		hcloud.WithPollOpts(hcloud.PollOpts{
			BackoffFunc: hcloud.ExponentialBackoffWithOpts(hcloud.ExponentialBackoffOpts{
				Base: o.PollInterval, Multiplier: 2, Cap: 10 * o.PollInterval,
			}),
		}),
	}
	if o.Endpoint != "" {
		opts = append(opts, hcloud.WithEndpoint(o.Endpoint))
	}
	p := &Provider{
		wireGuard:   o.WireGuardFirewall,
		client:      hcloud.NewClient(opts...),
		cluster:     o.Cluster,
		image:       o.Image,
		typeTTL:     o.ServerTypeTTL,
		pacer:       pc,
		log:         o.Logger,
		now:         o.Now,
		builderDial: o.BuilderDial,
		poll:        o.PollInterval,
		probes:      map[int64]standbyProbe{},
		resuming:    map[int64]bool{},
		builders:    map[string]builderAccess{},
		failed:      map[int64]bool{},
		scanShare:   o.ScanShare,
		budget:      o.Budget,
		inv:         newInventory(),
	}
	for _, id := range o.Networks {
		p.networks = append(p.networks, &hcloud.Network{ID: id})
	}
	for _, id := range o.Firewalls {
		p.fws = append(p.fws, &hcloud.ServerCreateFirewall{Firewall: hcloud.Firewall{ID: id}})
	}
	for _, id := range o.SSHKeys {
		p.sshKeys = append(p.sshKeys, &hcloud.SSHKey{ID: id})
	}
	if o.PlacementGroup != 0 {
		p.pg = &hcloud.PlacementGroup{ID: o.PlacementGroup}
	}
	if len(o.StandbySSHKey) > 0 {
		a, err := newStandbyAccess(o.StandbySSHKey, o.StandbySSHPrivate, o.Networks)
		if err != nil {
			return nil, err
		}
		p.standby = a
	}
	return p, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return "hcloud" }

// Capabilities implements providers.Provider: Hetzner boots snapshots, so a
// group's channel resolves to a snapshot id that Create boots (servers.go;
// the catalog's operations on them are in images.go), and servers read
// user-data with cloud-init (or Ignition). Prices are Hetzner's, per
// location, from the server-type list (machinetype.go); the config has no
// field to override them. With a standby SSH key it keeps warm-pool
// standbys powered off, and joins them over SSH (standby.go).
func (p *Provider) Capabilities() providers.Capabilities {
	c := providers.Capabilities{BootsImages: true, UserData: providers.UserDataCloudInit,
		PriceFix: "Hetzner's server-type list gives the type no price in the group's location; " +
			"move the group to a location where Hetzner prices it (`hcloud server-type describe <type>` lists its prices per location)"}
	if p.standby != nil {
		c.Standby, c.StandbyResume = standbyStates, bootstrap.ResumeBySSH
	}
	return c
}

// Run implements providers.Provider: with Options.WireGuardFirewall it
// ensures the cluster's WireGuard firewall, retrying with backoff until that
// succeeds (machines created meanwhile get it through its label selector
// once it exists); otherwise there is no background work.
func (p *Provider) Run(ctx context.Context) error {
	if !p.wireGuard {
		return nil
	}
	for delay := 5 * time.Second; ; delay = min(2*delay, 5*time.Minute) {
		res, err := p.EnsureWireGuardFirewall(ctx, nil)
		if err == nil {
			p.log.Info("hcloud: WireGuard firewall in place", "firewall", res.ID, "created", res.Created, "updated", res.Updated, "reason", res.Reason)
			return nil
		}
		p.log.Warn("hcloud: WireGuard firewall not in place; retrying", "err", err, "retryIn", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// ProviderID implements providers.Provider: the server id is assigned by the
// API, so it is unknown before Create returns.
func (p *Provider) ProviderID(providers.CreateRequest) (string, bool) { return "", false }

// MachineType implements providers.Provider from the cached server types.
func (p *Provider) MachineType(ctx context.Context, name, location string) (providers.MachineType, error) {
	types, err := p.serverTypes(ctx)
	if err != nil {
		return providers.MachineType{}, err
	}
	st, ok := types[name]
	if !ok {
		return providers.MachineType{}, fmt.Errorf("hcloud server type %q: %w (see `hcloud server-type list`)", name, providers.ErrNotFound)
	}
	if err := p.loadZones(ctx); err != nil {
		return providers.MachineType{}, err
	}
	return machineType(st, location)
}

// loadZones fills zones from the datacenter list, once. It is part of
// MachineType, which templates are built from, so a template never lacks a
// zone its nodes will carry; the lock is not held across the call.
func (p *Provider) loadZones(ctx context.Context) error {
	p.zonesMu.Lock()
	loaded := p.zones != nil
	p.zonesMu.Unlock()
	if loaded {
		return nil
	}
	all, err := p.client.Datacenter.All(ctx)
	if err != nil {
		return fmt.Errorf("hcloud: list datacenters (each location's datacenter is its nodes' zone label): %w", err)
	}
	zones := map[string]string{}
	for _, dc := range all {
		if dc.Location == nil {
			continue
		}
		if _, seen := zones[dc.Location.Name]; seen {
			zones[dc.Location.Name] = "" // several: the CCM's zone depends on where the server lands
			continue
		}
		zones[dc.Location.Name] = dc.Name
	}
	p.zonesMu.Lock()
	p.zones = zones
	p.zonesMu.Unlock()
	return nil
}

func (p *Provider) serverTypes(ctx context.Context) (map[string]*hcloud.ServerType, error) {
	p.typesMu.Lock()
	defer p.typesMu.Unlock()
	if p.types != nil && p.now().Sub(p.typesAt) < p.typeTTL {
		return p.types, nil
	}
	all, err := p.client.ServerType.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("hcloud: list server types: %w", err)
	}
	m := make(map[string]*hcloud.ServerType, len(all))
	for _, st := range all {
		m[st.Name] = st
	}
	p.types, p.typesAt = m, p.now()
	return m, nil
}
