package autoscaling

import (
	"errors"

	"github.com/prebake-dev/prebake/providers"
)

// buildTemplate returns the marshalled scale-from-zero Node of g: the same
// shape the provider's real nodes have (providers.NodeShape), capacity from
// the machine type and allocatable minus the reserved resources.
func buildTemplate(cluster string, g *group, reserved providers.Reserved, gpuLabel string) ([]byte, error) {
	node := providers.BuildNode(shapeOf(cluster, g, "template-"+g.spec.ID, "", reserved, gpuLabel))
	b, err := node.Marshal()
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("template node marshalled to no bytes")
	}
	return b, nil
}

// shapeOf is the NodeShape of a machine of g.
func shapeOf(cluster string, g *group, name, providerID string, reserved providers.Reserved, gpuLabel string) providers.NodeShape {
	return providers.NodeShape{
		Name:        name,
		ProviderID:  providerID,
		Cluster:     cluster,
		Group:       g.spec.ID,
		MachineType: g.machineType,
		Zone:        g.spec.Zone,
		Region:      g.spec.Region,
		Topology:    topologyLabels(g),
		Labels:      g.spec.Labels,
		Taints:      g.spec.Taints,
		Reserved:    reserved,
		ImageKind:   g.imageKind,
		GPULabel:    gpuLabel,
	}
}

// topologyLabels are the provider's own topology labels for g's location, or
// nil when the node carries zone=<location> and the group's region.
func topologyLabels(g *group) map[string]string {
	return g.provider.TopologyLabels(g.spec.Zone)
}
