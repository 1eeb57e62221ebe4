package hcloud

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

func firewallProvider(t *testing.T, f *hcloudfake.Fake, firewalls ...int64) *Provider {
	t.Helper()
	p, err := New(Options{Token: testToken, Endpoint: f.URL(), Cluster: "c", Firewalls: firewalls, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wireGuardRule is the rule the firewall must hold: inbound UDP 51871 from the sources.
func wireGuardRule(t *testing.T, fw schema.Firewall, sources ...string) {
	t.Helper()
	if len(fw.Rules) != 1 {
		t.Fatalf("firewall %s has %d rules, want 1: %+v", fw.Name, len(fw.Rules), fw.Rules)
	}
	r := fw.Rules[0]
	if r.Direction != "in" || r.Protocol != "udp" || r.Port == nil || *r.Port != "51871" || !slices.Equal(r.SourceIPs, sources) {
		t.Errorf("rule %+v (port %v), want in udp 51871 from %v", r, r.Port, sources)
	}
}

// TestWireGuardFirewall: with configured firewalls the provider keeps a firewall of its own
// that opens UDP 51871 and applies to every server of the cluster through the cluster
// label, created once, found again, and corrected when someone changed it.
func TestWireGuardFirewall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(t, hcloudfake.Options{})
	p := firewallProvider(t, f, 42)

	res, err := p.EnsureWireGuardFirewall(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.ID == 0 {
		t.Fatalf("first call: %+v, want a created firewall", res)
	}
	fws := f.Firewalls()
	if len(fws) != 1 {
		t.Fatalf("%d firewalls, want 1", len(fws))
	}
	fw := fws[0]
	if fw.Name != "prebake-c-cilium-wireguard" || fw.Labels[providers.LabelCluster] != "c" || fw.Labels[LabelFirewall] != "cilium-wireguard" {
		t.Errorf("firewall %q labels %v", fw.Name, fw.Labels)
	}
	wireGuardRule(t, fw, "0.0.0.0/0", "::/0")
	if len(fw.AppliedTo) != 1 || fw.AppliedTo[0].Type != "label_selector" || fw.AppliedTo[0].LabelSelector.Selector != "prebake.dev/cluster=c" {
		t.Errorf("applied to %+v, want the cluster's label selector", fw.AppliedTo)
	}

	// A server the provider creates gets the configured firewall at create and the
	// WireGuard one through the selector; another cluster's server does not.
	in, err := p.Create(ctx, request("pool-a-1", "pool-a"))
	if err != nil {
		t.Fatal(err)
	}
	other := firewallProvider(t, f, 42)
	other.cluster = "d"
	if _, err := other.Create(ctx, request("pool-b-1", "pool-b")); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Servers() {
		got := f.FirewallsOf(s.ID)
		want := []int64{42}
		if s.Name == "pool-a-1" {
			want = append(want, res.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("server %s (%s) has firewalls %v, want %v", s.Name, in.ProviderID, got, want)
		}
	}

	// Idempotent: found by its labels, nothing changed, no second one.
	again, err := p.EnsureWireGuardFirewall(ctx, nil)
	if err != nil || again.Created || again.Updated || again.ID != res.ID {
		t.Errorf("second call: %+v, %v; want the same firewall unchanged", again, err)
	}
	if n := f.Calls("POST", "/firewalls"); n != 1 {
		t.Errorf("POST /firewalls %d times, want 1", n)
	}

	// Narrower sources set the rules again.
	narrowed, err := p.EnsureWireGuardFirewall(ctx, []string{"5.75.0.0/16"})
	if err != nil || !narrowed.Updated {
		t.Fatalf("narrowed sources: %+v, %v; want updated", narrowed, err)
	}
	wireGuardRule(t, f.Firewalls()[0], "5.75.0.0/16")
	if _, err := p.EnsureWireGuardFirewall(ctx, []string{"not-a-cidr"}); err == nil || !strings.Contains(err.Error(), `source "not-a-cidr" is not a CIDR`) {
		t.Errorf("bad source: %v", err)
	}
}

// TestWireGuardFirewallNotNeeded: a server without any firewall takes every packet, so
// without configured firewalls nothing is created and no call is made. (Applying a
// firewall would drop everything else inbound.)
func TestWireGuardFirewallNotNeeded(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	p := firewallProvider(t, f)
	res, err := p.EnsureWireGuardFirewall(context.Background(), nil)
	if err != nil || res.ID != 0 || !strings.Contains(res.Reason, "lets every inbound packet in") {
		t.Errorf("no configured firewalls: %+v, %v", res, err)
	}
	if n := f.Calls("", ""); n != 0 {
		t.Errorf("%d API calls, want none", n)
	}
}

// TestWireGuardFirewallRepairsTheSelector: a firewall found without the cluster's
// selector (someone removed it) is applied again, and the fake refuses applying it twice.
func TestWireGuardFirewallRepairsTheSelector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(t, hcloudfake.Options{})
	p := firewallProvider(t, f, 42)
	// The firewall exists with the right labels and rules but applies to nothing.
	port, desc := "51871", "prebake: Cilium WireGuard between the cluster's machines"
	_, _, err := p.client.Firewall.Create(ctx, hcloudCreateOpts(p, port, desc))
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.EnsureWireGuardFirewall(ctx, nil)
	if err != nil || !res.Updated || res.Created {
		t.Fatalf("%+v, %v; want the selector applied", res, err)
	}
	fw := f.Firewalls()[0]
	if len(fw.AppliedTo) != 1 || fw.AppliedTo[0].LabelSelector.Selector != "prebake.dev/cluster=c" {
		t.Errorf("applied to %+v", fw.AppliedTo)
	}
	if n := f.Calls("POST", "/firewalls/"+itoa(res.ID)+"/actions/set_rules"); n != 0 {
		t.Errorf("rules were set again although they matched (%d calls)", n)
	}
	// Two firewalls with the label are ambiguous.
	opts := hcloudCreateOpts(p, port, desc)
	opts.Name += "-2"
	if _, _, err := p.client.Firewall.Create(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnsureWireGuardFirewall(ctx, nil); err == nil || !strings.Contains(err.Error(), "delete all but one") {
		t.Errorf("two labelled firewalls: %v", err)
	}
}

// hcloudCreateOpts is the WireGuard firewall as the provider would create it, applied to
// nothing.
func hcloudCreateOpts(p *Provider, port, desc string) hcloud.FirewallCreateOpts {
	var nets []net.IPNet
	for _, s := range DefaultWireGuardSources {
		_, n, _ := net.ParseCIDR(s)
		nets = append(nets, *n)
	}
	return hcloud.FirewallCreateOpts{
		Name:   p.WireGuardFirewallName(),
		Labels: map[string]string{providers.LabelCluster: p.cluster, LabelFirewall: firewallPurpose},
		Rules: []hcloud.FirewallRule{{Direction: hcloud.FirewallRuleDirectionIn, Protocol: hcloud.FirewallRuleProtocolUDP,
			Port: &port, SourceIPs: nets, Description: &desc}},
	}
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// With Options.WireGuardFirewall the provider's background work puts the
// firewall in place, retrying until the API takes it; without it, Run calls
// nothing.
func TestRunKeepsTheWireGuardFirewall(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	plain := firewallProvider(t, f, 42)
	if err := plain.Run(t.Context()); err != nil || len(f.Firewalls()) != 0 {
		t.Fatalf("Run without the option: %v, %d firewalls; want nothing done", err, len(f.Firewalls()))
	}
	p, err := New(Options{Token: testToken, Endpoint: f.URL(), Cluster: "c", Firewalls: []int64{42}, MaxRetries: -1, WireGuardFirewall: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if fws := f.Firewalls(); len(fws) != 1 || fws[0].Name != "prebake-c-cilium-wireguard" {
		t.Errorf("firewalls after Run: %+v, want the WireGuard one", fws)
	}
}
