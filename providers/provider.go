package providers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
)

// Provider is what the autoscaling core knows of a cloud. It is small on
// purpose: value types in and out, no cloud SDK type crosses it. The core
// decides by what a provider declares (Capabilities), never by its name.
//
// Implementations must be safe for concurrent use: the core calls Create and
// Delete from several workers while Refresh calls List.
type Provider interface {
	// Name is the provider's config key ("kwok", "hcloud", "gce", "static",
	// "docker"), for logs, metrics and errors.
	Name() string

	// Capabilities says what the provider's machines can do: boot catalog
	// images, which user-data they take, what their nodes need.
	Capabilities() Capabilities

	// List returns every instance this plugin owns in this cluster: one paged
	// scan filtered by the ownership labels (LabelCluster). Instances of any
	// group are returned; the core sorts them by Instance.Group.
	List(ctx context.Context) ([]Instance, error)

	// ProviderID returns the providerID a machine named name will register
	// with, when the provider can know it before the machine exists (kwok,
	// gce, docker). known=false means the id is only known after Create
	// returns (hcloud); the core then shows a placeholder until it does.
	ProviderID(req CreateRequest) (id string, known bool)

	// Create creates one machine. req.Name is chosen by the core, so a retry
	// of the same request must not create a second machine: an existing
	// machine with that name and the ownership labels is returned as is.
	Create(ctx context.Context, req CreateRequest) (Instance, error)

	// Delete deletes the machine with this providerID. A machine that is
	// already gone is not an error.
	Delete(ctx context.Context, providerID string) error

	// MachineType describes a machine type at a location, for scale-from-zero
	// templates. An unknown type is an error that names it.
	MachineType(ctx context.Context, name, location string) (MachineType, error)

	// TopologyLabels returns every topology label a node at location
	// carries, for a provider whose nodes do not carry
	// topology.kubernetes.io/zone=<location> and the group's region (its
	// cloud's controllers label them otherwise); they then replace the zone
	// and region on templates and in the kubelet's registration. nil keeps
	// them.
	TopologyLabels(location string) map[string]string

	// Run does the provider's background work (the kwok provider
	// materialises Nodes when a simulated boot ends) until ctx ends. The core
	// runs it for the lifetime of the server; a provider without any returns
	// nil at once.
	Run(ctx context.Context) error

	// Classify maps an error returned by Create (or Delete, Park, Resume)
	// to CA's error classes, a short stable code, and whether a retry may
	// help.
	Classify(err error) Classification

	// Park brings a warm-pool standby (a machine created with
	// CreateRequest.Standby) to rest in state, one of
	// Capabilities.Standby: the core calls it once List shows the standby
	// StandbyPrepared. Parking a parked standby is not an error. A provider
	// that declares no standby state returns an error wrapping
	// ErrStandbyUnsupported (see StandbyUnsupported).
	Park(ctx context.Context, providerID string, state StandbyState) error

	// Resume takes a parked standby into service. It first drops the
	// machine's standby marker, so from then on every List shows a machine
	// that joins, even if this process dies before the next step; then it
	// hands the machine userData (rendered for this resume, with a fresh
	// join token: never log it) and starts it. Resuming a machine whose
	// marker is gone (an earlier attempt) finishes that attempt; one that
	// runs already is returned as is. A provider that declares no standby
	// state returns an error wrapping ErrStandbyUnsupported.
	Resume(ctx context.Context, providerID string, userData []byte) (Instance, error)
}

// StandbyState is how a warm-pool standby rests until the core takes it.
type StandbyState string

const (
	// StandbyStopped: powered off (a stopped VM or container); resuming
	// boots it again, with the user-data Resume gives.
	StandbyStopped StandbyState = "stopped"
	// StandbySuspended: its memory kept (a suspended VM); resuming
	// continues it.
	StandbySuspended StandbyState = "suspended"
)

// StandbyStates are every state a provider may declare, in the order
// docs/warm-pool.md lists them.
var StandbyStates = []StandbyState{StandbyStopped, StandbySuspended}

// StandbyPhase is where a warm-pool standby stands, as its provider lists
// it.
type StandbyPhase int

