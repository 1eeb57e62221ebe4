package static

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/static/providerid"
)

// releaseTimeout bounds the release of a claim after a failed bootstrap,
// which runs even when the Create's context has ended.
const releaseTimeout = 30 * time.Second

// noFreeMachineError: every machine that fits the request is claimed.
// Classify maps it to OutOfResources, so CA tries another group.
type noFreeMachineError struct {
	group, machineType, zone string
	fitting                  int // machines of the pool that fit at all
}

func (e *noFreeMachineError) Error() string {
	if e.fitting == 0 {
		return fmt.Sprintf("no machine in the pool has machine type %q in zone %q for group %q; add one to providers.static.machines", e.machineType, e.zone, e.group)
	}
	return fmt.Sprintf("all %d machines of type %q in zone %q for group %q are claimed; add machines to the pool, or free some", e.fitting, e.machineType, e.zone, e.group)
}

// Create implements providers.Provider. It claims a free machine that fits
// the request, pipes req.UserData to `sh -s` on it over SSH and returns it
// running. A retry with the same req.Name finds its claim: a machine whose
// bootstrap finished is returned as is, one whose bootstrap was cut short is
// bootstrapped again (the node script is idempotent). When the bootstrap
// fails the claim is released, so the retry may get another machine.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	kind, err := p.check(req)
	if err != nil {
		return providers.Instance{}, err
	}
	unlock := p.names.lock(req.Name)
	defer unlock()

	claim, err := p.claimOf(ctx, req.Name)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("static: create machine %q: %w", req.Name, err)
	}
	if claim != nil {
		inst := instanceFromClaim(claim)
		switch inst.State {
		case providers.StateDeleting:
			return providers.Instance{}, fmt.Errorf("static: create machine %q: its machine %q is being released; retry when it is free", req.Name, claim.Name)
		case providers.StateRunning:
			return inst, nil
		}
	} else {
		if claim, err = p.claimFree(ctx, req, kind); err != nil {
			return providers.Instance{}, fmt.Errorf("static: create machine %q: %w", req.Name, err)
		}
	}
	return p.bootstrap(ctx, claim, req)
}

// check validates req and returns its image kind.
func (p *Provider) check(req providers.CreateRequest) (providers.ImageKind, error) {
	if errs := validation.IsDNS1123Label(req.Name); len(errs) > 0 {
		return "", fmt.Errorf("static: machine name %q is not a DNS label: %s", req.Name, strings.Join(errs, "; "))
	}
	if req.Cluster != "" && req.Cluster != p.cluster {
		return "", fmt.Errorf("static: machine %q is for cluster %q, but this provider owns cluster %q", req.Name, req.Cluster, p.cluster)
	}
	if req.Group == "" {
		return "", fmt.Errorf("static: machine %q has no group", req.Name)
	}
	if errs := validation.IsValidLabelValue(req.Group); len(errs) > 0 {
		return "", fmt.Errorf("static: machine %q: group %q is not a valid label value: %s", req.Name, req.Group, strings.Join(errs, "; "))
	}
	if _, ok := p.types[req.MachineType]; !ok {
		return "", fmt.Errorf("static: machine %q (group %q): machine type %q: %w; declared types: %s", req.Name, req.Group, req.MachineType, providers.ErrNotFound, strings.Join(p.typeNames, ", "))
	}
	if len(req.UserData) == 0 {
		return "", fmt.Errorf("static: machine %q: group %q has no node script to run; set the group's userDataFile to a POSIX shell script", req.Name, req.Group)
	}
	switch req.ImageKind {
	case "", providers.ImageRuntimeInstall:
		return providers.ImageRuntimeInstall, nil
	}
	return "", fmt.Errorf("static: machine %q: image kind %q: a pool machine can't boot an image; give its group no image channel", req.Name, req.ImageKind)
}

// fits reports whether m may serve req.
func fits(m Machine, req providers.CreateRequest) bool {
	return m.MachineType == req.MachineType &&
		(m.Zone == "" || m.Zone == req.Location) &&
		(m.Group == "" || m.Group == req.Group)
}

// claimFree claims a machine that fits req. The API server decides races:
// creating a claim that exists fails, and we move on to the next machine.
func (p *Provider) claimFree(ctx context.Context, req providers.CreateRequest, kind providers.ImageKind) (*coordinationv1.Lease, error) {
	var fitting []Machine
	for _, m := range p.machines {
		if fits(m, req) {
			fitting = append(fitting, m)
		}
	}
	noFree := &noFreeMachineError{group: req.Group, machineType: req.MachineType, zone: req.Location, fitting: len(fitting)}
	if len(fitting) == 0 {
		return nil, noFree
	}
	// Every claim in the namespace, whoever holds it, marks a taken host.
	all, err := p.listClaims(ctx, "")
	if err != nil {
		return nil, err
	}
	taken := make(map[string]bool, len(all))
	for _, l := range all {
		taken[l.Name] = true
	}
	// Start at a place that depends on the name, so concurrent Creates try
	// different machines first instead of all racing for the first one.
	h := fnv.New32a()
	h.Write([]byte(req.Name))
	start := int(h.Sum32() % uint32(len(fitting)))
	at := p.now().UTC().Round(0)
	for i := range fitting {
		m := fitting[(start+i)%len(fitting)]
		if taken[m.Host] {
			continue
		}
		created, lost, err := p.createClaim(ctx, p.claimLease(m, req, kind, at))
		if err != nil {
			return nil, err
		}
		if lost {
			p.lostRaces.Add(1)
			continue
		}
		p.log.Info("machine claimed", "group", req.Group, "instance", req.Name, "host", m.Host, "providerID", providerid.Format(m.Host))
		return created, nil
	}
	return nil, noFree
}

// bootstrap runs the node script on the claimed machine and marks the claim
// ready.
func (p *Provider) bootstrap(ctx context.Context, claim *coordinationv1.Lease, req providers.CreateRequest) (providers.Instance, error) {
	id := providerid.Format(claim.Name)
	log := p.log.With("group", req.Group, "instance", req.Name, "host", claim.Name, "providerID", id)
	m, ok := p.byHost[claim.Name]
	if !ok {
		return providers.Instance{}, fmt.Errorf("static: create machine %q: it holds a claim on %q, which is no longer in the pool; delete %s", req.Name, claim.Name, id)
	}
	began := p.now()
	if err := p.shell.Run(ctx, m, req.UserData); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if rerr := p.deleteClaim(rctx, claim); rerr != nil {
			err = errors.Join(err, rerr)
		} else {
			log.Warn("bootstrap failed; machine released", append([]any{"err", err}, logStderr(err)...)...)
		}
		return providers.Instance{}, fmt.Errorf("static: create machine %q on %q: bootstrap: %w", req.Name, m.Host, err)
	}
	ready, err := p.setPhase(ctx, claim, phaseReady)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("static: create machine %q on %q: %w", req.Name, m.Host, err)
	}
	log.Info("machine bootstrapped", "took", p.now().Sub(began).Round(time.Millisecond))
	return instanceFromClaim(ready), nil
}
