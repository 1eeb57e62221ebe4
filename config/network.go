package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
)

// Network is a node group's network mode (docs/networking.md).
type Network struct {
	// Mode is cilium-wireguard: nodes on different networks reach each other
	// through Cilium's WireGuard encryption alone, without an overlay.
	Mode string `yaml:"mode"`
	// NodeAddress is public (the kubelet advertises the machine's public
	// IPv4, which the node checks at join time) or internal (the kubelet's
	// own choice, the machine's primary address: peers on one network).
	NodeAddress string `yaml:"nodeAddress"`
}

// BootstrapNetwork is the group's network as the bootstrap package takes it;
// the zero value when the group has none.
func (g NodeGroup) BootstrapNetwork() bootstrap.Network {
	if g.Network == nil {
		return bootstrap.Network{}
	}
	return bootstrap.Network{Mode: g.Network.Mode, NodeAddress: g.Network.NodeAddress}
}

// UsesCiliumWireGuard reports whether any group of the provider has the
// cilium-wireguard mode: its machines need UDP bootstrap.WireGuardPort open
// between them (the hcloud and gce providers' WireGuardFirewall).
func (c *Config) UsesCiliumWireGuard(provider string) bool {
	for _, g := range c.NodeGroups {
		if g.Provider == provider && g.Network != nil && g.Network.Mode == bootstrap.NetworkCiliumWireGuard {
			return true
		}
	}
	return false
}

// groupNetwork checks the group's network block.
func (v *validator) groupNetwork(p, name string, g NodeGroup) {
	n := g.Network
	if n == nil {
		return
	}
	p += ".network"
	switch n.Mode {
	case bootstrap.NetworkCiliumWireGuard:
	case "":
		v.errorf(p+".mode", "%s: network.mode is required; set %s, or remove network", name, bootstrap.NetworkCiliumWireGuard)
		return
	default:
		v.errorf(p+".mode", "%s: network.mode %q is not a mode this build knows; use %s (docs/networking.md)", name, short(n.Mode), bootstrap.NetworkCiliumWireGuard)
		return
	}
	switch n.NodeAddress {
	case bootstrap.NodeAddressPublic:
		if g.Provider == "gce" {
			v.errorf(p+".nodeAddress", "%s: network mode %s with nodeAddress public does not work on gce: a VM's external IPv4 is a 1:1 NAT on none of its interfaces, so the kubelet can't advertise it and every node would fail its address check; use nodeAddress internal for WireGuard between the VPC network's machines (GCE nodes need an overlay or a VPN to reach other networks; docs/networking.md)", name, n.Mode)
		}
	case bootstrap.NodeAddressInternal:
	default:
		v.errorf(p+".nodeAddress", "%s: network.nodeAddress %q: mode %s needs %s (the kubelet advertises the machine's public IPv4) or %s (the machine's own primary address, for peers on one network)", name, short(n.NodeAddress), n.Mode, bootstrap.NodeAddressPublic, bootstrap.NodeAddressInternal)
	}
}

// groupImageFamily checks what the group's image.os says about its nodes'
// OS: a family the catalog knows, and, for the Ignition families (Flatcar,
// Fedora CoreOS), a provider that boots images and the sysext to render.
func (v *validator) groupImageFamily(p, name string, g NodeGroup) {
	if g.Image.OS == "" || !osRelease.MatchString(g.Image.OS) {
		return
	}
	family, ok := imagecatalog.FamilyOf(g.Image.OS)
	if !ok {
		v.errorf(p+".image.os", "%s: image.os %q is not an OS family prebake knows; use one of %s, such as \"ubuntu-2404\" or \"flatcar-4230\"", name, short(g.Image.OS), familyList())
		return
	}
	if family.Renderer() != imagecatalog.RendererIgnition {
		return
	}
	if g.Provider == "static" {
		v.errorf(p+".image.os", "%s: image.os %q boots Ignition, which runs only at an image's first boot; static machines are booted already and take the cloud-init script: use a Debian or Ubuntu release", name, short(g.Image.OS))
	}
	if v.c.Bootstrap != nil && g.UserDataFile == "" && v.c.Bootstrap.KubernetesSysext == nil {
		v.errorf(p+".image.os", "%s: image.os %q boots Ignition, whose nodes run kubelet and kubeadm from the Kubernetes sysext: set bootstrap.kubernetesSysext (version, and url and sha256 per arch for the runtime path; docs/os-images.md)", name, short(g.Image.OS))
	}
}

func familyList() string {
	var s []string
	for _, f := range imagecatalog.Families {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

// CheckImageRenderers checks the groups' image channels against a loaded
// catalog: a group whose query (channel, image.os, image.k8sMinor, provider)
// matches channels of two renderers (cloud-init and Ignition, for example a
// channel holding Ubuntu and Flatcar with image.os unset) is an error naming
// the group and the channels. (With image.os set every matching channel has
// that release, so one family.) The config alone can't tell (the catalog is
// a separate document): serve refuses to start when the catalog loads at
// start and fails this, and checks every catalog it loads later, the first
// one included when it loads only after start, with ImageRendererErrors.
func (c *Config) CheckImageRenderers(cat imagecatalog.Catalog) error {
	byGroup := c.ImageRendererErrors(cat)
	var errs []error
	for _, g := range c.NodeGroups {
		if err := byGroup[g.ID]; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ImageRendererErrors is CheckImageRenderers by group ID: the groups whose
// machines the catalog would configure two ways. Serve's core refuses their
// new machines (a creation error with this message) until a catalog that
// passes loads.
func (c *Config) ImageRendererErrors(cat imagecatalog.Catalog) map[string]error {
	out := map[string]error{}
	for i, g := range c.NodeGroups {
		if g.Image.Channel == "" || g.UserDataFile != "" {
			continue
		}
		name := groupName(i, g.ID)
		rs := imagecatalog.QueryRenderers(cat, groupQuery(g))
		if len(rs) > 1 {
			var parts []string
			for _, r := range slices.Sorted(maps.Keys(rs)) {
				parts = append(parts, fmt.Sprintf("%s via %s", r, strings.Join(rs[r], ", ")))
			}
			out[g.ID] = fmt.Errorf("%s: image channel %s can resolve images of two renderers (%s): its nodes would be configured two ways as the channel moves; set image.os to one OS release", name, g.Image.Channel, strings.Join(parts, "; "))
		}
	}
	return out
}

// groupQuery is the catalog query of a group as far as the config knows it:
// the arch (from the machine type) and the location match any.
func groupQuery(g NodeGroup) imagecatalog.Query {
	or := func(s string) string {
		if s == "" {
			return imagecatalog.Any
		}
		return s
	}
	return imagecatalog.Query{Channel: g.Image.Channel, Key: imagecatalog.Key{
		OS: or(g.Image.OS), K8sMinor: or(g.Image.K8sMinor), Arch: imagecatalog.Any,
		Provider: g.Provider, Location: imagecatalog.Any,
	}}
}
