package app

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v34 "github.com/coreos/ignition/v2/config/v3_4"
	v34types "github.com/coreos/ignition/v2/config/v3_4/types"
	hc "github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/prometheus/client_golang/prometheus"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers"
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

// ignitionFixture is a fake Hetzner API with a Flatcar and a Debian snapshot, a catalog file
// whose stable channel points at each (the Flatcar one's manifest records the sysext at
// sysext), and a config whose groups boot from it: "flat" (image.os flatcar-4230) and "deb"
// (image.os debian-12); bootstrap.kubernetesSysext.version is v1.35.4.
type ignitionFixture struct {
	f                      *hcloudfake.Fake
	flatcar, debian        string
	catalog, catalogPath   string
	configPath, configBody string
}

func newIgnitionFixture(t *testing.T, sysext string) ignitionFixture {
	t.Helper()
	f := hcloudfake.New(hcloudfake.Options{Token: "tok"})
	t.Cleanup(f.Close)
	client := hc.NewClient(hc.WithEndpoint(f.URL()), hc.WithToken("tok"))
	x := ignitionFixture{f: f, flatcar: snapshot(t, client), debian: snapshot(t, client)}
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
	x.catalog = "apiVersion: prebake.dev/v1alpha1\nkind: ImageCatalog\ngeneration: 1\nimages:\n" +
		image(x.flatcar, "prebake-flatcar-4230-k8s-1-35-4-amd64-20261201t1000", "{components: {kubernetes-sysext: "+sysext+"}}") +
		image(x.debian, "prebake-debian-12-k8s-1-35-4-amd64-20261201t1000", debianManifest) +
		fmt.Sprintf(`channels:
  - {name: stable, os: flatcar-4230, k8sMinor: "1.35", arch: amd64, provider: hcloud, location: "", image: "%s"}
  - {name: stable, os: debian-12, k8sMinor: "1.35", arch: amd64, provider: hcloud, location: "", image: "%s"}
`, x.flatcar, x.debian)
	x.catalogPath = filepath.Join(dir, "catalog.yaml")
	if err := os.WriteFile(x.catalogPath, []byte(x.catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	x.configPath = filepath.Join(dir, "config.yaml")
	x.configBody = fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
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
	return x
}

// build writes body as the config and builds the core serve would build from it.
func (x ignitionFixture) build(t *testing.T, body string) (builtCore, error) {
	t.Helper()
	if err := os.WriteFile(x.configPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(x.configPath)
	if err != nil {
		t.Fatal(err)
	}
	return buildCore(context.Background(), cfg, x.configPath, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), kubefake.NewClientset())
}

// start builds and starts the core of body, stopped at the test's end.
func (x ignitionFixture) start(t *testing.T, body string) builtCore {
	t.Helper()
	bc, err := x.build(t, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.core.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bc.core.Shutdown(context.Background()) })
	return bc
}

// serversByGroup waits for a server of each group and returns them.
func (x ignitionFixture) serversByGroup(t *testing.T, groups ...string) map[string]hcloudfake.Server {
	t.Helper()
	byGroup := map[string]hcloudfake.Server{}
	eventually(t, "a server of each group", func() bool {
		for _, s := range x.f.Servers() {
			if g := s.Labels["prebake.dev/group"]; g != "" {
				byGroup[g] = s
			}
		}
		for _, g := range groups {
			if _, ok := byGroup[g]; !ok {
				return false
			}
		}
		return true
	})
	return byGroup
}

// ignitionFileText is the content of the file at path in an Ignition config (a data URL).
func ignitionFileText(t *testing.T, cfg v34types.Config, path string) string {
	t.Helper()
	for _, f := range cfg.Storage.Files {
		if f.Path != path || f.Contents.Source == nil {
			continue
		}
		b64, ok := strings.CutPrefix(*f.Contents.Source, "data:;base64,")
		if !ok {
			t.Fatalf("%s: source %.40q is not the base64 data URL the renderer writes", path, *f.Contents.Source)
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Fatalf("the Ignition config writes no %s", path)
	return ""
}

// A group on a Flatcar channel renders Ignition and a group on a Debian
// channel renders cloud-config, in one core built the way serve builds it:
// each reaches its provider's Create. The Flatcar node checks for the
// sysext version its image's catalog manifest records (v1.35.2), not
// bootstrap.kubernetesSysext.version (v1.35.4): the image carries the former.
func TestServeRendersIgnitionAndCloudInitPerGroup(t *testing.T) {
	t.Parallel()
	x := newIgnitionFixture(t, "v1.35.2")
	bc := x.start(t, x.configBody)
	for _, g := range []string{"flat", "deb"} {
		if err := bc.core.IncreaseSize(g, 1); err != nil {
			t.Fatal(err)
		}
	}
	byGroup := x.serversByGroup(t, "flat", "deb")
	flat, deb := byGroup["flat"], byGroup["deb"]
	if flat.Image != x.flatcar || deb.Image != x.debian {
		t.Errorf("images booted: flat %s, deb %s; want %s and %s", flat.Image, deb.Image, x.flatcar, x.debian)
	}
	ign, rpt, err := v34.Parse([]byte(flat.UserData))
	if err != nil || rpt.IsFatal() {
		t.Fatalf("the Flatcar server's user-data is no valid Ignition config (%v, %s)", err, rpt)
	}
	join := ignitionFileText(t, ign, bootstrap.IgnitionJoinScript)
	if !strings.Contains(join, "\nPREBAKE_SYSEXT_VERSION='v1.35.2'\n") || strings.Contains(join, "v1.35.4") {
		t.Errorf("the join script does not check for the image manifest's sysext v1.35.2 (and only it)")
	}
	if !strings.HasPrefix(deb.UserData, "#cloud-config\n") {
		t.Errorf("the Debian server's user-data is not #cloud-config (%d bytes)", len(deb.UserData))
	}

	// A group on the same channel without image.os could boot either: its
	// nodes would be configured two ways as the channel moves. Refused at
	// start, naming the group.
	mixed := strings.Replace(x.configBody, "image: {channel: stable, os: debian-12}}", "image: {channel: stable}}", 1)
	_, err = x.build(t, mixed)
	if err == nil || !strings.Contains(err.Error(), `"deb"`) || !strings.Contains(err.Error(), "two renderers") {
		t.Errorf("a group on a channel of two renderers: %v, want a refusal naming the group", err)
	}
}

// TestServeChecksRenderersWhenTheCatalogLoadsLater: when the catalog can't load at start,
// serve starts, and the core checks the catalog once it loads: the group that now mixes
// renderers gets creation errors naming it and image.os, without a server; the narrowed
// group still scales.
func TestServeChecksRenderersWhenTheCatalogLoadsLater(t *testing.T) {
	t.Parallel()
	x := newIgnitionFixture(t, "v1.35.4")
	if err := os.WriteFile(x.catalogPath, []byte("apiVersion: [not a catalog\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mixed := strings.Replace(x.configBody, "image: {channel: stable, os: debian-12}}", "image: {channel: stable}}", 1)
	bc := x.start(t, mixed)
	if err := os.WriteFile(x.catalogPath, []byte(x.catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	bc.core.Sync(t.Context(), true)
	for _, g := range []string{"flat", "deb"} {
		if err := bc.core.IncreaseSize(g, 1); err != nil {
			t.Fatal(err)
		}
	}
	x.serversByGroup(t, "flat")
	var refused *providers.InstanceError
	eventually(t, "deb's creation error", func() bool {
		for _, n := range mustNodes(t, bc.core, "deb") {
			if n.Error != nil {
				refused = n.Error
				return true
			}
		}
		return false
	})
	if refused.Code != autoscaling.CodeMixedRenderers || !strings.Contains(refused.Message, `node group "deb"`) ||
		!strings.Contains(refused.Message, "set image.os") || !strings.Contains(refused.Message, "two renderers") {
		t.Errorf("deb's creation error %+v: want %s naming the group and image.os", refused, autoscaling.CodeMixedRenderers)
	}
	for _, s := range x.f.Servers() {
		if s.Labels["prebake.dev/group"] == "deb" {
			t.Errorf("a server %s was created for the refused group", s.Name)
		}
	}
}