const (
	// StandbyNone: not a standby. A machine that joins, a taken standby
	// included.
	StandbyNone StandbyPhase = iota
	// StandbyWarming: booting its prepare-only user-data.
	StandbyWarming
	// StandbyPrepared: prepared and still running; the core parks it.
	StandbyPrepared
	// StandbyParked: stopped or suspended, ready to be resumed.
	StandbyParked
)

func (s StandbyPhase) String() string {
	switch s {
	case StandbyNone:
		return "none"
	case StandbyWarming:
		return "warming"
	case StandbyPrepared:
		return "prepared"
	case StandbyParked:
		return "parked"
	}
	return fmt.Sprintf("StandbyPhase(%d)", int(s))
}

// Standby is what List says of a standby machine: the state it rests in
// (from its marker) and its phase. The zero value is a machine that is no
// standby.
type Standby struct {
	State StandbyState
	Phase StandbyPhase
}

// ErrStandbyUnsupported is returned (wrapped) by Park and Resume of a
// provider that declares no standby state, and for a state it does not
// declare.
var ErrStandbyUnsupported = errors.New("can't park machines")

// StandbyUnsupported is the error Park and Resume of provider return when
// it declares no standby state.
func StandbyUnsupported(provider string) error {
	return fmt.Errorf("provider %s %w: it declares no warm-pool standby state (Capabilities.Standby); remove warmPool from its groups", provider, ErrStandbyUnsupported)
}

// UserData is the form of user-data a provider's machines take. The type is
// bootstrap's (as Capabilities.NodeRuntime is), so the renderers key off
// what a machine reads, not off the provider's name.
type UserData = bootstrap.UserDataForm

const (
	// UserDataNone: the machines boot nothing (kwok); no user-data is
	// rendered and no join token made.
	UserDataNone = bootstrap.FormNone
	// UserDataCloudInit: the machine's first-boot agent reads it: cloud-init
	// (#cloud-config), or Ignition where the image's OS takes Ignition.
	UserDataCloudInit = bootstrap.FormCloudInit
	// UserDataScript: the node script itself, run over a shell (static
	// machines have no datasource).
	UserDataScript = bootstrap.FormScript
)

// Capabilities are what a provider declares of its machines.
type Capabilities struct {
	// BootsImages: the machines boot the catalog image the core resolved
	// (CreateRequest.Image). false means every node takes the
	// runtime-install path.
	BootsImages bool
	// UserData is the form of user-data the machines take.
	UserData UserData
	// NodeRuntime is what the nodes need where they are not VMs of their own
	// (a container on a shared host); the zero value is a VM's.
	NodeRuntime bootstrap.Runtime
	// PriceFix says where the provider's machine types get their price per
	// hour (MachineType.PricePerHour), as what to do about one without: the
	// config field to set, or the choice to make. The core puts it in the
	// errors CA's price expander logs and in `prebake serve`'s start-up
	// check. Every provider declares one.
	PriceFix string
	// Standby lists the states the provider can park a warm-pool standby
	// in (Park, Resume); empty means it keeps no warm pool.
	Standby []StandbyState
	// StandbyResume is how its standbys get the user-data they are resumed
	// with, where the provider can't give a stopped machine a new
	// instance-id (bootstrap.StandbyResume): a standby's user-data then
	// installs the hook. The zero value needs none.
	StandbyResume bootstrap.StandbyResume
}

// Parks reports whether the provider can park a standby in state.
func (c Capabilities) Parks(state StandbyState) bool {
	return slices.Contains(c.Standby, state)
}

// ImageKind is the path a group booting from channel is designed for, shown
// on its scale-from-zero template: prebaked for a group with a channel on a
// provider that boots images, runtime-install otherwise. A machine's actual
// kind is decided when its channel resolves (or does not) at IncreaseSize.
func (c Capabilities) ImageKind(channel string) ImageKind {
	if c.BootsImages && channel != "" {
		return ImagePrebaked
	}
	return ImageRuntimeInstall
}

// InstanceState is the lifecycle of one machine as CA sees it.
type InstanceState int

const (
	// StateCreating: requested, or booting; not yet running.
	StateCreating InstanceState = iota + 1
	// StateRunning: the machine is running (its node may still be joining).
	StateRunning
	// StateDeleting: a delete was accepted and the machine is going away.
	StateDeleting
)

