package autoscaling

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// GroupSpec is one configured node group.
type GroupSpec struct {
	ID       string
	Provider string
	MinSize  int
	MaxSize  int
	// MachineType, Zone and Region place the group's machines.
	MachineType string
	Zone        string
	Region      string
	Labels      map[string]string
	Taints      []providers.Taint
	// ImageChannel is the catalog channel the group boots from; "" means the
	// runtime-install path.
	ImageChannel string
	// ImageOS and ImageK8sMinor narrow the channel's key ("ubuntu-2404",
	// "1.35"); "" matches any, and resolve errors if that is ambiguous.
	ImageOS, ImageK8sMinor string
	// ImageContainerImages are the container images the group's pods use
	// (image.containerImages): of the images the channel could resolve to,
	// the one that holds them all is chosen, and a machine booted from an
	// image that lacks some is reported (MissingImages).
	ImageContainerImages []string
	// UserData is passed to Create verbatim. Never logged.
	UserData []byte
	// WarmPool is the group's pool of standby machines; the zero value
	// keeps none.
	WarmPool WarmPool
}

// WorkerOptions bound each provider's creation and deletion workers.
type WorkerOptions struct {
	// Parallelism is the number of concurrent cloud calls per provider.
	Parallelism int
	// QPS and Burst rate-limit cloud calls per provider.
	QPS   float64
	Burst int
	// Retries is how often a retryable error is retried before it is shown
	// to CA as a creation error.
	Retries int
	// RetryBase is the first backoff; it doubles per retry.
	RetryBase time.Duration
	// CallTimeout bounds one cloud call.
	CallTimeout time.Duration
}

// Options configure a Core.
type Options struct {
	Cluster   string
	Groups    []GroupSpec
	Providers map[string]providers.Provider
	// RefreshInterval is the TTL of a provider's List: Refresh re-lists at
	// most this often.
	RefreshInterval time.Duration
	Reserved        providers.Reserved
	GPULabel        string
	Workers         WorkerOptions
	// Nodes, when set, deletes Node objects of deleted machines (there is no
	// CCM to do it) and feeds node registration and readiness into the
	// timeline. Nil disables both.
	Nodes NodeClient
	// Catalog is the image catalog that groups' channels resolve against,
	// reloaded on every sync. Nil means every group installs at runtime.
	Catalog CatalogSource
	// CheckCatalog, when set, runs on every catalog that loads (serve gives
	// config.Config.ImageRendererErrors: a channel that can resolve images
	// of two renderers). It returns, by group ID, why the group's new
	// machines must not be created against that catalog; they then fail
	// with code CodeMixedRenderers and that error until a load clears it.
	CheckCatalog func(imagecatalog.Catalog) map[string]error
	// UserData renders each machine's user-data (bootstrap) when the group
	// has no userDataFile; nil sends the group's UserData as is.
	UserData UserDataSource
	// Events receives image fallbacks and missing container images; nil
	// logs them only.
	Events   EventSink
	Metrics  *Metrics
	Logger   *slog.Logger
	Now      func() time.Time
	NameRand func() string
}

// Core is the autoscaling core. Create it with New, then Start it.
type Core struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	metrics *Metrics

	// groupOrder is the configured order; groups is read-only after New
	// except for the fields guarded by mu.
	groupOrder []string
	groups     map[string]*group

	workers map[string]*providerWorkers // by provider name; read-only after New

	// mu guards every group's instances, the index, and each instance's
	// mutable fields.
	mu    sync.RWMutex
	index index
	// nodeNames maps providerID to the Node name last observed for it.
	nodeNames map[string]string
	// forgotten holds, by providerID and by "name/"+machine name, when an
	// instance was forgotten, so a List that started before that moment
	// can't adopt it back (see reconcile). Purged per provider once no List
	// in flight started before the entry.
	forgotten map[string]tombstone
	closing   bool

	// syncMu serialises Sync; see refresh.go. kick asks the sync loop for
	// an early Sync.
	syncMu   sync.Mutex
	kick     chan struct{}
	lastSync map[string]time.Time // provider's last good List; guarded by mu
	synced   map[string]bool      // provider listed OK at least once; guarded by mu
	listErr  map[string]error     // provider's last List error; guarded by mu

	// catalog is the image catalog as last loaded; see images.go.
	catalog catalogHolder

	// poolMu serialises TendPools; poolKick asks the pool loop for an
	// early round (warmpool.go).
	poolMu   sync.Mutex
	poolKick chan struct{}

	wg sync.WaitGroup // owned goroutines: workers, runners, syncer, event senders
	// leases counts the Reservations not yet released; Shutdown waits for
	// them before it drains the workers, so a reserved machine is deleted
	// before the process goes.
	leases sync.WaitGroup
	cancel context.CancelFunc
	runCtx atomic.Pointer[context.Context] // Start's context, for event senders
}

