package hcloudfake

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
)

func udpRule(port string, sources ...string) hcloud.FirewallRule {
	var nets []net.IPNet
	for _, s := range sources {
		_, n, _ := net.ParseCIDR(s)
		nets = append(nets, *n)
	}
	return hcloud.FirewallRule{Direction: hcloud.FirewallRuleDirectionIn, Protocol: hcloud.FirewallRuleProtocolUDP, Port: &port, SourceIPs: nets}
}

// TestFirewalls drives the firewall endpoints through hcloud-go: create, find by label,
// set rules, apply to a label selector (which then covers servers created later), and the
// API's refusals.
func TestFirewalls(t *testing.T) {
	t.Parallel()
	f, client, _ := newFake(t, Options{})
	ctx := context.Background()

	res, _, err := client.Firewall.Create(ctx, hcloud.FirewallCreateOpts{
		Name: "wg", Labels: map[string]string{"prebake.dev/cluster": "c"}, Rules: []hcloud.FirewallRule{udpRule("51871", "0.0.0.0/0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	fw := res.Firewall
	if fw.ID == 0 || len(fw.Rules) != 1 || *fw.Rules[0].Port != "51871" || fw.Rules[0].SourceIPs[0].String() != "0.0.0.0/0" {
		t.Fatalf("created %+v", fw)
	}
	found, err := client.Firewall.AllWithOpts(ctx, hcloud.FirewallListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "prebake.dev/cluster=c"}})
	if err != nil || len(found) != 1 || found[0].ID != fw.ID {
		t.Fatalf("list by label: %v, %v", found, err)
	}
	if none, _ := client.Firewall.AllWithOpts(ctx, hcloud.FirewallListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "prebake.dev/cluster=d"}}); len(none) != 0 {
		t.Errorf("another cluster's selector found %v", none)
	}

	if _, _, err := client.Firewall.SetRules(ctx, fw, hcloud.FirewallSetRulesOpts{Rules: []hcloud.FirewallRule{udpRule("51871", "10.0.0.0/8"), udpRule("8472", "10.0.0.0/8")}}); err != nil {
		t.Fatal(err)
	}
	got, _, err := client.Firewall.GetByID(ctx, fw.ID)
	if err != nil || len(got.Rules) != 2 || got.Rules[1].SourceIPs[0].String() != "10.0.0.0/8" {
		t.Fatalf("after set_rules: %+v, %v", got, err)
	}

	sel := []hcloud.FirewallResource{{Type: hcloud.FirewallResourceTypeLabelSelector, LabelSelector: &hcloud.FirewallResourceLabelSelector{Selector: "prebake.dev/cluster=c"}}}
	if _, _, err := client.Firewall.ApplyResources(ctx, fw, sel); err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Firewall.ApplyResources(ctx, fw, sel); !hcloud.IsError(err, "firewall_already_applied") {
		t.Errorf("applying twice: %v, want firewall_already_applied", err)
	}
	mine, _, err := client.Server.Create(ctx, createOpts("node-a", map[string]string{"prebake.dev/cluster": "c"}))
	if err != nil {
		t.Fatal(err)
	}
	theirs, _, err := client.Server.Create(ctx, createOpts("node-b", map[string]string{"prebake.dev/cluster": "d"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.FirewallsOf(mine.Server.ID); !slices.Equal(got, []int64{fw.ID}) {
		t.Errorf("a server matching the selector has firewalls %v", got)
	}
	if got := f.FirewallsOf(theirs.Server.ID); len(got) != 0 {
		t.Errorf("a server not matching the selector has firewalls %v", got)
	}
	got, _, _ = client.Firewall.GetByID(ctx, fw.ID)
	if len(got.AppliedTo) != 1 || len(got.AppliedTo[0].AppliedToResources) != 1 || got.AppliedTo[0].AppliedToResources[0].Server.ID != mine.Server.ID {
		t.Errorf("applied_to %+v, want the selector with the matching server", got.AppliedTo)
	}

	for name, opts := range map[string]hcloud.FirewallCreateOpts{
		"duplicate name":   {Name: "wg"},
		"no name":          {},
		"inbound no src":   {Name: "a", Rules: []hcloud.FirewallRule{udpRule("51871")}},
		"udp without port": {Name: "b", Rules: []hcloud.FirewallRule{{Direction: hcloud.FirewallRuleDirectionIn, Protocol: hcloud.FirewallRuleProtocolUDP, SourceIPs: udpRule("1", "0.0.0.0/0").SourceIPs}}},
		"unknown server":   {Name: "c", ApplyTo: []hcloud.FirewallResource{{Type: hcloud.FirewallResourceTypeServer, Server: &hcloud.FirewallResourceServer{ID: 999999}}}},
	} {
		if _, _, err := client.Firewall.Create(ctx, opts); err == nil {
			t.Errorf("%s: created", name)
		} else if name == "duplicate name" && !hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) {
			t.Errorf("%s: %v, want uniqueness_error", name, err)
		}
	}
}
