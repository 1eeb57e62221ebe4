package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

// Classification codes, stable: CA shows them as errorCode.
const (
	codeZoneFull          = "resource_unavailable"
	codeAddressPoolsFull  = "address_pools_exhausted"
	codeImageNotFound     = "image_not_found"
	codeNameConflict      = "name_conflict"
	codeNetworkConflict   = "network_conflict"
	codeMachineType       = "machine_type_not_found"
	codeMachineTooBig     = "machine_type_exceeds_host"
	codeBootFailed        = "boot_failed"
	codeEngineUnreachable = "engine_unreachable"
	codeEngineError       = "engine_error"
	codeTimeout           = "timeout"
	codeRateLimited       = "rate_limit_exceeded"
	codeConflict          = "conflict"
	codeInvalid           = "invalid_request"
	codeCreateFailed      = "create_failed"
)

// capacityError is a zone holding Options.Capacity machines already.
type capacityError struct {
	zone  string
	limit int
}

func (e *capacityError) Error() string {
	return fmt.Sprintf("docker: zone %q is full: it holds at most %d machines (providers.docker.capacity); try another zone or group", e.zone, e.limit)
}

// foreignError is a container whose name we want but that is not ours.
type foreignError struct {
	name, id, cluster string
}

func (e *foreignError) Error() string {
	return fmt.Sprintf("docker: container %q (id %.12s) exists but is not owned by this cluster (label %s=%q); remove it (`docker rm -f %s`), or use another name prefix or cluster name",
		e.name, e.id, providers.LabelCluster, e.cluster, e.name)
}

// imageNotFoundError is an image the engine does not have. The provider
// never pulls: images are made on the engine (docker import, prebake images
// build) or loaded into it.
type imageNotFoundError struct {
	ref, catalogID string
}

func (e *imageNotFoundError) Error() string {
	if e.catalogID != "" {
		return fmt.Sprintf("catalog image %s (%s) is not on the engine: it was deleted, or built on another engine; run `prebake images sync`, or build it again", e.catalogID, e.ref)
	}
	return fmt.Sprintf("image %q is not on the engine (the provider never pulls): load or import it (`docker image ls` lists what there is), or fix providers.docker.baseImage", e.ref)
}

// machineTooBigError is a machine type larger than the engine's host.
type machineTooBigError struct {
	mt   providers.MachineType
	host hostInfo
}

func (e *machineTooBigError) Error() string {
	return fmt.Sprintf("docker: machine type %q (%dm CPU, %d bytes) is larger than the engine's host (%dm CPU, %d bytes); lower it in providers.docker.machineTypes",
		e.mt.Name, e.mt.MilliCPU, e.mt.MemoryBytes, e.host.milliCPU, e.host.memoryBytes)
}

// bootError is a container that was created but could not be seeded or
// started (an image without prebake-container-init, say); it has been
// removed with its volume.
type bootError struct {
	name string
	err  error
}

func (e *bootError) Error() string {
	return fmt.Sprintf("docker: container %q did not start (it was removed; does its image have %s, as the base image made by providers/docker/baseimage has?): %v", e.name, baseimage.InitPath, e.err)
}

func (e *bootError) Unwrap() error { return e.err }

// Classify implements providers.Provider. A full zone and exhausted address
// pools are OutOfResources; an unreachable engine, its 5xx answers and
// timeouts are retryable; a missing image, a foreign container or network
// of our name and a failed boot are Other, for good.
func (p *Provider) Classify(err error) providers.Classification {
	other := func(code string, retry bool) providers.Classification {
		return providers.Classification{Class: providers.ErrorOther, Code: code, Retryable: retry}
	}
	var (
		capErr     *capacityError
		foreign    *foreignError
		netErr     *networkConflictError
		noImage    *imageNotFoundError
		tooBig     *machineTooBigError
		boot       *bootError
		netTimeout net.Error
	)
	switch {
	case err == nil:
		return providers.Classification{}
	case errors.As(err, &capErr):
		return providers.Classification{Class: providers.ErrorOutOfResources, Code: codeZoneFull}
	case strings.Contains(err.Error(), "could not find an available, non-overlapping IPv4 address pool"):
		// The engine has no address range left for another zone network.
		return providers.Classification{Class: providers.ErrorOutOfResources, Code: codeAddressPoolsFull}
	case errors.As(err, &noImage):
		return other(codeImageNotFound, false)
	case errors.As(err, &foreign):
		return other(codeNameConflict, false)
	case errors.As(err, &netErr):
		return other(codeNetworkConflict, false)
	case errors.As(err, &tooBig):
		return other(codeMachineTooBig, false)
	case errors.Is(err, providers.ErrNotFound):
		return other(codeMachineType, false)
	case errors.As(err, &boot):
		return other(codeBootFailed, false)
	case client.IsErrConnectionFailed(err):
		return other(codeEngineUnreachable, true)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netTimeout) && netTimeout.Timeout():
		return other(codeTimeout, true)
	case cerrdefs.IsResourceExhausted(err):
		return other(codeRateLimited, true)
	case cerrdefs.IsInternal(err), cerrdefs.IsUnavailable(err), cerrdefs.IsUnknown(err):
		// 5xx: the engine had trouble, not the request.
		return other(codeEngineError, true)
	case cerrdefs.IsConflict(err):
		return other(codeConflict, true)
	case cerrdefs.IsInvalidArgument(err):
		return other(codeInvalid, false)
	}
	return other(codeCreateFailed, false)
}