type group struct {
	spec      GroupSpec
	provider  providers.Provider
	imageKind providers.ImageKind
	// template is the marshalled core/v1 Node; built in New, never empty.
	template    []byte
	machineType providers.MachineType
	// debug is CA's free-text description of the group.
	debug string
	// instances by machine name; guarded by Core.mu.
	instances map[string]*instance
}

// phase is where an instance stands in the core's own pipeline, finer than
// the state CA sees.
type phase int

const (
	phaseQueued   phase = iota // waiting for a worker
	phaseCreating              // a Create call is in flight
	phaseAccepted              // the cloud has it
	phaseFailed                // creation failed for good; CA deletes it
	phaseDeleting              // a delete was accepted
)

type instance struct {
	name       string
	providerID string
	// placeholder is true while providerID is not yet the real one.
	placeholder bool
	group       *group
	// req is what the workers send to Create; built once, at IncreaseSize.
	req   providers.CreateRequest
	phase phase
	state providers.InstanceState
	err   *providers.InstanceError
	// image is the catalog image id the machine boots ("" for runtime
	// install); fallback says why a group with a channel got none.
	image     string
	imageKind providers.ImageKind
	// family is the OS family the machine boots (the image's, or the
	// group's image.os on the runtime-install path): it picks the renderer.
	family   imagecatalog.Family
	fallback *Fallback
	// missing says which of the group's container images the image lacks.
	missing *MissingImages
	// manifest is the catalog's manifest of image (zero for runtime
	// install): what the image carries, at which versions.
	manifest imagecatalog.Manifest
	// refused, set at IncreaseSize, is why the machine must not be created
	// (Options.CheckCatalog refused its group); the worker fails it with it.
	refused error
	// adopted instances were found by List, not requested by this process:
	// their timeline is unknown and not observed.
	adopted bool
	// cancelled is set when the instance was cancelled while its Create was
	// in flight; the worker deletes what it created.
	cancelled bool
	// gone is set when the record is dropped; a queued task skips it.
	gone bool
	// deleteFailed: a delete ran out of retries; Sync enqueues it again.
	deleteFailed bool
	// inCloud: the cloud has the machine (a Create or Resume returned, or a
	// List showed it), so dropping the record needs a cloud delete.
	inCloud bool

	// standby is where a warm-pool standby stands (warmpool.go);
	// StandbyNone for every machine CA sees. A standby is in no target and
	// no CA view, but counts toward maxSize.
	standby providers.StandbyPhase
	// parking: a Park task is queued or running.
	parking bool
	// warmingSince is when a standby began to warm, which
	// warmPool.warmingTimeout counts from: when its Create returned, or for
	// one a restarted process adopted, the creation time List gives (the
	// time it was first listed where the provider gives none).
	warmingSince time.Time
	// resume: a standby IncreaseSize took; its create task resumes it
	// (Provider.Resume) instead of creating a machine. fromPool stays set
	// for the timeline.
	resume, fromPool bool

	requestedAt, acceptedAt, runningAt, registeredAt, readyAt time.Time
	// podRunningAt is when the first pod on its Node was seen Running.
	podRunningAt time.Time
	// bootstrapSeen: the node script's report was observed (once).
	bootstrapSeen bool
}

