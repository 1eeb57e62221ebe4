package gce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Cilium WireGuard (network mode cilium-wireguard, docs/networking.md): every node's UDP
// WireGuardPort must be reachable from the cluster's other machines. A VPC network takes no
// inbound traffic that no firewall rule allows (its implied ingress rule denies), and only
// the default network comes with a rule that allows traffic between its instances
// (default-allow-internal). So with Options.WireGuardFirewall the provider keeps one VPC
// firewall rule of its own that allows the port from the instances carrying the cluster's
// network tag to the instances carrying it, and gives every instance it creates that tag.
// Firewall rules have no labels: the rule is found by its name, which the cluster name
// decides, and recognised as prebake's by its description.

// WireGuardPort is the UDP port of Cilium's WireGuard tunnel endpoint (bootstrap.WireGuardPort).
const WireGuardPort = 51871

// FirewallResult says what EnsureWireGuardFirewall found or did.
type FirewallResult struct {
	// Name is the rule's name.
	Name string
	// Created and Updated say whether this call created the rule or corrected it.
	Created, Updated bool
}

// WireGuardTag is both the network tag the cluster's instances carry when
// Options.WireGuardFirewall is set and the name of the firewall rule that selects them:
// prebake-<cluster>-cilium-wireguard, or, when that is longer than the 63 characters GCE
// allows, the cluster name cut short with a hash of the whole name.
func (p *Provider) WireGuardTag() string { return wireGuardName(p.o.Cluster) }

func wireGuardName(cluster string) string {
	const prefix, suffix = "prebake-", "-cilium-wireguard"
	if n := prefix + cluster + suffix; len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(cluster))
	tail := "-" + hex.EncodeToString(sum[:4]) + "-wg"
	return prefix + strings.TrimRight(cluster[:63-len(prefix)-len(tail)], "-") + tail
}

// ownerPrefix starts the description of the rule prebake keeps for the cluster; a rule of
// that name without it is someone else's and is left alone.
func (p *Provider) ownerPrefix() string {
	return "prebake cluster " + p.o.Cluster + ":"
}

// wireGuardRule is the rule as it must be.
func (p *Provider) wireGuardRule() *computepb.Firewall {
	tag, port := p.WireGuardTag(), strconv.Itoa(WireGuardPort)
	network := p.o.Network
	if network == "" {
		network = "global/networks/default"
	}
	return &computepb.Firewall{
		Name: proto.String(tag),
		Description: proto.String(fmt.Sprintf("%s Cilium WireGuard, UDP %s between the instances tagged %s. Kept by prebake (docs/networking.md): corrected when changed, recreated when deleted.",
			p.ownerPrefix(), port, tag)),
		Network:    proto.String(network),
		Direction:  proto.String("INGRESS"),
		Priority:   proto.Int32(1000),
		Allowed:    []*computepb.Allowed{{IPProtocol: proto.String("udp"), Ports: []string{port}}},
		SourceTags: []string{tag},
		TargetTags: []string{tag},
	}
}

// EnsureWireGuardFirewall makes sure the cluster's instances accept UDP WireGuardPort from
// each other: it gets the rule by name, inserts it when it is absent (a concurrent insert's
// 409 is taken as found), and updates it (PUT, the whole rule) when it differs from
// wireGuardRule. A rule of that name that prebake did not make (its description lacks
// ownerPrefix) is an error, left untouched. It is idempotent and keeps no state: a restarted
// provider finds the rule again. Run calls it when Options.WireGuardFirewall is set.
func (p *Provider) EnsureWireGuardFirewall(ctx context.Context) (FirewallResult, error) {
	want := p.wireGuardRule()
	name := want.GetName()
	out := FirewallResult{Name: name}
	have, err := p.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: p.o.Project, Firewall: name})
	if isNotFound(err) {
		op, ierr := p.firewalls.Insert(ctx, &computepb.InsertFirewallRequest{Project: p.o.Project, FirewallResource: want})
		if ierr == nil {
			if err := p.waitGlobalProto(ctx, op.Proto()); err != nil {
				return out, fmt.Errorf("gce: create firewall rule %s (UDP %d for Cilium WireGuard): %w", name, WireGuardPort, err)
			}
			p.log.Info("gce: created the WireGuard firewall rule", "firewall", name, "port", WireGuardPort, "tag", name)
			out.Created = true
			return out, nil
		}
		if !isConflict(ierr) {
			return out, fmt.Errorf("gce: create firewall rule %s (UDP %d for Cilium WireGuard) in project %s: %w; the provider's service account needs compute.firewalls.create and compute.networks.updatePolicy (roles/compute.securityAdmin)",
				name, WireGuardPort, p.o.Project, ierr)
		}
		// Another prebake of this cluster inserted it since our get.
		have, err = p.firewalls.Get(ctx, &computepb.GetFirewallRequest{Project: p.o.Project, Firewall: name})
	}
	if err != nil {
		return out, fmt.Errorf("gce: get firewall rule %s in project %s: %w", name, p.o.Project, err)
	}
	if !strings.HasPrefix(have.GetDescription(), p.ownerPrefix()) {
		return out, fmt.Errorf("gce: firewall rule %s exists but prebake did not make it (its description does not start with %q): rename or delete it, or use another clusterName",
			name, p.ownerPrefix())
	}
	if sameRule(have, want) {
		return out, nil
	}
	op, err := p.firewalls.Update(ctx, &computepb.UpdateFirewallRequest{Project: p.o.Project, Firewall: name, FirewallResource: want})
	if err == nil {
		err = p.waitGlobalProto(ctx, op.Proto())
	}
	if err != nil {
		return out, fmt.Errorf("gce: correct firewall rule %s (UDP %d for Cilium WireGuard): %w; the provider's service account needs compute.firewalls.update (roles/compute.securityAdmin)",
			name, WireGuardPort, err)
	}
	p.log.Info("gce: corrected the WireGuard firewall rule", "firewall", name, "port", WireGuardPort)
	out.Updated = true
	return out, nil
}

// sameRule compares what the API returned with what we want, on every field the rule's
// effect depends on; the network by name (the API returns it as a URL).
func sameRule(have, want *computepb.Firewall) bool {
	lastSegment := func(s string) string { return s[strings.LastIndexByte(s, '/')+1:] }
	if have.GetDescription() != want.GetDescription() || lastSegment(have.GetNetwork()) != lastSegment(want.GetNetwork()) ||
		have.GetDirection() != want.GetDirection() || have.GetPriority() != want.GetPriority() || have.GetDisabled() ||
		len(have.GetDenied()) != 0 || len(have.GetSourceRanges()) != 0 || len(have.GetDestinationRanges()) != 0 ||
		len(have.GetSourceServiceAccounts()) != 0 || len(have.GetTargetServiceAccounts()) != 0 ||
		!slices.Equal(have.GetSourceTags(), want.GetSourceTags()) || !slices.Equal(have.GetTargetTags(), want.GetTargetTags()) ||
		len(have.GetAllowed()) != len(want.GetAllowed()) {
		return false
	}
	for i, a := range want.GetAllowed() {
		h := have.GetAllowed()[i]
		if !strings.EqualFold(h.GetIPProtocol(), a.GetIPProtocol()) || !slices.Equal(h.GetPorts(), a.GetPorts()) {
			return false
		}
	}
	return true
}
