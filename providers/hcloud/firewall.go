package hcloud

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers"
)

// Cilium WireGuard (network mode cilium-wireguard, docs/networking.md): every node's UDP
// WireGuardPort must be reachable from the cluster's other machines. A Hetzner server that
// has no firewall applied takes every inbound packet; one that has (providers.hcloud.
// firewalls) takes only what some applied firewall allows. So when firewalls are configured
// the provider keeps one firewall of its own that allows the port and applies it, through a
// label selector on the cluster label, to every server it owns, now and later. Hetzner
// applies the union of a server's firewalls, so this adds the port to whatever the
// configured ones allow.

// WireGuardPort is the UDP port of Cilium's WireGuard tunnel endpoint (bootstrap.WireGuardPort).
const WireGuardPort = 51871

// LabelFirewall marks the firewall the provider keeps; its value names the purpose.
const LabelFirewall = "prebake.dev/firewall"

// firewallPurpose is LabelFirewall's value on the WireGuard firewall.
const firewallPurpose = "cilium-wireguard"

// DefaultWireGuardSources is where WireGuard packets may come from when the caller names no
// sources: anywhere. WireGuard answers no packet that does not authenticate with a peer's
// key, and the peers (other clouds' nodes, static machines, other clusters of a mesh) are
// not all known to this provider.
var DefaultWireGuardSources = []string{"0.0.0.0/0", "::/0"}

// FirewallResult says what EnsureWireGuardFirewall found or did.
type FirewallResult struct {
	// ID is the firewall's id; 0 when none is needed.
	ID int64
	// Created and Updated say whether this call created the firewall or changed its rules or
	// what it applies to.
	Created, Updated bool
	// Reason is why no firewall is needed, when ID is 0.
	Reason string
}

// WireGuardFirewallName is the name of the cluster's WireGuard firewall.
func (p *Provider) WireGuardFirewallName() string {
	return "prebake-" + p.cluster + "-" + firewallPurpose
}

// EnsureWireGuardFirewall makes sure the cluster's servers accept UDP WireGuardPort from
// sources (CIDRs; nil means DefaultWireGuardSources). Without configured firewalls nothing
// is needed and no call is made. Otherwise it finds the provider's firewall by its labels,
// creates it when absent, and corrects its rules and its label selector when they differ.
// It is idempotent; call it at startup when a group of this provider has the
// cilium-wireguard mode.
func (p *Provider) EnsureWireGuardFirewall(ctx context.Context, sources []string) (FirewallResult, error) {
	if len(p.fws) == 0 {
		return FirewallResult{Reason: "no firewall is applied to the servers (providers.hcloud.firewalls is empty), so Hetzner lets every inbound packet in, UDP " +
			strconv.Itoa(WireGuardPort) + " too"}, nil
	}
	if sources == nil {
		sources = DefaultWireGuardSources
	}
	var nets []net.IPNet
	for _, s := range sources {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			return FirewallResult{}, fmt.Errorf("hcloud: WireGuard firewall: source %q is not a CIDR such as 0.0.0.0/0", s)
		}
		nets = append(nets, *n)
	}
	port := strconv.Itoa(WireGuardPort)
	desc := "prebake: Cilium WireGuard between the cluster's machines"
	rules := []hcloud.FirewallRule{{
		Direction: hcloud.FirewallRuleDirectionIn, Protocol: hcloud.FirewallRuleProtocolUDP,
		Port: &port, SourceIPs: nets, Description: &desc,
	}}
	selector := providers.LabelCluster + "=" + p.cluster
	applyTo := []hcloud.FirewallResource{{
		Type: hcloud.FirewallResourceTypeLabelSelector, LabelSelector: &hcloud.FirewallResourceLabelSelector{Selector: selector},
	}}
	labels := map[string]string{providers.LabelCluster: p.cluster, LabelFirewall: firewallPurpose}

	found, err := p.client.Firewall.AllWithOpts(ctx, hcloud.FirewallListOpts{ListOpts: hcloud.ListOpts{
		LabelSelector: providers.LabelCluster + "=" + p.cluster + "," + LabelFirewall + "=" + firewallPurpose,
	}})
	if err != nil {
		return FirewallResult{}, fmt.Errorf("hcloud: list the cluster's WireGuard firewall: %w", err)
	}
	switch len(found) {
	case 0:
		res, _, err := p.client.Firewall.Create(ctx, hcloud.FirewallCreateOpts{
			Name: p.WireGuardFirewallName(), Labels: labels, Rules: rules, ApplyTo: applyTo,
		})
		if err != nil {
			return FirewallResult{}, fmt.Errorf("hcloud: create firewall %s (UDP %s for Cilium WireGuard): %w; the token needs write access, or allow the port in one of providers.hcloud.firewalls", p.WireGuardFirewallName(), port, err)
		}
		p.log.Info("hcloud: created the WireGuard firewall", "firewall", res.Firewall.ID, "name", p.WireGuardFirewallName(), "port", WireGuardPort, "selector", selector)
		return FirewallResult{ID: res.Firewall.ID, Created: true}, nil
	case 1:
	default:
		var ids []int64
		for _, fw := range found {
			ids = append(ids, fw.ID)
		}
		return FirewallResult{}, fmt.Errorf("hcloud: %d firewalls %v carry %s=%s for cluster %s; delete all but one", len(found), ids, LabelFirewall, firewallPurpose, p.cluster)
	}
	fw := found[0]
	out := FirewallResult{ID: fw.ID}
	if !sameRules(fw.Rules, rules) {
		if _, _, err := p.client.Firewall.SetRules(ctx, fw, hcloud.FirewallSetRulesOpts{Rules: rules}); err != nil {
			return FirewallResult{}, fmt.Errorf("hcloud: set the rules of firewall %d (%s): %w", fw.ID, fw.Name, err)
		}
		out.Updated = true
	}
	applied := slices.ContainsFunc(fw.AppliedTo, func(r hcloud.FirewallResource) bool {
		return r.Type == hcloud.FirewallResourceTypeLabelSelector && r.LabelSelector != nil && r.LabelSelector.Selector == selector
	})
	if !applied {
		if _, _, err := p.client.Firewall.ApplyResources(ctx, fw, applyTo); err != nil {
			return FirewallResult{}, fmt.Errorf("hcloud: apply firewall %d (%s) to %s: %w", fw.ID, fw.Name, selector, err)
		}
		out.Updated = true
	}
	if out.Updated {
		p.log.Info("hcloud: corrected the WireGuard firewall", "firewall", fw.ID, "port", WireGuardPort, "selector", selector)
	}
	return out, nil
}

// sameRules compares what the API returned with what we want, as sets of sources.
func sameRules(have, want []hcloud.FirewallRule) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range want {
		h, w := have[i], want[i]
		if h.Direction != w.Direction || h.Protocol != w.Protocol || deref(h.Port) != deref(w.Port) ||
			!sameNets(h.SourceIPs, w.SourceIPs) || len(h.DestinationIPs) != 0 {
			return false
		}
	}
	return true
}

func sameNets(a, b []net.IPNet) bool {
	key := func(ns []net.IPNet) []string {
		var s []string
		for _, n := range ns {
			s = append(s, n.String())
		}
		slices.Sort(s)
		return s
	}
	return slices.Equal(key(a), key(b))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