// New validates the options and builds every group's template. It calls
// each provider's MachineType once per group; nothing else touches a cloud
// until Start.
func New(ctx context.Context, o Options) (*Core, error) {
	if o.Cluster == "" {
		return nil, fmt.Errorf("cluster name is empty: set clusterName in the config")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NameRand == nil {
		o.NameRand = randomSuffix
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 10 * time.Second
	}
	o.Workers = o.Workers.withDefaults()
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	c := &Core{
		opts:      o,
		log:       o.Logger,
		now:       o.Now,
		metrics:   o.Metrics,
		groups:    map[string]*group{},
		workers:   map[string]*providerWorkers{},
		index:     newIndex(),
		nodeNames: map[string]string{},
		forgotten: map[string]tombstone{},
		lastSync:  map[string]time.Time{},
		kick:      make(chan struct{}, 1),
		poolKick:  make(chan struct{}, 1),
		synced:    map[string]bool{},
		listErr:   map[string]error{},
	}
	if len(o.Groups) == 0 {
		return nil, errors.New("no node groups configured: add at least one entry under nodeGroups")
	}
	for _, spec := range o.Groups {
		if _, dup := c.groups[spec.ID]; dup {
			return nil, fmt.Errorf("node group %q is configured twice: group ids must be unique", spec.ID)
		}
		p, ok := o.Providers[spec.Provider]
		if !ok {
			return nil, fmt.Errorf("node group %q: provider %q is not configured (configured: %s)",
				spec.ID, spec.Provider, strings.Join(slices.Sorted(maps.Keys(o.Providers)), ", "))
		}
		g, err := c.newGroup(ctx, spec, p)
		if err != nil {
			return nil, err
		}
		c.groups[spec.ID] = g
		c.groupOrder = append(c.groupOrder, spec.ID)
		if _, ok := c.workers[p.Name()]; !ok {
			c.workers[p.Name()] = newProviderWorkers(c, p)
		}
	}
	c.metrics.watch(c)
	return c, nil
}

func (c *Core) newGroup(ctx context.Context, spec GroupSpec, p providers.Provider) (*group, error) {
	if spec.MinSize < 0 || spec.MaxSize < spec.MinSize || spec.MaxSize < 1 {
		return nil, fmt.Errorf("node group %q: need 0 <= minSize (%d) <= maxSize (%d) and maxSize >= 1", spec.ID, spec.MinSize, spec.MaxSize)
	}
	mt, err := p.MachineType(ctx, spec.MachineType, spec.Zone)
	if err != nil {
		return nil, fmt.Errorf("node group %q: machine type %q in %q: %w", spec.ID, spec.MachineType, spec.Zone, err)
	}
	kind := p.Capabilities().ImageKind(spec.ImageChannel)
	g := &group{spec: spec, provider: p, imageKind: kind, machineType: mt, instances: map[string]*instance{},
		debug: fmt.Sprintf("provider=%s machineType=%s zone=%s image=%s", spec.Provider, spec.MachineType, spec.Zone, kind)}
	g.template, err = buildTemplate(c.opts.Cluster, g, c.opts.Reserved, c.opts.GPULabel)
	if err != nil {
		return nil, fmt.Errorf("node group %q: template: %w", spec.ID, err)
	}
	if err := c.checkWarmPool(g); err != nil {
		return nil, err
	}
	return g, nil
}

func (w WorkerOptions) withDefaults() WorkerOptions {
	if w.Parallelism <= 0 {
		w.Parallelism = 8
	}
	if w.QPS <= 0 {
		w.QPS = 20
	}
	if w.Burst <= 0 {
		w.Burst = max(1, int(2*w.QPS))
	}
	if w.Retries < 0 {
		w.Retries = 0
	}
	if w.RetryBase <= 0 {
		w.RetryBase = 250 * time.Millisecond
	}
	if w.CallTimeout <= 0 {
		w.CallTimeout = time.Minute
	}
	return w
}

// Start lists every provider once (rebuilding state from the cloud), then
// starts the workers, the providers' runners and the periodic sync. A
// provider whose first List fails does not stop Start: Refresh answers
// Unavailable for its groups until a List succeeds, so CA never acts on an
// empty picture.
func (c *Core) Start(ctx context.Context) error {
	ctx, c.cancel = context.WithCancel(ctx)
	c.runCtx.Store(&ctx)
	for _, name := range slices.Sorted(maps.Keys(c.workers)) {
		w := c.workers[name]
		c.wg.Go(func() {
			if err := w.provider.Run(ctx); err != nil && ctx.Err() == nil {
				c.log.Error("provider runner stopped", "provider", name, "err", err)
			}
		})
		w.start(ctx)
	}
	c.Sync(ctx, true)
	c.wg.Go(func() { c.syncLoop(ctx) })
	c.wg.Go(func() { c.poolLoop(ctx) })
	c.kickPools()
	return nil
}

// Shutdown stops accepting scale-ups, waits until queued and in-flight
// creations and deletions are done (or ctx ends), then stops every
// goroutine the core owns.
func (c *Core) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	var err error
	released := make(chan struct{})
	go func() { c.leases.Wait(); close(released) }()
	select {
	case <-released:
	case <-ctx.Done():
		err = fmt.Errorf("reserved machines (the image canary's) still held at shutdown: %w", ctx.Err())
	}
	for _, w := range c.workers {
		if e := w.drain(ctx); e != nil {
			err = e
		}
	}
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	return err
}

