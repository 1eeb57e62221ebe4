package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v34 "github.com/coreos/ignition/v2/config/v3_4"
	hc "github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/prometheus/client_golang/prometheus"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// snapshot makes a snapshot in the fake Hetzner API, as a build leaves one,
// and returns its id.
func snapshot(t *testing.T, client *hc.Client) string {
	t.Helper()
	ctx := context.Background()
	res, _, err := client.Server.Create(ctx, hc.ServerCreateOpts{Name: fmt.Sprintf("builder-%d", time.Now().UnixNano()),
		ServerType: &hc.ServerType{Name: "cx22"}, Image: &hc.Image{Name: "ubuntu-24.04"}, Location: &hc.Location{Name: "fsn1"}})
	if err != nil {
		t.Fatal(err)
	}
	desc := "test snapshot"
	img, _, err := client.Server.CreateImage(ctx, res.Server, &hc.ServerCreateImageOpts{Type: hc.ImageTypeSnapshot, Description: &desc})
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(img.Image.ID, 10)
}

// A group on a Flatcar channel renders Ignition and a group on a Debian
// channel renders cloud-config, in one core built the way serve builds it:
// each reaches its provider's Create.
func TestServeRendersIgnitionAndCloudInitPerGroup(t *testing.T) {
	t.Parallel()
	f := hcloudfake.New(hcloudfake.Options{Token: "tok"})
	t.Cleanup(f.Close)
	client := hc.NewClient(hc.WithEndpoint(f.URL()), hc.WithToken("tok"))
	flatcar, debian := snapshot(t, client), snapshot(t, client)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	image := func(id, name string, manifest string) string {
		return fmt.Sprintf(`  - id: "%s"
    name: %s
    provider: hcloud
    inputsHash: 0123456789abcdef0123456789abcdef
    created: 2026-12-01T10:00:00Z
    manifest: %s
`, id, name, manifest)
	}
	debianManifest := `{components: {conntrack: "1", containerd: "1", cri-tools: "1", ebtables: "1", ethtool: "1", iptables: "1", kubeadm: "1", kubectl: "1",
      kubelet: "1", kubernetes-cni: "1", nfs-common: "1", open-iscsi: "1", runc: "1", socat: "1", wireguard: "1"}, unattendedUpgradesDisabled: true}`
	catalog := "apiVersion: prebake.dev/v1alpha1\nkind: ImageCatalog\ngeneration: 1\nimages:\n" +
		image(flatcar, "prebake-flatcar-4230-k8s-1-35-4-amd64-20261201t1000", "{components: {kubernetes-sysext: v1.35.4}}") +
		image(debian, "prebake-debian-12-k8s-1-35-4-amd64-20261201t1000", debianManifest) +
		fmt.Sprintf(`channels:
  - {name: stable, os: flatcar-4230, k8sMinor: "1.35", arch: amd64, provider: hcloud, location: "", image: "%s"}
  - {name: stable, os: debian-12, k8sMinor: "1.35", arch: amd64, provider: hcloud, location: "", image: "%s"}
`, flatcar, debian)
	if err := os.WriteFile(filepath.Join(dir, "catalog.yaml"), []byte(catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: test
imageCatalog: {file: catalog.yaml}
providers:
  hcloud: {token: {file: %s}, endpoint: %s}
bootstrap:
  apiServerEndpoint: 10.0.0.1:6443
  caCertHashes: ["sha256:abababababababababababababababababababababababababababababababab"]
  components:
    - {name: containerd, version: 1.6.20~ds1-1+b1}
  kubernetesSysext: {version: v1.35.4}
nodeGroups:
  - {id: flat, provider: hcloud, maxSize: 2, machineType: cx22, location: fsn1, image: {channel: stable, os: flatcar-4230}}
  - {id: deb, provider: hcloud, maxSize: 2, machineType: cx22, location: fsn1, image: {channel: stable, os: debian-12}}
`, token, f.URL())
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
	for _, g := range []string{"flat", "deb"} {
		if err := bc.core.IncreaseSize(g, 1); err != nil {
			t.Fatal(err)
		}
	}
	byGroup := map[string]hcloudfake.Server{}
	eventually(t, "a server of each group", func() bool {
		for _, s := range f.Servers() {
			if g := s.Labels["prebake.dev/group"]; g != "" {
				byGroup[g] = s
			}
		}
		return len(byGroup) == 2
	})
	flat, deb := byGroup["flat"], byGroup["deb"]
	if flat.Image != flatcar || deb.Image != debian {
		t.Errorf("images booted: flat %s, deb %s; want %s and %s", flat.Image, deb.Image, flatcar, debian)
	}
	if _, rpt, err := v34.Parse([]byte(flat.UserData)); err != nil || rpt.IsFatal() {
		t.Errorf("the Flatcar server's user-data is no valid Ignition config (%v, %s):\n%.300s", err, rpt, flat.UserData)
	}
	if !strings.HasPrefix(deb.UserData, "#cloud-config\n") {
		t.Errorf("the Debian server's user-data is not #cloud-config:\n%.300s", deb.UserData)
	}

	// A group on the same channel without image.os could boot either: its
	// nodes would be configured two ways as the channel moves. Refused at
	// start, naming the group.
	mixed := strings.Replace(body, "image: {channel: stable, os: debian-12}}", "image: {channel: stable}}", 1)
	if err := os.WriteFile(path, []byte(mixed), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = buildCore(context.Background(), cfg, path, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), kubefake.NewClientset())
	if err == nil || !strings.Contains(err.Error(), `"deb"`) || !strings.Contains(err.Error(), "two renderers") {
		t.Errorf("a group on a channel of two renderers: %v, want a refusal naming the group", err)
	}
}
