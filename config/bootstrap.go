package config

import (
	"slices"
	"strings"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
)

// Bootstrap configures the user-data prebake renders for every machine of
// a cloud or static group without a userDataFile: the cluster the node
// joins, a fresh join token per machine, and the components it must run.
// On a prebaked image the node script finds them installed and goes straight
// to kubeadm join; elsewhere it installs what is missing (docs/bootstrap.md).
type Bootstrap struct {
	// APIServerEndpoint is host:port of the kube-apiserver nodes join.
	APIServerEndpoint string `yaml:"apiServerEndpoint"`
	// CACertHashes pin the cluster CA: "sha256:<hex>" of its public key,
	// as kubeadm's --discovery-token-ca-cert-hash takes it.
	CACertHashes []string `yaml:"caCertHashes"`
	// Kubeconfig is the cluster the join tokens are made in (the one the
	// nodes join). Empty means $KUBECONFIG, then the in-cluster config.
	Kubeconfig string `yaml:"kubeconfig"`
	// TokenTTL is how long a join token is valid; at most 1h.
	TokenTTL Duration `yaml:"tokenTTL"`
	// DpkgLockWait bounds the node's wait for the dpkg lock.
	DpkgLockWait Duration `yaml:"dpkgLockWait"`
	// Components are what every node must run, at exact versions.
	Components []Component `yaml:"components"`
	// KubernetesSysext is what Flatcar and Fedora CoreOS nodes run kubelet
	// and kubeadm from (docs/os-images.md); groups whose image.os is one of
	// those need it.
	KubernetesSysext *KubernetesSysext `yaml:"kubernetesSysext"`
}

// KubernetesSysext is the Kubernetes sysext (sysext-bakery's format) at one
// release, with where the runtime path downloads it for each arch.
type KubernetesSysext struct {
	// Version is the Kubernetes release, v1.35.4: the image manifest's
	// kubernetes-sysext component.
	Version string `yaml:"version"`
	// Images maps an arch (amd64, arm64) to the .raw image's URL and sha256.
	// A prebaked image carries the sysext and needs none; an arch without an
	// entry can boot only prebaked images.
	Images map[string]SysextImage `yaml:"images"`
}

// SysextImage is where one arch's sysext image is downloaded from and what
// it hashes to.
type SysextImage struct {
	URL    string `yaml:"url"`
	SHA256 string `yaml:"sha256"`
}

// Sysext returns the sysext for a machine of the arch as the bootstrap
// package takes it; without an image for the arch its URL and sha256 are
// empty (prebaked only).
func (s *KubernetesSysext) Sysext(arch string) bootstrap.Sysext {
	img := s.Images[arch]
	return bootstrap.Sysext{Version: s.Version, Arch: arch, URL: img.URL, SHA256: img.SHA256}
}

// Component is one thing a node must run: a Debian package at an exact
// version, or a binary from url checked against sha256.
type Component struct {
	Name    string `yaml:"name"`
	Version string `yaml:"version"`
	Package string `yaml:"package"`
	URL     string `yaml:"url"`
	SHA256  string `yaml:"sha256"`
	Path    string `yaml:"path"`
}

// Defaults of the bootstrap block.
const (
	defaultTokenTTL     = time.Hour
	defaultDpkgLockWait = bootstrap.DefaultDpkgLockWait
)

func (c *Config) applyBootstrapDefaults(set map[string]bool) {
	b := c.Bootstrap
	if b == nil {
		return
	}
	if !set["bootstrap.tokenTTL"] {
		b.TokenTTL.Duration = defaultTokenTTL
	}
	if !set["bootstrap.dpkgLockWait"] {
		b.DpkgLockWait.Duration = defaultDpkgLockWait
	}
}

// BootstrapComponents returns the components as the bootstrap package takes
// them.
func (b *Bootstrap) BootstrapComponents() []bootstrap.Component {
	out := make([]bootstrap.Component, 0, len(b.Components))
	for _, c := range b.Components {
		out = append(out, bootstrap.Component{Name: c.Name, Version: c.Version, Package: c.Package, URL: c.URL, SHA256: c.SHA256, Path: c.Path})
	}
	return out
}