// GroupInfo is what CA learns of a group.
type GroupInfo struct {
	ID      string
	MinSize int
	MaxSize int
	Debug   string
}

func (g *group) info() GroupInfo {
	return GroupInfo{ID: g.spec.ID, MinSize: g.spec.MinSize, MaxSize: g.spec.MaxSize, Debug: g.debug}
}

// NodeGroups returns every group in configured order.
func (c *Core) NodeGroups() []GroupInfo {
	out := make([]GroupInfo, 0, len(c.groupOrder))
	for _, id := range c.groupOrder {
		out = append(out, c.groups[id].info())
	}
	return out
}

// Node is CA's view of a Kubernetes node (or of a fake node it made from an
// instance: name = providerID, no labels).
type Node struct {
	ProviderID string
	Name       string
	Labels     map[string]string
}

// NodeGroupForNode returns the node's group, or ok=false for a node this
// plugin doesn't autoscale. It matches by providerID, then by machine name,
// then by the group label a node of ours carries.
func (c *Core) NodeGroupForNode(n Node) (GroupInfo, bool) {
	c.mu.RLock()
	inst := c.lookupLocked(n)
	c.mu.RUnlock()
	if inst != nil {
		return inst.group.info(), true
	}
	if n.Labels[providers.LabelCluster] == c.opts.Cluster {
		if g, ok := c.groups[n.Labels[providers.LabelGroup]]; ok {
			return g.info(), true
		}
	}
	return GroupInfo{}, false
}

func (c *Core) lookupLocked(n Node) *instance { return c.index.node(n) }

func (c *Core) group(id string) (*group, error) {
	g, ok := c.groups[id]
	if !ok {
		return nil, fmt.Errorf("%w %q: NodeGroups lists the groups this plugin serves", ErrUnknownGroup, id)
	}
	return g, nil
}

// targetLocked is the number of the group's instances not being deleted,
// standbys left out.
func (g *group) targetLocked() int {
	n := 0
	for _, inst := range g.instances {
		if inst.phase != phaseDeleting && !inst.isStandby() {
			n++
		}
	}
	return n
}

// TargetSize returns the group's target size.
func (c *Core) TargetSize(id string) (int, error) {
	g, err := c.group(id)
	if err != nil {
		return 0, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return g.targetLocked(), nil
}

// InstanceView is one instance as CA sees it.
type InstanceView struct {
	ProviderID string
	State      providers.InstanceState
	Error      *providers.InstanceError
}

// Nodes returns every instance of the group, creating and deleting ones
// included, standbys left out, sorted by providerID.
func (c *Core) Nodes(id string) ([]InstanceView, error) {
	g, err := c.group(id)
	if err != nil {
		return nil, err
	}
	c.mu.RLock()
	out := make([]InstanceView, 0, len(g.instances))
	for _, inst := range g.instances {
		if inst.isStandby() {
			continue
		}
		v := InstanceView{ProviderID: inst.providerID, State: inst.viewState()}
		if inst.err != nil {
			e := *inst.err
			v.Error = &e
		}
		out = append(out, v)
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b InstanceView) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	return out, nil
}

func (i *instance) viewState() providers.InstanceState {
	switch i.phase {
	case phaseDeleting:
		return providers.StateDeleting
	case phaseQueued, phaseCreating, phaseFailed:
		return providers.StateCreating
	}
	if !i.registeredAt.IsZero() {
		return providers.StateRunning
	}
	if i.state == 0 {
		return providers.StateCreating
	}
	return i.state
}

// TemplateNode returns the group's scale-from-zero Node, marshalled as
// core/v1 protobuf. It is never empty.
func (c *Core) TemplateNode(id string) ([]byte, error) {
	g, err := c.group(id)
	if err != nil {
		return nil, err
	}
	return g.template, nil
}

// GPULabel is the label key that marks GPU nodes.
func (c *Core) GPULabel() string { return c.opts.GPULabel }

// GPUTypes lists the GPU types of every group's machine type.
func (c *Core) GPUTypes() []string {
	set := map[string]bool{}
	for _, g := range c.groups {
		if g.machineType.GPUs > 0 && g.machineType.GPUType != "" {
			set[g.machineType.GPUType] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Cleanup is CA going away. It deletes nothing: nodes outlive CA restarts.
func (c *Core) Cleanup() {
	c.log.Info("cluster-autoscaler called Cleanup; keeping every node")
}

var nameEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func randomSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return nameEncoding.EncodeToString(b[:])
}
