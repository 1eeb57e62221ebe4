package bootstrap

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// nestedRuntime is what a node in a Docker container declares.
func nestedRuntime() Runtime {
	return Runtime{
		SharedKernel:          true,
		RestrictOOMScoreAdj:   true,
		SandboxImage:          "172.18.0.1:5000/pause:3.10",
		Registries:            []Registry{{Host: "172.18.0.1:5000", Endpoint: "http://172.18.0.1:5000"}},
		Kubelet:               map[string]any{"failCgroupV1": false},
		IgnorePreflightErrors: []string{"SystemVerification"},
		PodNetwork:            &PodNetwork{},
	}
}

func fileByPath(files []file, path string) (file, bool) {
	for _, f := range files {
		if f.path == path {
			return f, true
		}
	}
	return file{}, false
}

// A VM's input (zero Runtime) gets exactly the files it always got.
func TestZeroRuntimeRendersWhatAVMGets(t *testing.T) {
	t.Parallel()
	in, err := validInput("hcloud").validate()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := configureFiles(in)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := fileByPath(conf, "/etc/containerd/config.toml"); f.content != containerdConfig {
		t.Errorf("containerd config with a zero Runtime:\n%s\nwant:\n%s", f.content, containerdConfig)
	}
	for _, f := range conf {
		if strings.HasPrefix(f.path, ContainerdHostsDir) {
			t.Errorf("zero Runtime wrote %s", f.path)
		}
	}
	kub, err := kubeletFiles(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(kub) != 2 {
		t.Errorf("kubelet files = %d, want the join configuration and the providerID patch", len(kub))
	}
	if strings.Contains(kub[0].content, "ignorePreflightErrors") {
		t.Errorf("JoinConfiguration has ignorePreflightErrors:\n%s", kub[0].content)
	}
	ud, err := Render(validInput("hcloud"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PREBAKE_SHARED_KERNEL='0'\n", "PREBAKE_POD_NETWORK='0'\n"} {
		if !strings.Contains(string(ud.Script), want) {
			t.Errorf("script lacks %q", want)
		}
	}
	if strings.Contains(string(ud.Script), "PREBAKE_CNI_BRIDGE=") {
		t.Error("script sets a CNI bridge without runtime.podNetwork")
	}
}

func TestRuntimeFiles(t *testing.T) {
	t.Parallel()
	in := validInput("docker")
	in.Runtime = nestedRuntime()
	in, err := in.validate()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := configureFiles(in)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := fileByPath(conf, "/etc/containerd/config.toml")
	wantConfig := `version = 2

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "172.18.0.1:5000/pause:3.10"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
`
	if diff := cmp.Diff(wantConfig, f.content); diff != "" {
		t.Errorf("containerd config (-want +got):\n%s", diff)
	}
	hosts, ok := fileByPath(conf, "/etc/containerd/certs.d/172.18.0.1:5000/hosts.toml")
	if !ok || hosts.action != "containerd" {
		t.Fatalf("no hosts.toml for the registry (or it does not restart containerd): %+v", conf)
	}
	for _, want := range []string{`server = "http://172.18.0.1:5000"`, `[host."http://172.18.0.1:5000"]`, `capabilities = ["pull", "resolve"]`} {
		if !strings.Contains(hosts.content, want) {
			t.Errorf("hosts.toml lacks %q:\n%s", want, hosts.content)
		}
	}
	kub, err := kubeletFiles(in)
	if err != nil {
		t.Fatal(err)
	}
	patch, ok := fileByPath(kub, KubeletRuntimePatchPath)
	if !ok || patch.content != "failCgroupV1: false\n" {
		t.Errorf("runtime kubelet patch = %+v, want failCgroupV1: false", patch)
	}
	var jc struct {
		NodeRegistration struct {
			IgnorePreflightErrors []string `yaml:"ignorePreflightErrors"`
		} `yaml:"nodeRegistration"`
	}
	if err := yaml.Unmarshal([]byte(kub[0].content), &jc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"SystemVerification"}, jc.NodeRegistration.IgnorePreflightErrors); diff != "" {
		t.Errorf("ignorePreflightErrors (-want +got):\n%s", diff)
	}
	if in.Runtime.PodNetwork.Bridge != DefaultCNIBridge || in.Runtime.PodNetwork.Wait != DefaultPodCIDRWait {
		t.Errorf("podNetwork defaults = %+v", in.Runtime.PodNetwork)
	}
	ud, err := Render(validInput("docker"))
	if err != nil {
		t.Fatal(err)
	}
	shN(t, ud.Script)
}

func TestRuntimeRejectsInvalidInputNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*Runtime)
		want   string
	}{
		{"sandbox image", func(r *Runtime) { r.SandboxImage = "Pause Image" }, "runtime.sandboxImage"},
		{"registry host", func(r *Runtime) { r.Registries[0].Host = "http://x" }, "runtime.registries[0].host"},
		{"registry endpoint", func(r *Runtime) { r.Registries[0].Endpoint = "ftp://x" }, "runtime.registries[0].endpoint"},
		{"registry twice", func(r *Runtime) { r.Registries = append(r.Registries, r.Registries[0]) }, "runtime.registries[1].host"},
		{"kubelet key", func(r *Runtime) { r.Kubelet = map[string]any{"fail cgroup": true} }, "runtime.kubelet: key"},
		{"kubelet providerID", func(r *Runtime) { r.Kubelet = map[string]any{"providerID": "x"} }, "use providerID"},
		{"preflight", func(r *Runtime) { r.IgnorePreflightErrors = []string{"a b"} }, "runtime.ignorePreflightErrors[0]"},
		{"bridge", func(r *Runtime) { r.PodNetwork.Bridge = "a-very-long-bridge-name" }, "runtime.podNetwork.bridge"},
		{"wait", func(r *Runtime) { r.PodNetwork.Wait = -time.Second }, "runtime.podNetwork.wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := validInput("docker")
			in.Runtime = nestedRuntime()
			tt.modify(&in.Runtime)
			_, err := Render(in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Render error = %v, want it to name %q", err, tt.want)
			}
		})
	}
}

