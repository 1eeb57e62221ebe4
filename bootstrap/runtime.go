package bootstrap

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Runtime is what a node needs where it does not run on a VM of its own: for example a node
// that is a container on a shared host. Its provider declares it (it is never inferred from
// the provider's name). The zero value is a VM's and renders what bootstrap always rendered:
// the same files, the same phases.
type Runtime struct {
	// SharedKernel means the node shares its kernel with a host that is not its own (a
	// container). The script then changes no kernel setting: it writes the sysctl and module
	// files as always, but instead of `sysctl --system` and modprobe it checks that each
	// wanted sysctl already has its value (the provider sets the per-network-namespace ones
	// on the container) and fails naming the first one that differs. Modules are not
	// checked: a built-in one shows nowhere, and a missing br_netfilter shows as its
	// net.bridge sysctls missing.
	SharedKernel bool
	// RestrictOOMScoreAdj sets containerd's CRI restrict_oom_score_adj: no container gets an
	// OOM score below containerd's own. Where the node lacks CAP_SYS_RESOURCE (a Docker
	// container), runc cannot lower a score, and every pod sandbox (-998) would fail.
	RestrictOOMScoreAdj bool
	// SandboxImage is containerd's pod sandbox (pause) image; "" keeps containerd's default,
	// registry.k8s.io/pause, which needs that registry.
	SandboxImage string
	// Registries are image registries containerd reaches at another endpoint than their
	// name says, such as a plain-HTTP registry on a local network. Each one gets
	// /etc/containerd/certs.d/<host>/hosts.toml.
	Registries []Registry
	// Kubelet is merged into the cluster's KubeletConfiguration at join, as a kubeadm patch
	// beside the providerID one: for example {"failCgroupV1": false} on a cgroup v1 host,
	// where kubelet v1.35 refuses to start by default. Keys are KubeletConfiguration fields.
	Kubelet map[string]any
	// IgnorePreflightErrors are kubeadm join preflight checks whose failure is expected
	// where the node runs (kubeadm's nodeRegistration.ignorePreflightErrors).
	IgnorePreflightErrors []string
	// PodNetwork, when set, adds a podnetwork phase after join: the node waits for its
	// Node's spec.podCIDR (kube-controller-manager --allocate-node-cidrs) and writes a bridge
	// CNI configuration for it, so the node goes Ready without a CNI add-on.
	PodNetwork *PodNetwork
}

// Registry is one registry host and the endpoint containerd pulls its images from.
type Registry struct {
	// Host is the registry as image names spell it: "172.18.0.1:5000".
	Host string
	// Endpoint is where containerd pulls from: "http://172.18.0.1:5000" for plain HTTP.
	Endpoint string
}

// PodNetwork configures the bridge CNI configuration the podnetwork phase writes.
type PodNetwork struct {
	// Bridge is the Linux bridge the pods attach to; "" means DefaultCNIBridge.
	Bridge string
	// Masquerade makes the bridge plugin masquerade pod traffic leaving the pod network
	// (it needs iptables on the node). Off, pods reach the node and each other only.
	Masquerade bool
	// Wait bounds the wait for spec.podCIDR; 0 means DefaultPodCIDRWait.
	Wait time.Duration
}

// Defaults and paths of the runtime settings.
const (
	DefaultCNIBridge   = "cni0"
	DefaultPodCIDRWait = 5 * time.Minute
	// CNIConfigPath is the podnetwork phase's CNI configuration.
	CNIConfigPath = "/etc/cni/net.d/10-prebake-bridge.conflist"
	// ContainerdHostsDir is containerd's registry host configuration directory.
	ContainerdHostsDir = "/etc/containerd/certs.d"
	// KubeletRuntimePatchPath holds Runtime.Kubelet; kubeadm applies it after the providerID
	// patch (file names sort "+" before "-").
	KubeletRuntimePatchPath = KubeadmPatchesDir + "/kubeletconfiguration-runtime+merge.yaml"
)

var (
	imageRef       = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*(:[0-9]{1,5})?(/[a-z0-9._-]+)*(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$`)
	registryHost   = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`)
	kubeletField   = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	preflightCheck = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]*$`)
	bridgeName     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,14}$`)
)

