package gce

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/prebake-dev/prebake/providers"
)

const mib = 1 << 20

// MachineType implements providers.Provider from machineTypes.get in the
// zone, cached for MachineTypeTTL. location is the zone: machine types are
// sold per zone.
func (p *Provider) MachineType(ctx context.Context, name, location string) (providers.MachineType, error) {
	if location == "" {
		return providers.MachineType{}, fmt.Errorf("gce machine type %q: a zone is required (the group's location, such as europe-west4-a)", name)
	}
	key := location + "/" + name
	// The lock is held through the fetch, so parallel creates of one group
	// make one request when the entry has expired, not one each.
	p.typesMu.Lock()
	defer p.typesMu.Unlock()
	c, ok := p.typeCache[key]
	if ok && p.o.Now().Sub(c.at) < p.o.MachineTypeTTL {
		return c.mt, nil
	}
	res, err := p.types.Get(ctx, &computepb.GetMachineTypeRequest{Project: p.o.Project, Zone: location, MachineType: name})
	if isNotFound(err) {
		return providers.MachineType{}, fmt.Errorf("gce machine type %q in zone %q: %w (see `gcloud compute machine-types list --zones %s`)", name, location, providers.ErrNotFound, location)
	}
	if err != nil {
		return providers.MachineType{}, fmt.Errorf("gce: get machine type %q in zone %q: %w", name, location, err)
	}
	mt := p.machineType(res)
	mt.PricePerHour = p.price(name, Region(location))
	p.typeCache[key] = cachedType{mt: mt, at: p.o.Now()}
	return mt, nil
}

// machineType turns the API's machine type into the core's. Memory is in
// MiB; GPUs come from the bundled accelerators (a2, a3, g2); the boot disk
// is the ephemeral storage.
func (p *Provider) machineType(m *computepb.MachineType) providers.MachineType {
	mt := providers.MachineType{
		Name:                  m.GetName(),
		MilliCPU:              int64(m.GetGuestCpus()) * 1000,
		MemoryBytes:           int64(m.GetMemoryMb()) * mib,
		EphemeralStorageBytes: p.o.DiskSizeGB << 30,
		Pods:                  providers.DefaultMaxPods,
		Arch:                  Arch(m.GetArchitecture(), m.GetName()),
	}
	for _, a := range m.GetAccelerators() {
		mt.GPUs += int64(a.GetGuestAcceleratorCount())
		if mt.GPUType == "" {
			mt.GPUType = a.GetGuestAcceleratorType()
		}
	}
	return mt
}

// Price is one entry of the price table: a machine type's on-demand price
// per hour in a region, or in every region the table does not name when
// Region is "".
type Price struct {
	MachineType string
	Region      string
	PerHour     float64
}

// price looks name up in the table: the entry for region first, then the
// one for any region; 0 when there is none.
func (p *Provider) price(name, region string) float64 {
	any := 0.0
	for _, pr := range p.o.Prices {
		if pr.MachineType != name {
			continue
		}
		if pr.Region == region {
			return pr.PerHour
		}
		if pr.Region == "" {
			any = pr.PerHour
		}
	}
	return any
}

// armFamilies are the machine families on Arm CPUs (Tau T2A, Axion C4A and
// N4A), for machine types whose architecture field is empty.
var armFamilies = []string{"t2a", "c4a", "n4a"}

// Arch returns the Kubernetes arch of a machine type: from the API's
// architecture (ARM64, X86_64) when set, else from the family, the name's
// first part.
func Arch(architecture, name string) string {
	switch architecture {
	case "ARM64":
		return "arm64"
	case "X86_64":
		return "amd64"
	}
	family, _, _ := strings.Cut(name, "-")
	for _, f := range armFamilies {
		if family == f {
			return "arm64"
		}
	}
	return "amd64"
}

// Region is a zone's region: europe-west4-a → europe-west4.
func Region(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}