func (s InstanceState) String() string {
	switch s {
	case StateCreating:
		return "creating"
	case StateRunning:
		return "running"
	case StateDeleting:
		return "deleting"
	}
	return fmt.Sprintf("InstanceState(%d)", int(s))
}

// ImageKind says how a node gets its software.
type ImageKind string

const (
	ImagePrebaked       ImageKind = "prebaked"
	ImageRuntimeInstall ImageKind = "runtime-install"
)

// ErrorClass is CA's instance error class, as sent on the wire.
type ErrorClass int32

const (
	// ErrorOutOfResources is capacity or quota: CA backs the group off and
	// tries another group within one loop.
	ErrorOutOfResources ErrorClass = 1
	// ErrorOther is anything else.
	ErrorOther ErrorClass = 99
)

// Classification is the verdict of Provider.Classify.
type Classification struct {
	Class ErrorClass
	// Code is short and stable, for example "QUOTA_EXCEEDED" or
	// "resource_unavailable"; it is shown to CA as errorCode.
	Code string
	// Retryable errors (429, 5xx, timeouts) are retried by the core's
	// workers with backoff before they are reported.
	Retryable bool
}

// InstanceError is a creation failure as reported to CA.
type InstanceError struct {
	Class   ErrorClass
	Code    string
	Message string
}

// Instance is one machine.
type Instance struct {
	// ProviderID equals, byte for byte, the spec.providerID its Node will
	// carry.
	ProviderID string
	// Name is the machine name the core chose (also the Node name where the
	// provider controls it).
	Name  string
	Group string
	State InstanceState
	// Image is the image id the machine booted from ("" for runtime-install).
	Image     string
	ImageKind ImageKind
	// CreatedAt is when the cloud accepted the machine, zero if unknown.
	CreatedAt time.Time
	// Error is set for a machine the cloud reports as failed.
	Error *InstanceError
	// Standby is set for a warm-pool standby, from its standby marker (a
	// label, or what the provider keeps in its place) and its power state:
	// a restarted plugin rebuilds the pool from List.
	Standby Standby
}

// Taint is a node taint, a value copy of core/v1 Taint.
type Taint struct {
	Key    string
	Value  string
	Effect string // NoSchedule, PreferNoSchedule or NoExecute
}

// CreateRequest asks for one machine of a group.
type CreateRequest struct {
	// Name is chosen by the core and unique in the cluster; it makes Create
	// idempotent.
	Name        string
	Cluster     string
	Group       string
	MachineType string
	Location    string
	// ImageChannel is the catalog channel the group boots from ("" for none).
	ImageChannel string
	// Image is the catalog image id the core resolved the channel to at
	// IncreaseSize; the machine boots it and carries it as LabelImage. ""
	// means the provider's base image and the runtime-install path.
	Image     string
	ImageKind ImageKind
	// NodeLabels and NodeTaints are what the Node must carry once
	// registered, the standard labels included (see NodeLabels).
	NodeLabels map[string]string
	NodeTaints []Taint
	// UserData is rendered cloud-init. Never log it: it holds join secrets.
	UserData []byte
	// Standby, when set, makes the machine a warm-pool standby that rests
	// in this state (one of Capabilities.Standby): it carries the standby
	// marker, its UserData prepares it up to just before the join, and the
	// core parks it (Park) and later takes it (Resume).
	Standby StandbyState
}

// MachineType is what the core needs of a machine type to build a template.
type MachineType struct {
	Name string
	// MilliCPU is the number of CPU millicores.
	MilliCPU int64
	// MemoryBytes is the machine's memory.
	MemoryBytes int64
	// EphemeralStorageBytes is the root disk; 0 means unknown.
	EphemeralStorageBytes int64
	// Pods is the kubelet's max pods; 0 means 110.
	Pods    int64
	GPUs    int64
	GPUType string
	// Arch is the Kubernetes arch name: amd64 or arm64.
	Arch string
	// PricePerHour is in the provider's currency; 0 means unknown.
	PricePerHour float64
}

// ErrNotFound is returned (wrapped) for a machine type, location or machine
// that does not exist.
var ErrNotFound = errors.New("not found")
