package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
)

func TestParseNetwork(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(base+"    network: {mode: cilium-wireguard, nodeAddress: public}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := bootstrap.Network{Mode: bootstrap.NetworkCiliumWireGuard, NodeAddress: bootstrap.NodeAddressPublic}
	if got := c.NodeGroups[0].BootstrapNetwork(); got != want {
		t.Errorf("BootstrapNetwork = %+v, want %+v", got, want)
	}
	if !c.UsesCiliumWireGuard("kwok") || c.UsesCiliumWireGuard("hcloud") {
		t.Errorf("UsesCiliumWireGuard: kwok %v, hcloud %v; want true, false", c.UsesCiliumWireGuard("kwok"), c.UsesCiliumWireGuard("hcloud"))
	}
	// On gce the mode takes nodeAddress internal: the VPC address, and the provider's
	// firewall rule between the cluster's instances.
	gceBase := strings.Replace(gceGroupBase, "project: p}", "project: prebake-test}", 1)
	g, err := Parse([]byte(gceBase+"    network: {mode: cilium-wireguard, nodeAddress: internal}\n"), "test.yaml")
	if err != nil {
		t.Fatalf("gce with nodeAddress internal: %v", err)
	}
	if got := g.NodeGroups[0].BootstrapNetwork(); got.NodeAddress != bootstrap.NodeAddressInternal || !g.UsesCiliumWireGuard("gce") {
		t.Errorf("gce internal: BootstrapNetwork %+v, UsesCiliumWireGuard(gce) %v", got, g.UsesCiliumWireGuard("gce"))
	}
	plain, err := Parse([]byte(base), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.NodeGroups[0].BootstrapNetwork(); got != (bootstrap.Network{}) {
		t.Errorf("a group without network: %+v", got)
	}
}

// gceGroupBase is base with a gce provider and a second group on it from line 13.
const gceGroupBase = `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: demo
providers:
  gce: {project: p}
nodeGroups:
  - id: small
    provider: gce
    minSize: 0
    maxSize: 10
    machineType: e2-small
    location: europe-west1-b
`

func TestParseNetworkErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"unknown mode", base + "    network: {mode: wireguard, nodeAddress: public}\n",
			`test.yaml:13: node group "small": network.mode "wireguard" is not a mode this build knows; use cilium-wireguard`},
		{"no mode", base + "    network: {nodeAddress: public}\n", `node group "small": network.mode is required`},
		{"private address", base + "    network: {mode: cilium-wireguard, nodeAddress: private}\n",
			`node group "small": network.nodeAddress "private": mode cilium-wireguard needs public (the kubelet advertises the machine's public IPv4) or internal`},
		{"unknown field", base + "    network: {mode: cilium-wireguard, nodeAddress: public, port: 1}\n", `unknown field "port"`},
		{"gce public", gceGroupBase + "    network: {mode: cilium-wireguard, nodeAddress: public}\n",
			`test.yaml:13: node group "small": network mode cilium-wireguard with nodeAddress public does not work on gce: a VM's external IPv4 is a 1:1 NAT on none of its interfaces, so the kubelet can't advertise it and every node would fail its address check; use nodeAddress internal`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.in), "test.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestParseImageFamilies(t *testing.T) {
	t.Parallel()
	flatcar := "    image: {channel: stable, os: flatcar-4230}\n"
	if _, err := Parse([]byte(base+flatcar), "test.yaml"); err != nil {
		t.Errorf("a kwok group on flatcar without a bootstrap block: %v", err)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"unknown family", base + "    image: {channel: stable, os: rocky-9}\n",
			`node group "small": image.os "rocky-9" is not an OS family prebake knows; use one of debian, ubuntu, flatcar, fcos`},
		{"ignition on static", strings.Replace(staticBase, "location: dc1}\n  - {id: big", "location: dc1, image: {channel: stable, os: fcos-42}}\n  - {id: big", 1),
			`node group "small": image.os "fcos-42" boots Ignition, which runs only at an image's first boot`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(tc.in, "os: ") {
				t.Fatal("edit not applied")
			}
			_, err := Parse([]byte(tc.in), "test.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// sysextBase is a kwok group on Flatcar with a bootstrap block; the sysext block starts at
// line 19.
const sysextBase = base + `    image: {channel: stable, os: flatcar-4230}
bootstrap:
  apiServerEndpoint: 10.0.0.1:6443
  caCertHashes: ["sha256:abababababababababababababababababababababababababababababababab"]
  components:
    - {name: containerd, version: 1.6.20~ds1-1+b1}
  kubernetesSysext:
    version: v1.35.4
    images:
      amd64: {url: "https://extensions.flatcar.org/extensions/kubernetes-v1.35.4-x86-64.raw", sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
`

func TestParseKubernetesSysext(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(sysextBase), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := c.Bootstrap.KubernetesSysext.Sysext("amd64")
	want := bootstrap.Sysext{Version: "v1.35.4", Arch: "amd64",
		URL:    "https://extensions.flatcar.org/extensions/kubernetes-v1.35.4-x86-64.raw",
		SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	if got != want {
		t.Errorf("Sysext(amd64) = %+v, want %+v", got, want)
	}
	if arm := c.Bootstrap.KubernetesSysext.Sysext("arm64"); arm.URL != "" || arm.Version != "v1.35.4" {
		t.Errorf("Sysext(arm64) = %+v: an arch without an image is prebaked only", arm)
	}
	if c.Bootstrap.TokenTTL.Duration != time.Hour {
		t.Errorf("defaults not applied: %+v", c.Bootstrap)
	}

	for _, tc := range []struct{ name, old, new, want string }{
		{"no sysext block", "  kubernetesSysext:\n    version: v1.35.4\n    images:\n", "  x:\n    version: v1.35.4\n    images:\n", `unknown field "x"`},
		{"bad version", "version: v1.35.4", "version: 1.35", `test.yaml:20: bootstrap.kubernetesSysext.version "1.35": want an exact Kubernetes release`},
		{"bad sha", "sha256: 9f86", "sha256: XX9f86", `bootstrap.kubernetesSysext.images.amd64.sha256 "XX9f86`},
		{"bad url", `url: "https://extensions`, `url: "ftp://extensions`, `bootstrap.kubernetesSysext.images.amd64.url "ftp://`},
		{"bad arch", "      amd64: {url", "      x86_64: {url", `bootstrap.kubernetesSysext.images: arch "x86_64"; use amd64 or arm64`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := strings.Replace(sysextBase, tc.old, tc.new, 1)
			if in == sysextBase {
				t.Fatalf("edit %q not applied", tc.old)
			}
			_, err := Parse([]byte(in), "test.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error with %q", err, tc.want)
			}
		})
	}
	// A group on Flatcar that renders (a bootstrap block, no userDataFile) needs the sysext.
	without := strings.Split(sysextBase, "  kubernetesSysext:")[0]
	_, err = Parse([]byte(without), "test.yaml")
	if err == nil || !strings.Contains(err.Error(), `node group "small": image.os "flatcar-4230" boots Ignition, whose nodes run kubelet and kubeadm from the Kubernetes sysext: set bootstrap.kubernetesSysext`) {
		t.Errorf("Parse without the sysext = %v", err)
	}
}

// renderCatalog has a stable channel on kwok for Ubuntu and one for Flatcar.
func renderCatalog(t *testing.T) imagecatalog.Catalog {
	t.Helper()
	var c imagecatalog.Catalog
	built := time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC)
	for i, im := range []struct{ id, os, osVersion, k8s, comp, version string }{
		{"U", "ubuntu", "2404", "1.35.4", "", ""},
		{"F", "flatcar", "4230", "1.35.4", imagecatalog.SysextComponent, "v1.35.4"},
	} {
		v, _ := imagecatalog.ParseVersion(im.k8s)
		name := imagecatalog.Name{OS: im.os, OSVersion: im.osVersion, K8s: v, Arch: "amd64", Built: built.Add(time.Duration(i) * time.Hour)}
		versions := map[string]string{}
		for _, comp := range imagecatalog.DefaultComponents {
			versions[comp] = "1.0.0-1"
		}
		if im.comp != "" {
			versions = map[string]string{im.comp: im.version}
		}
		var err error
		c, err = imagecatalog.Publish(c, imagecatalog.Image{
			ID: im.id, Name: name.String(), Provider: "kwok", InputsHash: strings.Repeat(string(rune('a'+i)), imagecatalog.InputsHashLen),
			Created: name.Built, Verified: &imagecatalog.Event{At: name.Built},
			Manifest: imagecatalog.ManifestFor(imagecatalog.Family(im.os), versions),
		})
		if err != nil {
			t.Fatal(err)
		}
		if c, _, err = imagecatalog.Promote(c, imagecatalog.ChannelStable, im.id, built); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestCheckImageRenderers(t *testing.T) {
	t.Parallel()
	cat := renderCatalog(t)
	two := base + "    image: {channel: stable}\n" + `  - {id: flat, provider: kwok, maxSize: 1, machineType: kwok-small, location: zone-a, image: {channel: stable, os: flatcar-4230}}
  - {id: own, provider: kwok, maxSize: 1, machineType: kwok-small, location: zone-a, image: {channel: stable}, userDataFile: /dev/null}
`
	c, err := Parse([]byte(strings.Replace(two, "userDataFile: /dev/null", "userDataFile: "+regularFile(t), 1)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = c.CheckImageRenderers(cat)
	if err == nil {
		t.Fatal("a group on a channel holding Ubuntu and Flatcar with image.os unset passed")
	}
	msg := err.Error()
	for _, s := range []string{`node group "small": image channel stable can resolve images of two renderers`,
		"cloud-init via stable (os=ubuntu-2404", "ignition via stable (os=flatcar-4230", "set image.os to one OS release"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	// The narrowed group and the one with its own user-data are fine.
	if strings.Contains(msg, `"flat"`) || strings.Contains(msg, `"own"`) || len(strings.Split(msg, "\n")) != 1 {
		t.Errorf("error names more than the unnarrowed group: %q", msg)
	}
	// By group: only the unnarrowed one, with the same words (the core's creation error).
	if byGroup := c.ImageRendererErrors(cat); len(byGroup) != 1 || byGroup["small"] == nil || byGroup["small"].Error() != msg {
		t.Errorf("ImageRendererErrors = %v, want the one error of %q", byGroup, "small")
	}
	// Without the Flatcar channel the same config passes.
	ubuntuOnly := imagecatalog.Catalog{Images: cat.Images}
	for _, ch := range cat.Channels {
		if ch.OS == "ubuntu-2404" {
			ubuntuOnly.Channels = append(ubuntuOnly.Channels, ch)
		}
	}
	if err := c.CheckImageRenderers(ubuntuOnly); err != nil {
		t.Errorf("one renderer: %v", err)
	}
}

func regularFile(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/user-data"
	if err := os.WriteFile(p, []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFamilyNamesMatchBootstrap: the core turns an imagecatalog.Family into the Ignition
// renderer's OS by its name, so the two packages must spell them alike.
func TestFamilyNamesMatchBootstrap(t *testing.T) {
	t.Parallel()
	if string(bootstrap.Flatcar) != string(imagecatalog.FamilyFlatcar) || string(bootstrap.FCOS) != string(imagecatalog.FamilyFCOS) ||
		bootstrap.SysextComponent != imagecatalog.SysextComponent {
		t.Errorf("bootstrap %q/%q/%q, imagecatalog %q/%q/%q", bootstrap.Flatcar, bootstrap.FCOS, bootstrap.SysextComponent,
			imagecatalog.FamilyFlatcar, imagecatalog.FamilyFCOS, imagecatalog.SysextComponent)
	}
}
