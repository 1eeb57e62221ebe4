package imagecatalog

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testVersions are exact versions for the default component set.
func testVersions() map[string]string {
	return map[string]string{
		"containerd": "1.7.24-1", "runc": "1.1.12-1", "kubelet": "1.34.2-1.1", "kubeadm": "1.34.2-1.1",
		"kubectl": "1.34.2-1.1", "kubernetes-cni": "1.6.0-1.1", "cri-tools": "1.34.0-1.1",
		"wireguard": "1.0.20210914-1ubuntu4", "conntrack": "1:1.4.8-1ubuntu1", "socat": "1.8.0.0-4build3",
		"ebtables": "2.0.11-6build1", "ethtool": "1:6.7-1build1", "iptables": "1.8.10-3ubuntu2",
		"open-iscsi": "2.1.9-3ubuntu5", "nfs-common": "1:2.6.4-3ubuntu5",
	}
}

func TestManifestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		edit    func(*Manifest)
		wantErr string // "" means valid
	}{
		{"default set", func(*Manifest) {}, ""},
		{"extra component", func(m *Manifest) { m.Components["nvidia-container-toolkit"] = "1.17.3-1" }, ""},
		{"missing kubelet", func(m *Manifest) { delete(m.Components, "kubelet") }, "kubelet is missing"},
		{"empty version", func(m *Manifest) { m.Components["runc"] = "" }, `runc version "" is not exact`},
		{"latest", func(m *Manifest) { m.Components["containerd"] = "latest" }, `containerd version "latest" is not exact`},
		{"range", func(m *Manifest) { m.Components["kubeadm"] = ">=1.34" }, `kubeadm version ">=1.34" is not exact`},
		{"wildcard", func(m *Manifest) { m.Components["kubectl"] = "1.34.*" }, `kubectl version "1.34.*" is not exact`},
		{"unattended upgrades on", func(m *Manifest) { m.UnattendedUpgradesDisabled = false }, "unattended-upgrades must be disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := DefaultManifest(testVersions())
			tt.edit(&m)
			err := m.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDefaultManifestHasEveryComponent(t *testing.T) {
	t.Parallel()
	m := DefaultManifest(nil)
	for _, c := range DefaultComponents {
		if _, ok := m.Components[c]; !ok {
			t.Errorf("DefaultManifest lacks %s", c)
		}
	}
	if err := m.Validate(); err == nil {
		t.Error("a manifest without versions validated")
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	want := DefaultManifest(testVersions())
	got := DefaultManifest(testVersions())
	got.Components["kubelet"] = "1.34.1-1.1"
	delete(got.Components, "socat")
	diff := Diff(want, got)
	wantDiff := []Mismatch{{"kubelet", "1.34.2-1.1", "1.34.1-1.1"}, {"socat", "1.8.0.0-4build3", ""}}
	if d := cmp.Diff(wantDiff, diff); d != "" {
		t.Errorf("Diff (-want +got):\n%s", d)
	}
	if Diff(want, want) != nil {
		t.Error("Diff of a manifest with itself is not empty")
	}
}

func TestInputsHash(t *testing.T) {
	t.Parallel()
	base := Inputs{BaseImage: "ubuntu-24.04", Manifest: DefaultManifest(testVersions()), ScriptVersion: "bootstrap-v1"}
	h := InputsHash(base)
	if len(h) != InputsHashLen || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("InputsHash = %q, want %d lower-case hex digits", h, InputsHashLen)
	}
	// Inputs without container images hash as they did before the field
	// existed (this value is the old encoding's): published images keep
	// their hash, and refresh does not rebuild them all.
	if want := "0901057fe8b2448a8f25e86aed7c4fcd"; h != want {
		t.Errorf("InputsHash of inputs without container images = %s, want %s, the hash they had before", h, want)
	}

	// The same inputs built in another order hash the same.
	reordered := Inputs{BaseImage: "ubuntu-24.04", ScriptVersion: "bootstrap-v1", Manifest: Manifest{
		Components: map[string]string{}, Sysctls: map[string]string{}, UnattendedUpgradesDisabled: true,
		Modules: []string{"wireguard", "overlay", "br_netfilter", "overlay"},
	}}
	vs := testVersions()
	for i := len(DefaultComponents) - 1; i >= 0; i-- {
		reordered.Manifest.Components[DefaultComponents[i]] = vs[DefaultComponents[i]]
	}
	for _, k := range []string{"net.ipv4.ip_forward", "net.bridge.bridge-nf-call-ip6tables", "net.bridge.bridge-nf-call-iptables"} {
		reordered.Manifest.Sysctls[k] = "1"
	}
	for i := 0; i < 20; i++ { // map iteration order varies between runs
		if got := InputsHash(reordered); got != h {
			t.Fatalf("reordered inputs hash %s, want %s", got, h)
		}
	}
	if InputsHash(Inputs{}) != InputsHash(Inputs{Manifest: Manifest{Components: map[string]string{}}}) {
		t.Error("nil and empty components hash differently")
	}
	if InputsHash(base) != InputsHash(Inputs{BaseImage: base.BaseImage, Manifest: base.Manifest, ScriptVersion: base.ScriptVersion, ContainerImages: []string{}}) {
		t.Error("nil and empty container images hash differently")
	}
	// The images the builder recorded are what came out, not an input.
	recorded := base
	recorded.Manifest = DefaultManifest(testVersions())
	recorded.Manifest.ContainerImages = map[string]string{"registry.k8s.io/pause:3.10": "sha256:" + strings.Repeat("a", 64)}
	if InputsHash(recorded) != h {
		t.Error("the manifest's recorded container images change the inputs hash")
	}

	changes := map[string]func(*Inputs){
		"base image":        func(in *Inputs) { in.BaseImage = "ubuntu-22.04" },
		"script version":    func(in *Inputs) { in.ScriptVersion = "bootstrap-v2" },
		"component version": func(in *Inputs) { in.Manifest.Components["kubelet"] = "1.34.3-1.1" },
		"extra component":   func(in *Inputs) { in.Manifest.Components["htop"] = "3.3.0-4" },
		"sysctl":            func(in *Inputs) { in.Manifest.Sysctls["vm.max_map_count"] = "262144" },
		"module":            func(in *Inputs) { in.Manifest.Modules = append(in.Manifest.Modules, "ip_vs") },
		"unattended":        func(in *Inputs) { in.Manifest.UnattendedUpgradesDisabled = false },
		"container images":  func(in *Inputs) { in.ContainerImages = []string{"registry.k8s.io/pause:3.10"} },
		// Field boundaries are kept: moving text from one field to the next changes the hash.
		"shifted text": func(in *Inputs) { in.BaseImage, in.ScriptVersion = "ubuntu-24.04bootstrap", "-v1" },
	}
	for what, change := range changes {
		in := base
		in.Manifest = DefaultManifest(testVersions())
		change(&in)
		if InputsHash(in) == h {
			t.Errorf("changing the %s does not change the hash", what)
		}
	}
}
