package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// networkBootstrap is the bootstrap block of the network wiring tests.
const networkBootstrap = `bootstrap:
  apiServerEndpoint: 10.0.0.1:6443
  caCertHashes: ["sha256:abababababababababababababababababababababababababababababababab"]
  components:
    - {name: containerd, version: 1.6.20~ds1-1+b1}
`

// startConfig writes body as a config file, builds the core serve builds from it (the
// workload cluster a fake) and starts it until the test ends.
func startConfig(t *testing.T, body string) builtCore {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := buildCore(context.Background(), cfg, path, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), kubefake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.core.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bc.core.Shutdown(context.Background()) })
	return bc
}

// nodeScriptValue is the value the node script in a #cloud-config sets name to, as the
// script's line writes it (name='value'); ok is false when it sets none. The script is
// never printed: it holds a join token.
func nodeScriptValue(t *testing.T, userData, name string) (string, bool) {
	t.Helper()
	var cc struct {
		WriteFiles []struct {
			Path    string `yaml:"path"`
			Content string `yaml:"content"`
		} `yaml:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(userData), &cc); err != nil {
		t.Fatalf("user-data is no cloud-config: %v", err)
	}
	for _, f := range cc.WriteFiles {
		if f.Path != bootstrap.ScriptPath {
			continue
		}
		for line := range strings.Lines(f.Content) {
			if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), name+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	t.Fatalf("the cloud-config writes no %s", bootstrap.ScriptPath)
	return "", false
}

// TestServeWiresTheNetworkModeOnHcloud: the config's network block reaches both ends
// through serve's composition root: the hcloud server's rendered user-data checks the
// public address before join, and the provider keeps the WireGuard firewall applied to the
// server next to the configured firewall 9.
func TestServeWiresTheNetworkModeOnHcloud(t *testing.T) {
	t.Parallel()
	f := hcloudfake.New(hcloudfake.Options{Token: "tok"})
	t.Cleanup(f.Close)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bc := startConfig(t, fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: test
providers:
  hcloud: {token: {file: %s}, endpoint: %s, firewalls: [9]}
%snodeGroups:
  - {id: wg, provider: hcloud, maxSize: 2, machineType: cx22, location: fsn1, network: {mode: cilium-wireguard, nodeAddress: public}}
  - {id: plain, provider: hcloud, maxSize: 2, machineType: cx22, location: fsn1}
`, token, f.URL(), networkBootstrap))
	for _, g := range []string{"wg", "plain"} {
		if err := bc.core.IncreaseSize(g, 1); err != nil {
			t.Fatal(err)
		}
	}
	var wgFirewall int64
	eventually(t, "the WireGuard firewall and a server of each group", func() bool {
		for _, fw := range f.Firewalls() {
			if fw.Labels["prebake.dev/firewall"] == "cilium-wireguard" {
				wgFirewall = fw.ID
			}
		}
		return wgFirewall != 0 && len(f.Servers()) == 2
	})
	for _, s := range f.Servers() {
		group := s.Labels["prebake.dev/group"]
		addr, ok := nodeScriptValue(t, s.UserData, "PREBAKE_NODE_ADDRESS")
		want := map[string]string{"wg": "'public'", "plain": "''"}[group]
		if !ok || addr != want {
			t.Errorf("group %s: the node script sets PREBAKE_NODE_ADDRESS=%s (set: %v), want %s", group, addr, ok, want)
		}
		// The cluster's firewall applies to every server of the cluster (Cilium's
		// WireGuard runs on all its nodes), the configured one too.
		if got := f.FirewallsOf(s.ID); !slices.Equal(got, []int64{9, wgFirewall}) {
			t.Errorf("group %s's server has firewalls %v, want [9 %d]", group, got, wgFirewall)
		}
	}
}

// TestServeWiresTheNetworkModeOnGCE: a gce group in the mode with nodeAddress internal
// renders no address check (the kubelet keeps the VPC address), and the provider keeps
// the VPC firewall rule for UDP 51871 between the instances carrying the cluster's tag,
// which its instances carry.
func TestServeWiresTheNetworkModeOnGCE(t *testing.T) {
	t.Parallel()
	f := gcefake.New(gcefake.Options{})
	t.Cleanup(f.Close)
	bc := startConfig(t, fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: test
providers:
  gce: {project: %s, endpoint: %s}
%snodeGroups:
  - {id: wg, provider: gce, maxSize: 2, machineType: e2-standard-2, location: europe-west4-a, network: {mode: cilium-wireguard, nodeAddress: internal}}
`, f.Project(), f.URL(), networkBootstrap))
	if err := bc.core.IncreaseSize("wg", 1); err != nil {
		t.Fatal(err)
	}
	const tag = "prebake-test-cilium-wireguard"
	eventually(t, "the firewall rule and the instance", func() bool { return len(f.Firewalls()) == 1 && len(f.Instances()) == 1 })
	fw, in := f.Firewalls()[0], f.Instances()[0]
	if fw.GetName() != tag || !slices.Equal(fw.GetSourceTags(), []string{tag}) || !slices.Equal(fw.GetTargetTags(), []string{tag}) ||
		len(fw.GetAllowed()) != 1 || !slices.Equal(fw.GetAllowed()[0].GetPorts(), []string{"51871"}) {
		t.Errorf("firewall rule %v: want %s, UDP 51871 between the instances tagged so", fw, tag)
	}
	if !slices.Equal(in.Tags, []string{tag}) {
		t.Errorf("instance tags %v, want [%s]", in.Tags, tag)
	}
	if addr, ok := nodeScriptValue(t, in.UserData, "PREBAKE_NODE_ADDRESS"); !ok || addr != "''" {
		t.Errorf("the node script sets PREBAKE_NODE_ADDRESS=%s (set: %v), want '' (no check with nodeAddress internal)", addr, ok)
	}
}
