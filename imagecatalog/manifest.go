package imagecatalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// DefaultComponents is what a kubeadm node needs, baked at exact versions.
var DefaultComponents = []string{
	"containerd", "runc", "kubelet", "kubeadm", "kubectl", "kubernetes-cni", "cri-tools",
	"wireguard", "conntrack", "socat", "ebtables", "ethtool", "iptables", "open-iscsi", "nfs-common",
}

// DefaultSysctls and DefaultModules are the kernel settings a kubeadm node
// with a CNI needs; they are baked as config files.
var (
	DefaultSysctls = map[string]string{
		"net.bridge.bridge-nf-call-iptables":  "1",
		"net.bridge.bridge-nf-call-ip6tables": "1",
		"net.ipv4.ip_forward":                 "1",
	}
	DefaultModules = []string{"br_netfilter", "overlay", "wireguard"}
)

// Manifest is what is baked into an image. It is stored on the image (labels
// or metadata), in the catalog, and as a file inside the image that bootstrap
// reads at boot to skip what is already installed.
type Manifest struct {
	// Components maps a package name to its exact version, as dpkg or the
	// binary reports it (1.34.2-1.1, 2.1.5, 1:9.2.1-3).
	Components map[string]string `yaml:"components" json:"components"`
	Sysctls    map[string]string `yaml:"sysctls,omitempty" json:"sysctls,omitempty"`
	Modules    []string          `yaml:"modules,omitempty" json:"modules,omitempty"`
	// UnattendedUpgradesDisabled must be true: a first-boot apt run holds the
	// dpkg lock and changes what the manifest says.
	UnattendedUpgradesDisabled bool `yaml:"unattendedUpgradesDisabled" json:"unattendedUpgradesDisabled"`
	// ContainerImages maps each container image the image holds in
	// containerd's k8s.io namespace (a reference the recipe listed) to the
	// digest the builder recorded for it (sha256:...). Only a built image
	// has them: a requested manifest lists none (the recipe's list is
	// BuildSpec.ContainerImages). Cloud labels can't carry them (a digest is
	// longer than a label value); the catalog document does.
	ContainerImages map[string]string `yaml:"containerImages,omitempty" json:"containerImages,omitempty"`
}

// DefaultManifest is the default component set at the given versions, with
// the default kernel settings. It is not checked; call Validate.
func DefaultManifest(versions map[string]string) Manifest {
	m := Manifest{
		Components:                 map[string]string{},
		Sysctls:                    maps.Clone(DefaultSysctls),
		Modules:                    slices.Clone(DefaultModules),
		UnattendedUpgradesDisabled: true,
	}
	for _, c := range DefaultComponents {
		m.Components[c] = versions[c]
	}
	for c, v := range versions {
		m.Components[c] = v
	}
	return m
}

// ManifestFor is what an image of the family is asked to bake: DefaultManifest
// on the cloud-init families; on Flatcar and Fedora CoreOS the versions given
// (the Kubernetes sysext) with the default kernel settings. It is not
// checked; call ValidateFor.
func ManifestFor(f Family, versions map[string]string) Manifest {
	if f.Renderer() == RendererCloudInit {
		return DefaultManifest(versions)
	}
	return Manifest{
		Components: maps.Clone(versions),
		Sysctls:    maps.Clone(DefaultSysctls),
		Modules:    slices.Clone(DefaultModules),
	}
}

// A version is exact when it names one build: Debian versions with an epoch,
// upstream and revision qualify; ranges, wildcards and "latest" do not.
var exactVersion = regexp.MustCompile(`^([0-9]+:)?[0-9A-Za-z][0-9A-Za-z.+~_-]*$`)

// Validate checks a Debian or Ubuntu image's manifest: ValidateFor(FamilyDebian).
func (m Manifest) Validate() error { return m.ValidateFor(FamilyDebian) }

