package bootstrap

import (
	_ "embed"
	"fmt"
	"strings"
)

// Network is how the node takes part in the cluster's network. The zero value changes
// nothing: the kubelet picks its address as it always does.
type Network struct {
	// Mode is "" or NetworkCiliumWireGuard.
	Mode string
	// NodeAddress is NodeAddressPublic or NodeAddressInternal when Mode is set.
	NodeAddress string
}

// Network modes and node addresses.
const (
	// NetworkCiliumWireGuard: nodes on different networks reach each other through Cilium's
	// WireGuard encryption alone, without an overlay. Every node must advertise an address
	// its peers can route to, and UDP WireGuardPort must be open between them
	// (docs/networking.md).
	NetworkCiliumWireGuard = "cilium-wireguard"
	// NodeAddressPublic: the kubelet advertises the machine's public IPv4 (--node-ip),
	// which the node script takes from the provider (Hetzner's metadata service, GCE's
	// metadata server, PREBAKE_PUBLIC_IPV4 or the default route on a static machine) and
	// checks at join time: on an interface and globally routable, else the run fails before
	// join and the status file says why.
	NodeAddressPublic = "public"
	// NodeAddressInternal: prebake leaves the address to the kubelet, which advertises the
	// machine's own primary address (on GCE the VPC's internal IPv4). The node script checks
	// nothing; the peers must route to that address (one VPC network, peering or a VPN).
	NodeAddressInternal = "internal"
	// WireGuardPort is the UDP port of Cilium's WireGuard tunnel endpoint on every node.
	WireGuardPort = 51871
)

// DefaultMetadataURL is the link-local address both Hetzner's metadata service and GCE's
// metadata server answer on.
const DefaultMetadataURL = "http://169.254.169.254"

// Kubelet environment files: the kubelet unit's drop-in reads KUBELET_EXTRA_ARGS from the
// first on Debian and Ubuntu (the kubelet package, and the unit bootstrap writes for a
// binary kubelet) and from the second with the Kubernetes sysext (sysext-bakery's
// 10-kubeadm.conf).
const (
	KubeletEnvDebian = "/etc/default/kubelet"
	KubeletEnvSysext = "/etc/sysconfig/kubelet"
)

//go:embed netcheck.sh
var netcheckScript string

func (n Network) validate(bad func(format string, args ...any)) {
	switch n.Mode {
	case "":
		if n.NodeAddress != "" {
			bad("network.nodeAddress %q: set network.mode %s too, or leave nodeAddress out", n.NodeAddress, NetworkCiliumWireGuard)
		}
	case NetworkCiliumWireGuard:
		if n.NodeAddress != NodeAddressPublic && n.NodeAddress != NodeAddressInternal {
			bad("network.nodeAddress %q: mode %s needs nodeAddress %s (the kubelet advertises the machine's public IPv4) or %s (its own primary address)", n.NodeAddress, n.Mode, NodeAddressPublic, NodeAddressInternal)
		}
	default:
		bad("network.mode %q: want %s, or leave network out", n.Mode, NetworkCiliumWireGuard)
	}
}

// nodeAddressCheck is what phase_address checks: the node address it looks for (public), or
// "" for none (no mode, or nodeAddress internal: the kubelet's own choice).
func (n Network) nodeAddressCheck() string {
	if n.Mode == "" || n.NodeAddress != NodeAddressPublic {
		return ""
	}
	return n.NodeAddress
}

// writeNetcheck writes the address check's values and functions (netcheck.sh). Both node
// scripts carry it; kubeletEnv is the file the kubelet's unit reads KUBELET_EXTRA_ARGS from.
func writeNetcheck(b *strings.Builder, in Input, kubeletEnv string) {
	b.WriteString("\n")
	for _, v := range []struct{ name, value string }{
		{"PREBAKE_NODE_ADDRESS", in.Network.nodeAddressCheck()},
		{"PREBAKE_KUBELET_ENV", kubeletEnv},
		{"PREBAKE_METADATA", DefaultMetadataURL},
	} {
		fmt.Fprintf(b, "%s=%s\n", v.name, shQuote(v.value))
	}
	b.WriteString(netcheckScript)
}
