package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// `prebake images` builds its provider through the same factory as serve
// (app.NewProvider; cmd/prebake/app's TestServeBuildsProvidersThroughTheFactory
// is the serve side): an option the old images path dropped, the servers'
// networks and firewalls, reaches the provider it opens.
func TestImagesBuildsTheProviderThroughTheFactory(t *testing.T) {
	t.Parallel()
	f := hcloudfake.New(hcloudfake.Options{Token: "tok"})
	t.Cleanup(f.Close)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
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
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := &cobra.Command{Use: "images"}
	cmd.Flags().String("config", path, "")
	cmd.SetContext(context.Background())
	cloud, name, _, err := cloudOf(cmd)
	if err != nil || name != "hcloud" {
		t.Fatalf("cloudOf = %v, %q, %v", cloud, name, err)
	}
	p, ok := cloud.(providers.Provider)
	if !ok {
		t.Fatalf("%T is not a providers.Provider", cloud)
	}
	if _, err := p.Create(context.Background(), providers.CreateRequest{Name: "images-1", Cluster: "test", Group: "g", MachineType: "cx22", Location: "fsn1"}); err != nil {
		t.Fatal(err)
	}
	servers := f.Servers()
	if len(servers) != 1 || !slices.Equal(servers[0].Networks, []int64{7}) || !slices.Equal(servers[0].Firewalls, []int64{9}) {
		t.Errorf("servers %+v: want one with networks [7] and firewalls [9] from the config", servers)
	}
}
