// Package fake is an in-memory providers.Provider for tests of the core and
// the wire adapter. Like Karpenter's test fake it records calls and injects
// errors; it is not a cloud fake (those speak real REST APIs and live beside
// each provider).
package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

// ErrCapacity is what a create fails with when CapacityLeft is exhausted.
var ErrCapacity = errors.New("fake: no capacity left")

// ErrTransient is a retryable error for InjectCreateErrors.
var ErrTransient = errors.New("fake: transient 503")

// Provider is an in-memory cloud.
type Provider struct {
	// NameValue is returned by Name; default "fake".
	NameValue string
	// KnownIDs makes ProviderID return known=true ("fake://<name>"); when
	// false, ids are assigned by Create like hcloud ("fake://<n>").
	KnownIDs bool
	Types    map[string]providers.MachineType
	// BootsImages, UserData and NodeRuntime are its Capabilities; New sets
	// UserData to UserDataCloudInit.
	BootsImages bool
	UserData    providers.UserData
	NodeRuntime bootstrap.Runtime
	// PriceFix is its Capabilities' PriceFix; New sets one that names
	// Types.
	PriceFix string
	// Topology, when set, answers TopologyLabels.
	Topology func(location string) map[string]string
	// Standby is the Capabilities' list of states it parks standbys in;
	// nil means it keeps no warm pool (Park and Resume fail).
	Standby []providers.StandbyState
	// Now, when set, is the clock Create stamps CreatedAt with (nil:
	// time.Now). One that returns the zero time lists every machine's
	// creation time as unknown, as a cloud that does not say.
	Now func() time.Time

	// mu guards everything below.
	mu       sync.Mutex
	machines map[string]providers.Instance // by providerID
	// stopped are the machines that are powered off (parked standbys, and
	// a taken standby between its marker's removal and its start); a
	// stopped machine without the standby marker lists as failed, as a
	// halted VM does.
	stopped map[string]bool
	// userData is the user-data each machine got last (Create or Resume).
	userData map[string][]byte
	nextID   int
	// createErrs are returned by the next Create calls, in order.
	createErrs []error
	// capacity < 0 means unlimited.
	capacity int
	// createGate, when set, blocks every Create until it is closed or the
	// call's ctx ends.
	createGate  chan struct{}
	createDelay time.Duration
	listErr     error
	calls       map[string]int
	requests    []providers.CreateRequest // every Create's request, in order
	// resumeErrs are returned by the next Resume calls, in order, before
	// the marker is touched.
	resumeErrs []error
	// resumeGate, when set, holds every Resume after it dropped the marker
	// and before it starts the machine, until closed or the call's ctx ends.
	resumeGate chan struct{}
}

// New returns an empty fake cloud with two machine types, "m1" (2 CPU,
// 4 GiB, 0.02 an hour) and "gpu" (8 CPU, 32 GiB, one GPU, 0.5 an hour).
func New() *Provider {
	return &Provider{
		NameValue: "fake",
		KnownIDs:  true,
		UserData:  providers.UserDataCloudInit,
		PriceFix:  "set PricePerHour on the machine type in the fake's Types",
		Types: map[string]providers.MachineType{
			"m1":  {Name: "m1", MilliCPU: 2000, MemoryBytes: 4 << 30, Pods: 110, Arch: "amd64", PricePerHour: 0.02},
			"gpu": {Name: "gpu", MilliCPU: 8000, MemoryBytes: 32 << 30, Pods: 110, Arch: "amd64", GPUs: 1, GPUType: "nvidia-t4", PricePerHour: 0.5},
		},
		machines: map[string]providers.Instance{},
		stopped:  map[string]bool{},
		userData: map[string][]byte{},
		capacity: -1,
		calls:    map[string]int{},
	}
}

func (p *Provider) Name() string { return p.NameValue }

func (p *Provider) ProviderID(req providers.CreateRequest) (string, bool) {
	if p.KnownIDs {
		return "fake://" + req.Name, true
	}
	return "", false
}

func (p *Provider) count(method string) { p.calls[method]++ }