// validate reports each problem through bad and returns rt with defaults filled in.
func (rt Runtime) validate(bad func(format string, args ...any)) Runtime {
	if rt.SandboxImage != "" && !imageRef.MatchString(rt.SandboxImage) {
		bad("runtime.sandboxImage %q: want an image reference such as 172.18.0.1:5000/pause:3.10", rt.SandboxImage)
	}
	seen := map[string]bool{}
	for i, r := range rt.Registries {
		if !registryHost.MatchString(r.Host) {
			bad("runtime.registries[%d].host %q: want host[:port] as image names spell it, e.g. 172.18.0.1:5000", i, r.Host)
		}
		if seen[r.Host] {
			bad("runtime.registries[%d].host %q: listed twice", i, r.Host)
		}
		seen[r.Host] = true
		if u, err := url.Parse(r.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			strings.ContainsAny(r.Endpoint, " \t\n'\"\\`$[]") {
			bad("runtime.registries[%d].endpoint %q: want an http(s) URL, e.g. http://172.18.0.1:5000", i, r.Endpoint)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rt.Kubelet)) {
		if !kubeletField.MatchString(k) {
			bad("runtime.kubelet: key %q: want a KubeletConfiguration field name such as failCgroupV1", k)
		}
		if k == "providerID" || k == "apiVersion" || k == "kind" {
			bad("runtime.kubelet: key %q is set by bootstrap itself (use providerID)", k)
		}
	}
	if _, err := yaml.Marshal(rt.Kubelet); err != nil {
		bad("runtime.kubelet: %v", err)
	}
	for i, c := range rt.IgnorePreflightErrors {
		if !preflightCheck.MatchString(c) {
			bad("runtime.ignorePreflightErrors[%d] %q: want a kubeadm preflight check name such as SystemVerification", i, c)
		}
	}
	if pn := rt.PodNetwork; pn != nil {
		p := *pn
		if p.Bridge == "" {
			p.Bridge = DefaultCNIBridge
		}
		if !bridgeName.MatchString(p.Bridge) {
			bad("runtime.podNetwork.bridge %q: want a Linux interface name of at most 15 characters", p.Bridge)
		}
		if p.Wait < 0 {
			bad("runtime.podNetwork.wait %s: must not be negative", p.Wait)
		}
		if p.Wait == 0 {
			p.Wait = DefaultPodCIDRWait
		}
		rt.PodNetwork = &p
	}
	return rt
}

// containerdConfigFor is containerdConfig with the runtime's settings; the zero Runtime
// gives containerdConfig exactly.
func containerdConfigFor(rt Runtime) string {
	var cri []string
	if rt.RestrictOOMScoreAdj {
		cri = append(cri, "  restrict_oom_score_adj = true")
	}
	if rt.SandboxImage != "" {
		cri = append(cri, fmt.Sprintf("  sandbox_image = %q", rt.SandboxImage))
	}
	var b strings.Builder
	b.WriteString("version = 2\n")
	if len(cri) > 0 {
		b.WriteString("\n[plugins.\"io.containerd.grpc.v1.cri\"]\n" + strings.Join(cri, "\n") + "\n")
	}
	b.WriteString(strings.TrimPrefix(containerdConfig, "version = 2\n"))
	if len(rt.Registries) > 0 {
		fmt.Fprintf(&b, "\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = %q\n", ContainerdHostsDir)
	}
	return b.String()
}

func registryFiles(rt Runtime) []file {
	var files []file
	for _, r := range rt.Registries {
		content := fmt.Sprintf("# Written by prebake bootstrap.\nserver = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n",
			r.Endpoint, r.Endpoint)
		files = append(files, file{ContainerdHostsDir + "/" + r.Host + "/hosts.toml", "0644", "containerd", content})
	}
	return files
}

func kubeletRuntimePatch(rt Runtime) ([]file, error) {
	if len(rt.Kubelet) == 0 {
		return nil, nil
	}
	patch, err := yaml.Marshal(rt.Kubelet)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: marshal runtime.kubelet: %w", err)
	}
	return []file{{KubeletRuntimePatchPath, "0644", "none", string(patch)}}, nil
}
