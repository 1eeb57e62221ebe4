package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/metrics"
)

// hcloudConfigWithNetworks writes a config of one hcloud group on fake whose
// servers join network 7 and carry firewall 9: options the old images path
// dropped.
func hcloudConfigWithNetworks(t *testing.T, f *hcloudfake.Fake) *config.Config {
	t.Helper()
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: test
providers:
  hcloud:
    token: {file: %s}
    endpoint: %s
    networks: [7]
    firewalls: [9]
nodeGroups:
  - {id: g, provider: hcloud, maxSize: 3, machineType: cx22, location: fsn1}
`, token, f.URL())
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// createAndCheckNetworks creates one server through p and checks the fake
// saw the config's network and firewall.
func createAndCheckNetworks(t *testing.T, f *hcloudfake.Fake, p providers.Provider, name string) {
	t.Helper()
	if _, err := p.Create(context.Background(), providers.CreateRequest{Name: name, Cluster: "test", Group: "g", MachineType: "cx22", Location: "fsn1"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Servers() {
		if s.Name == name {
			if !slices.Equal(s.Networks, []int64{7}) || !slices.Equal(s.Firewalls, []int64{9}) {
				t.Errorf("server %s: networks %v, firewalls %v; want [7] and [9] from the config", name, s.Networks, s.Firewalls)
			}
			return
		}
	}
	t.Fatalf("no server %s in the fake", name)
}

// Serve builds every provider through NewProvider: the config's options
// reach it.
func TestServeBuildsProvidersThroughTheFactory(t *testing.T) {
	t.Parallel()
	f := hcloudfake.New(hcloudfake.Options{Token: "tok"})
	t.Cleanup(f.Close)
	built, err := buildProviders(context.Background(), hcloudConfigWithNetworks(t, f), metrics.NewAPIMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	createAndCheckNetworks(t, f, built.providers["hcloud"], "serve-1")
}
