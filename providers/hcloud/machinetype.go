package hcloud

import (
	"fmt"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers"
)

const gib = 1 << 30

// machineType turns a server type into the core's MachineType. Hetzner's
// memory and disk are in GB that are GiB in practice (a cx22's "4" is
// 4 GiB), as CA's in-tree provider also reads them. A location the type is
// not sold in is ErrNotFound; "" skips that check.
func machineType(st *hcloud.ServerType, location string) (providers.MachineType, error) {
	mt := providers.MachineType{
		Name:                  st.Name,
		MilliCPU:              int64(st.Cores) * 1000,
		MemoryBytes:           int64(float64(st.Memory) * gib),
		EphemeralStorageBytes: int64(st.Disk) * gib,
		Pods:                  providers.DefaultMaxPods,
		Arch:                  arch(st.Architecture),
	}
	if location == "" {
		return mt, nil
	}
	sold := false
	for _, l := range st.Locations {
		if l.Location != nil && l.Location.Name == location {
			sold = true
		}
	}
	if !sold {
		return providers.MachineType{}, fmt.Errorf("hcloud server type %q is not sold in location %q: %w", st.Name, location, providers.ErrNotFound)
	}
	for _, pr := range st.Pricings {
		if pr.Location != nil && pr.Location.Name == location {
			if v, err := strconv.ParseFloat(pr.Hourly.Net, 64); err == nil {
				mt.PricePerHour = v
			}
		}
	}
	return mt, nil
}

// arch maps Hetzner's architecture names to Kubernetes'.
func arch(a hcloud.Architecture) string {
	if a == hcloud.ArchitectureARM {
		return "arm64"
	}
	return "amd64"
}

// TopologyLabels implements providers.Provider with what Hetzner's
// controllers put on a node: the CCM sets the server's datacenter as the zone
// and its location as the region, and marks cloud servers; the CSI driver
// keys volumes to the location. The zone is the location's one datacenter
// (from the datacenter list MachineType loads); where a location has several
// there is no zone label rather than a wrong one (CA's own Hetzner provider
// sets none at all).
func (p *Provider) TopologyLabels(location string) map[string]string {
	l := map[string]string{LabelProvidedBy: "cloud"}
	if location == "" {
		return l
	}
	l[providers.LabelRegion] = location
	l[LabelCSILocation] = location
	p.zonesMu.Lock()
	zone := p.zones[location]
	p.zonesMu.Unlock()
	if zone != "" {
		l[providers.LabelZone] = zone
	}
	return l
}