// BootstrapCluster returns the cluster to join as the bootstrap package
// takes it.
func (b *Bootstrap) BootstrapCluster() bootstrap.Cluster {
	return bootstrap.Cluster{APIServerEndpoint: b.APIServerEndpoint, CACertHashes: b.CACertHashes}
}

// bootstrapBlock checks the block by rendering user-data once with a
// throwaway token: the renderer's own checks name the field and the fix.
func (v *validator) bootstrapBlock() {
	b := v.c.Bootstrap
	if b == nil {
		return
	}
	if b.TokenTTL.Duration <= 0 || b.TokenTTL.Duration > bootstrap.MaxTokenTTL {
		v.errorf("bootstrap.tokenTTL", "bootstrap.tokenTTL is %s; a join token must live more than 0 and at most %s", b.TokenTTL, bootstrap.MaxTokenTTL)
	}
	_, err := bootstrap.Render(bootstrap.Input{
		Provider: "static", Cluster: b.BootstrapCluster(), JoinToken: "abcdef.0123456789abcdef", NodeName: "check",
		Components: b.BootstrapComponents(), Options: bootstrap.Options{DpkgLockWait: b.DpkgLockWait.Duration},
	})
	if err != nil {
		// The renderer names its input's fields; say them as this block does.
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "bootstrap: "), "bootstrap input: ")
		msg = strings.NewReplacer("cluster.", "", "options.", "").Replace(msg)
		v.errorf("bootstrap", "bootstrap.%s", msg)
	}
	if s := b.KubernetesSysext; s != nil {
		v.kubernetesSysext(s)
	}
	if len(b.Components) == 0 {
		v.errorf("bootstrap.components", "bootstrap.components is empty; list what every node must run at exact versions (containerd, kubelet, kubeadm, ...): see docs/bootstrap.md")
	}
}

// kubernetesSysext checks the sysext by rendering an Ignition config with a
// throwaway token: once prebaked (the version), then once per arch with its
// download (url, sha256). The renderer's checks name the field.
func (v *validator) kubernetesSysext(s *KubernetesSysext) {
	const p = "bootstrap.kubernetesSysext"
	b := v.c.Bootstrap
	v.renderIgnitionCheck(p, "version", bootstrap.IgnitionInput{Input: ignitionCheckInput(b), OS: bootstrap.Flatcar,
		Sysext: s.Sysext("amd64"), Prebaked: true})
	for _, arch := range sortedKeys(s.Images) {
		ap := joinKey(p+".images", arch)
		if arch != "amd64" && arch != "arm64" {
			v.errorf(ap, "%s: arch %q; use amd64 or arm64", p+".images", short(arch))
			continue
		}
		v.renderIgnitionCheck(ap, "url sha256", bootstrap.IgnitionInput{Input: ignitionCheckInput(b), OS: bootstrap.Flatcar,
			Sysext: s.Sysext(arch)})
	}
}

func ignitionCheckInput(b *Bootstrap) bootstrap.Input {
	return bootstrap.Input{
		Provider: "hcloud", Cluster: b.BootstrapCluster(), JoinToken: "abcdef.0123456789abcdef", NodeName: "check",
		UserDataForm: bootstrap.FormCloudInit,
	}
}

// renderIgnitionCheck renders in and reports its sysext fields' problems (of
// the space-separated fields) at path; the cluster fields are the block's
// own, which bootstrapBlock reports.
func (v *validator) renderIgnitionCheck(path, fields string, in bootstrap.IgnitionInput) {
	_, err := bootstrap.RenderIgnition(in)
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimPrefix(line, "bootstrap ignition input: ")
		rest, ok := strings.CutPrefix(line, "sysext.")
		field, _, _ := strings.Cut(rest, " ")
		if ok && slices.Contains(strings.Fields(fields), field) {
			v.errorf(path+"."+field, "%s.%s", path, rest)
		}
	}
}