// ValidateFor checks that every component the family requires
// (RequiredComponents) is present, that every version is exact, that every
// container image has a digest (the one it is pinned to, if any), and, where
// nodes install with apt (the cloud-init families), that unattended-upgrades
// is disabled. Flatcar and Fedora CoreOS have no apt; their own automatic
// updates are turned off by the node's Ignition config.
func (m Manifest) ValidateFor(f Family) error {
	var errs []string
	for _, c := range f.RequiredComponents() {
		if _, ok := m.Components[c]; !ok {
			errs = append(errs, fmt.Sprintf("%s is missing", c))
		}
	}
	for _, c := range slices.Sorted(maps.Keys(m.Components)) {
		v := m.Components[c]
		if !exactVersion.MatchString(v) || strings.EqualFold(v, "latest") {
			errs = append(errs, fmt.Sprintf("%s version %q is not exact (want e.g. 1.34.2-1.1)", c, v))
		}
	}
	if !m.UnattendedUpgradesDisabled && f.Renderer() == RendererCloudInit {
		errs = append(errs, "unattended-upgrades must be disabled")
	}
	errs = append(errs, validateContainerImages(m.ContainerImages)...)
	if len(errs) > 0 {
		return fmt.Errorf("manifest: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Mismatch is one difference between a wanted and an observed manifest.
type Mismatch struct {
	Component, Want, Got string // Got is "" when the component is absent
}

func (d Mismatch) String() string {
	if d.Got == "" {
		return fmt.Sprintf("%s: want %s, not installed", d.Component, d.Want)
	}
	return fmt.Sprintf("%s: want %s, got %s", d.Component, d.Want, d.Got)
}

// Diff lists the wanted components whose observed version differs, in name
// order. Verification uses it: a manifest is what was observed in the built
// image, never what was requested.
func Diff(want, observed Manifest) []Mismatch {
	var out []Mismatch
	for _, c := range slices.Sorted(maps.Keys(want.Components)) {
		if got := observed.Components[c]; got != want.Components[c] {
			out = append(out, Mismatch{c, want.Components[c], got})
		}
	}
	return out
}

// Inputs are everything a build depends on. The same inputs build the same
// image, so a second build of them is a no-op.
type Inputs struct {
	BaseImage     string   // provider's base image, e.g. ubuntu-24.04 or a GCE image self-link
	Manifest      Manifest // requested components and settings (its ContainerImages are not hashed)
	ScriptVersion string   // version of the install script (bootstrap's, or the userDataFile's hash)
	// ContainerImages are the references the recipe lists (containerImages).
	// They are a set: order and repeats do not change the hash.
	ContainerImages []string
}

// inputsHashVersion is part of the hashed bytes, so a change to the encoding
// below changes every hash rather than colliding with old ones.
const inputsHashVersion = "prebake.dev/inputs/v1"

// InputsHashLen is the hash's length in hex digits: 128 bits, short enough to
// be a label value on Hetzner and GCE (at most 63 characters).
const InputsHashLen = 32

// InputsHash is a stable hash of in: map order does not matter, and module
// and container image order does not either (both are sets). Inputs without
// container images hash as they did before the field existed.
func InputsHash(in Inputs) string {
	// encoding/json writes map keys sorted, which makes the encoding canonical.
	canon := struct {
		V          string            `json:"v"`
		Base       string            `json:"base"`
		Script     string            `json:"script"`
		Components map[string]string `json:"components"`
		Sysctls    map[string]string `json:"sysctls"`
		Modules    []string          `json:"modules"`
		NoUU       bool              `json:"noUnattendedUpgrades"`
		Images     []string          `json:"containerImages,omitempty"`
	}{
		V: inputsHashVersion, Base: in.BaseImage, Script: in.ScriptVersion,
		Components: nonNil(in.Manifest.Components), Sysctls: nonNil(in.Manifest.Sysctls),
		Modules: slices.Compact(slices.Sorted(slices.Values(in.Manifest.Modules))),
		NoUU:    in.Manifest.UnattendedUpgradesDisabled,
		Images:  slices.Compact(slices.Sorted(slices.Values(in.ContainerImages))),
	}
	b, err := json.Marshal(canon)
	if err != nil {
		panic(err) // strings and maps of strings always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:InputsHashLen]
}

// nonNil makes a nil and an empty map hash the same.
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