// nodeFunctions runs node.sh's functions (not its main) after the prelude of in, then call,
// in sh; it returns the combined output and the exit error.
func nodeFunctions(t *testing.T, in Input, call string) (string, error) {
	t.Helper()
	ud, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	script, ok := strings.CutSuffix(string(ud.Script), nodeMain)
	if !ok {
		t.Fatal("script does not end with node.sh's main call")
	}
	dir := t.TempDir()
	prog := script + "\nPREBAKE_STATUS=" + shQuote(filepath.Join(dir, "status.json")) + "\nPHASE=test\nP_START=$(now_ms)\n" + call
	out, err := exec.Command("sh", "-c", prog).CombinedOutput()
	return string(out), err
}

// writeProcSys makes a fake /proc/sys holding the given keys.
func writeProcSys(t *testing.T, values map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range values {
		p := filepath.Join(dir, strings.ReplaceAll(k, ".", "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSharedKernelChecksSysctlsInsteadOfSettingThem(t *testing.T) {
	t.Parallel()
	in := validInput("docker")
	in.Runtime = Runtime{SharedKernel: true}
	in.Sysctls = map[string]string{"net.ipv4.ip_forward": "1", "net.ipv4.ip_local_port_range": "32768 60999"}
	good := map[string]string{"net.ipv4.ip_forward": "1", "net.ipv4.ip_local_port_range": "32768\t60999"}

	out, err := nodeFunctions(t, in, "PROC_SYS="+shQuote(writeProcSys(t, good))+"\ncheck_sysctls\necho checked")
	if err != nil || !strings.Contains(out, "checked") {
		t.Fatalf("check_sysctls with every value set: %v\n%s", err, out)
	}
	bad := map[string]string{"net.ipv4.ip_forward": "0", "net.ipv4.ip_local_port_range": "32768 60999"}
	out, err = nodeFunctions(t, in, "PROC_SYS="+shQuote(writeProcSys(t, bad))+"\ncheck_sysctls\necho checked")
	if err == nil || !strings.Contains(out, "sysctl net.ipv4.ip_forward is 0, want 1") || strings.Contains(out, "checked") {
		t.Errorf("check_sysctls with ip_forward=0: %v\n%s", err, out)
	}
	out, err = nodeFunctions(t, in, "PROC_SYS="+shQuote(writeProcSys(t, map[string]string{"net.ipv4.ip_forward": "1"}))+"\ncheck_sysctls")
	if err == nil || !strings.Contains(out, "sysctl net.ipv4.ip_local_port_range does not exist") {
		t.Errorf("check_sysctls with a key missing: %v\n%s", err, out)
	}
	// A VM's script never checks: it applies.
	if !strings.Contains(nodeScript, `if [ "$PREBAKE_SHARED_KERNEL" = 1 ]; then`) {
		t.Error("node.sh no longer branches on PREBAKE_SHARED_KERNEL")
	}
}

func TestPodNetworkWritesTheBridgeConfigForThePodCIDR(t *testing.T) {
	t.Parallel()
	in := validInput("docker")
	in.Runtime = Runtime{PodNetwork: &PodNetwork{Bridge: "br-pods", Wait: time.Second}}
	dir := t.TempDir()
	cert := filepath.Join(dir, "kubelet-client-current.pem")
	if err := os.WriteFile(cert, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "net.d", "10-prebake-bridge.conflist")
	setup := "KUBELET_CLIENT_CERT=" + shQuote(cert) + "\nPREBAKE_CNI_CONFIG=" + shQuote(conf) + "\n"
	// curl stands in for the API server: it records its URL and answers with a Node.
	node := `{"kind":"Node","metadata":{"name":"pool-a-1"},"spec":{"podCIDR": "10.244.3.0/24","podCIDRs":["10.244.3.0/24"]}}`
	curl := "curl() { for a in \"$@\"; do last=$a; done; echo \"$last\" >" + shQuote(filepath.Join(dir, "url")) + "; echo '" + node + "'; }\n"
	out, err := nodeFunctions(t, in, setup+curl+"phase_podnetwork\necho \"detail=$P_DETAIL\"")
	if err != nil {
		t.Fatalf("phase_podnetwork: %v\n%s", err, out)
	}
	if url, _ := os.ReadFile(filepath.Join(dir, "url")); string(url) != "https://10.0.0.1:6443/api/v1/nodes/pool-a-1\n" {
		t.Errorf("read the Node at %q", url)
	}
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
			IPMasq bool   `json:"ipMasq"`
			IPAM   struct {
				Type   string                `json:"type"`
				Ranges [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("CNI config is not JSON: %v\n%s", err, data)
	}
	if len(cfg.Plugins) != 2 || cfg.Plugins[0].Type != "bridge" || cfg.Plugins[0].Bridge != "br-pods" || cfg.Plugins[0].IPMasq ||
		cfg.Plugins[0].IPAM.Type != "host-local" || cfg.Plugins[0].IPAM.Ranges[0][0]["subnet"] != "10.244.3.0/24" || cfg.Plugins[1].Type != "portmap" {
		t.Errorf("CNI config = %+v", cfg)
	}
	if !strings.Contains(out, "detail=podCIDR 10.244.3.0/24") {
		t.Errorf("phase detail: %s", out)
	}

	// No podCIDR within the bound: the error names the controller-manager flags.
	empty := "curl() { echo '{\"kind\":\"Node\",\"spec\":{}}'; }\n"
	out, err = nodeFunctions(t, in, setup+empty+"phase_podnetwork")
	if err == nil || !strings.Contains(out, "has no spec.podCIDR after 1s: run kube-controller-manager with --allocate-node-cidrs") {
		t.Errorf("phase_podnetwork without a podCIDR: %v\n%s", err, out)
	}
}