// Calls returns how often method was called.
func (p *Provider) Calls(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// InjectCreateErrors makes the next len(errs) Create calls fail in order.
func (p *Provider) InjectCreateErrors(errs ...error) {
	p.mu.Lock()
	p.createErrs = append(p.createErrs, errs...)
	p.mu.Unlock()
}

// SetCapacity allows n more machines; later creates fail with ErrCapacity.
// n < 0 is unlimited.
func (p *Provider) SetCapacity(n int) {
	p.mu.Lock()
	p.capacity = n
	p.mu.Unlock()
}

// GateCreates blocks Create calls until the returned func is called.
func (p *Provider) GateCreates() (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.createGate = ch
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// SetCreateDelay makes each Create take d (a slow cloud API).
func (p *Provider) SetCreateDelay(d time.Duration) {
	p.mu.Lock()
	p.createDelay = d
	p.mu.Unlock()
}

// SetListError makes List fail with err (nil heals it).
func (p *Provider) SetListError(err error) {
	p.mu.Lock()
	p.listErr = err
	p.mu.Unlock()
}

// SetState sets a machine's state, as a cloud would once it boots.
func (p *Provider) SetState(providerID string, s providers.InstanceState) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[providerID]
	if ok {
		m.State = s
		p.machines[providerID] = m
	}
	return ok
}

// RunAll marks every machine running, except standbys and stopped ones
// (PrepareStandbys moves standbys on).
func (p *Provider) RunAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, m := range p.machines {
		if p.stopped[id] || m.Standby.Phase != providers.StandbyNone {
			continue
		}
		m.State = providers.StateRunning
		p.machines[id] = m
	}
}

// Remove deletes a machine behind the core's back.
func (p *Provider) Remove(providerID string) {
	p.mu.Lock()
	delete(p.machines, providerID)
	p.mu.Unlock()
}

// Machines returns the providerIDs of all machines, sorted.
func (p *Provider) Machines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.machines))
}

func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count("List")
	if p.listErr != nil {
		return nil, p.listErr
	}
	out := make([]providers.Instance, 0, len(p.machines))
	for id, m := range p.machines {
		if p.stopped[id] && m.Standby.Phase == providers.StandbyNone {
			m.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: "stopped", Message: "fake: machine " + id + " is stopped"}
		}
		out = append(out, m)
	}
	return out, nil
}

func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	p.mu.Lock()
	p.count("Create")
	p.requests = append(p.requests, req)
	gate, delay := p.createGate, p.createDelay
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return providers.Instance{}, ctx.Err()
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return providers.Instance{}, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.createErrs) > 0 {
		err := p.createErrs[0]
		p.createErrs = p.createErrs[1:]
		if err != nil {
			return providers.Instance{}, err
		}
	}
	for _, m := range p.machines {
		if m.Name == req.Name {
			return m, nil // idempotent
		}
	}
	if p.capacity == 0 {
		return providers.Instance{}, fmt.Errorf("%w in %s", ErrCapacity, req.Location)
	}
	if p.capacity > 0 {
		p.capacity--
	}
	if _, ok := p.Types[req.MachineType]; !ok {
		return providers.Instance{}, fmt.Errorf("machine type %q: %w", req.MachineType, providers.ErrNotFound)
	}
	id, known := p.ProviderID(req)
	if !known {
		p.nextID++
		id = fmt.Sprintf("fake://%d", p.nextID)
	}
	if req.Standby != "" && !slices.Contains(p.Standby, req.Standby) {
		return providers.Instance{}, fmt.Errorf("fake: standby state %q: %w", req.Standby, providers.ErrStandbyUnsupported)
	}
	m := providers.Instance{
		ProviderID: id, Name: req.Name, Group: req.Group, State: providers.StateCreating,
		Image: req.Image, ImageKind: req.ImageKind, CreatedAt: time.Now(),
	}
	if p.Now != nil {
		m.CreatedAt = p.Now()
	}
	if req.Standby != "" {
		m.Standby = providers.Standby{State: req.Standby, Phase: providers.StandbyWarming}
	}
	p.machines[id] = m
	p.userData[id] = slices.Clone(req.UserData)
	return m, nil
}

func (p *Provider) Delete(ctx context.Context, providerID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count("Delete")
	delete(p.machines, providerID)
	delete(p.stopped, providerID)
	delete(p.userData, providerID)
	return nil
}

func (p *Provider) MachineType(ctx context.Context, name, location string) (providers.MachineType, error) {
	mt, ok := p.Types[name]
	if !ok {
		return providers.MachineType{}, fmt.Errorf("machine type %q: %w", name, providers.ErrNotFound)
	}
	return mt, nil
}

// Capabilities implements providers.Provider: BootsImages, UserData,
// NodeRuntime and PriceFix as set.
func (p *Provider) Capabilities() providers.Capabilities {
	return providers.Capabilities{BootsImages: p.BootsImages, UserData: p.UserData, NodeRuntime: p.NodeRuntime, PriceFix: p.PriceFix,
		Standby: slices.Clone(p.Standby)}
}

// TopologyLabels implements providers.Provider: Topology as set.
func (p *Provider) TopologyLabels(location string) map[string]string {
	if p.Topology == nil {
		return nil
	}
	return p.Topology(location)
}

// Run implements providers.Provider: the fake has no background work.
func (p *Provider) Run(context.Context) error { return nil }

// CreateRequests returns a copy of every Create call's request, in order.
func (p *Provider) CreateRequests() []providers.CreateRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}

func (p *Provider) Classify(err error) providers.Classification {
	switch {
	case errors.Is(err, ErrCapacity):
		return providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_unavailable"}
	case errors.Is(err, ErrTransient):
		return providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}
	}
	return providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}
}

// Park implements providers.Provider: a standby in a state the fake
// declares is stopped (parked); parking a parked standby changes nothing.
func (p *Provider) Park(ctx context.Context, providerID string, state providers.StandbyState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count("Park")
	if !slices.Contains(p.Standby, state) {
		return providers.StandbyUnsupported(p.NameValue)
	}
	m, ok := p.machines[providerID]
	switch {
	case !ok:
		return fmt.Errorf("fake: park %s: %w", providerID, providers.ErrNotFound)
	case m.Standby.Phase == providers.StandbyNone:
		return fmt.Errorf("fake: park %s: the machine is no standby", providerID)
	}
	m.Standby = providers.Standby{State: state, Phase: providers.StandbyParked}
	p.machines[providerID] = m
	p.stopped[providerID] = true
	return nil
}

// Resume implements providers.Provider as the contract orders it: an
// injected error first (nothing changed), then the marker dropped, then
// the resume gate, then the user-data handed over and the machine started
// (state creating: it boots).
func (p *Provider) Resume(ctx context.Context, providerID string, userData []byte) (providers.Instance, error) {
	p.mu.Lock()
	p.count("Resume")
	if len(p.Standby) == 0 {
		p.mu.Unlock()
		return providers.Instance{}, providers.StandbyUnsupported(p.NameValue)
	}
	if len(p.resumeErrs) > 0 {
		err := p.resumeErrs[0]
		p.resumeErrs = p.resumeErrs[1:]
		if err != nil {
			p.mu.Unlock()
			return providers.Instance{}, err
		}
	}
	m, ok := p.machines[providerID]
	if !ok {
		p.mu.Unlock()
		return providers.Instance{}, fmt.Errorf("fake: resume %s: %w", providerID, providers.ErrNotFound)
	}
	if !p.stopped[providerID] && m.Standby.Phase == providers.StandbyNone {
		p.mu.Unlock()
		return m, nil // resumed already
	}
	m.Standby = providers.Standby{}
	p.machines[providerID] = m
	gate := p.resumeGate
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return providers.Instance{}, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok = p.machines[providerID]
	if !ok {
		return providers.Instance{}, fmt.Errorf("fake: resume %s: %w", providerID, providers.ErrNotFound)
	}
	p.userData[providerID] = slices.Clone(userData)
	delete(p.stopped, providerID)
	m.State = providers.StateCreating
	p.machines[providerID] = m
	return m, nil
}

// InjectResumeErrors makes the next len(errs) Resume calls fail in order,
// before they touch the machine.
func (p *Provider) InjectResumeErrors(errs ...error) {
	p.mu.Lock()
	p.resumeErrs = append(p.resumeErrs, errs...)
	p.mu.Unlock()
}

// GateResumes holds every Resume between the marker's removal and the
// machine's start until the returned func is called.
func (p *Provider) GateResumes() (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.resumeGate = ch
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// PrepareStandbys makes every warming standby prepared (running, its
// prepare-only user-data done), as its node script would, and returns how
// many it changed.
func (p *Provider) PrepareStandbys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for id, m := range p.machines {
		if m.Standby.Phase == providers.StandbyWarming {
			m.Standby.Phase = providers.StandbyPrepared
			m.State = providers.StateRunning
			p.machines[id] = m
			n++
		}
	}
	return n
}

// PrepareStandby makes the warming standby providerID prepared, as
// PrepareStandbys does for all of them.
func (p *Provider) PrepareStandby(providerID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[providerID]
	if !ok || m.Standby.Phase != providers.StandbyWarming {
		return false
	}
	m.Standby.Phase = providers.StandbyPrepared
	m.State = providers.StateRunning
	p.machines[providerID] = m
	return true
}

// FailStandby makes a standby list as failed, as one whose prepare-only
// script failed.
func (p *Provider) FailStandby(providerID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[providerID]
	if ok {
		m.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: "prepare_failed", Message: "fake: the standby's node script failed"}
		p.machines[providerID] = m
	}
	return ok
}

// Machine is what the fake holds of one machine.
type Machine struct {
	providers.Instance
	// Stopped: powered off.
	Stopped bool
	// UserData is what it got last, from Create or Resume.
	UserData []byte
}

// Machine returns the machine with this providerID.
func (p *Provider) Machine(providerID string) (Machine, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[providerID]
	if !ok {
		return Machine{}, false
	}
	return Machine{Instance: m, Stopped: p.stopped[providerID], UserData: slices.Clone(p.userData[providerID])}, true
}
