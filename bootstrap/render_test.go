package bootstrap

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

const (
	testToken = "abcdef.0123456789abcdef"
	testHash  = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// validInput is a node of the given provider with one component of each kind.
func validInput(provider string) Input {
	return Input{
		Provider:   provider,
		Cluster:    Cluster{APIServerEndpoint: "10.0.0.1:6443", CACertHashes: []string{testHash}},
		JoinToken:  testToken,
		NodeName:   "pool-a-1",
		ProviderID: provider + "://pool-a-1",
		Labels:     map[string]string{"prebake.dev/group": "pool-a", "tier": "batch"},
		Taints:     []Taint{{Key: "dedicated", Value: "batch", Effect: "NoSchedule"}},
		Components: []Component{
			{Name: "containerd", Version: "1.6.20~ds1-1+b1"},
			{Name: "kubelet", Version: "v1.35.4", URL: "http://127.0.0.1:8080/kubelet",
				SHA256: strings.Repeat("ab", 32), Path: "/usr/bin/kubelet"},
		},
	}
}

// Providers are the ones the user-data is rendered for; each gets the same script.
var providers = []string{"kwok", "hcloud", "gce", "static"}

func TestRenderRejectsInvalidInputNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*Input)
		want   string
	}{
		{"endpoint without port", func(in *Input) { in.Cluster.APIServerEndpoint = "10.0.0.1" }, "cluster.apiServerEndpoint"},
		{"no CA hash", func(in *Input) { in.Cluster.CACertHashes = nil }, "cluster.caCertHashes"},
		{"bad CA hash", func(in *Input) { in.Cluster.CACertHashes = []string{"md5:00"} }, "cluster.caCertHashes[0]"},
		{"bad token", func(in *Input) { in.JoinToken = "Secret-Value-XYZ" }, "joinToken"},
		{"bad node name", func(in *Input) { in.NodeName = "Pool_A" }, "nodeName"},
		{"providerID with a newline", func(in *Input) { in.ProviderID = "gce://p/z/n\nx" }, "providerID"},
		{"label key", func(in *Input) { in.Labels = map[string]string{"a b": "c"} }, `labels: key "a b"`},
		{"label value", func(in *Input) { in.Labels = map[string]string{"a": "x,y=z"} }, `labels: "a" value`},
		{"taint effect", func(in *Input) { in.Taints = []Taint{{Key: "k", Effect: "Never"}} }, "taints[0]: effect"},
		{"range version", func(in *Input) { in.Components[0].Version = ">=1.6" }, "components[0] (containerd): version"},
		{"latest", func(in *Input) { in.Components[0].Version = "latest" }, "is not exact"},
		{"twice", func(in *Input) { in.Components[1].Name = "containerd" }, "listed twice"},
		{"sha without url", func(in *Input) { in.Components[0].SHA256 = strings.Repeat("a", 64) }, "need a url"},
		{"bad sha", func(in *Input) { in.Components[1].SHA256 = "xyz" }, "components[1] (kubelet): sha256"},
		{"relative path", func(in *Input) { in.Components[1].Path = "usr/bin/kubelet" }, "components[1] (kubelet): path"},
		{"quote in url", func(in *Input) { in.Components[1].URL = "http://h/'x" }, "components[1] (kubelet): url"},
		{"sysctl", func(in *Input) { in.Sysctls = map[string]string{"net.ipv4.ip_forward": "1; reboot"} }, "sysctls"},
		{"module", func(in *Input) { in.Modules = []string{"br netfilter"} }, "modules"},
		{"negative wait", func(in *Input) { in.Options.DpkgLockWait = -time.Second }, "options.dpkgLockWait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := validInput("hcloud")
			tt.modify(&in)
			_, err := Render(in)
			if err == nil {
				t.Fatalf("Render: want an error about %s", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Render error = %q, want it to mention %q", err, tt.want)
			}
			if strings.Contains(err.Error(), testToken) || strings.Contains(err.Error(), "Secret-Value-XYZ") {
				t.Errorf("Render error contains the join token: %q", err)
			}
		})
	}
}

// TestRenderCloudConfig checks the cloud-config's structure: the script is written once,
// root-only, and run by runcmd; and the standalone script is the same bytes.
func TestRenderCloudConfig(t *testing.T) {
	t.Parallel()
	ud, err := Render(validInput("gce"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(ud.CloudConfig, []byte("#cloud-config\n")) {
		t.Fatalf("user-data does not start with #cloud-config:\n%.80s", ud.CloudConfig)
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(ud.CloudConfig, &cc); err != nil {
		t.Fatalf("cloud-config is not YAML: %v", err)
	}
	want := cloudConfig{
		WriteFiles: []writeFile{{Path: ScriptPath, Owner: "root:root", Permissions: "0700", Content: string(ud.Script)}},
		RunCmd:     [][]string{{"sh", ScriptPath}},
	}
	if diff := cmp.Diff(want, cc); diff != "" {
		t.Errorf("cloud-config (-want +got):\n%s", diff)
	}
	if got := ud.String(); strings.Contains(got, testToken) {
		t.Errorf("UserData.String() leaks the token: %s", got)
	}
}

// generated runs the script's generated prelude in sh with put_file and component replaced
// by printers, so the test sees each argument exactly as the shell parsed it.
func generated(t testing.TB, script []byte, call string) []string {
	t.Helper()
	prelude, ok := strings.CutSuffix(string(script), nodeScript)
	if !ok {
		t.Fatal("script does not end with node.sh")
	}
	prog := prelude + `
put_file() { for a in "$@"; do printf '%s\0' "$a"; done; }
component() { for a in "$@"; do printf '%s\0' "$a"; done; }
` + call
	out, err := exec.Command("sh", "-c", prog).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// TestScriptArguments checks that what the shell sees is what Go meant, file by file.
func TestScriptArguments(t *testing.T) {
	t.Parallel()
	in := validInput("static")
	ud, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	in, _ = in.validate()
	files, err := kubeletFiles(in)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		want = append(want, f.path, f.mode, f.action, f.content)
	}
	if diff := cmp.Diff(want, generated(t, ud.Script, "prebake_kubelet_files")); diff != "" {
		t.Errorf("kubelet files as sh sees them (-want +got):\n%s", diff)
	}
	wantComps := []string{
		"apt", "containerd", "1.6.20~ds1-1+b1", "containerd", "", "", "",
		"bin", "kubelet", "v1.35.4", "kubelet", "http://127.0.0.1:8080/kubelet", strings.Repeat("ab", 32), "/usr/bin/kubelet",
	}
	if diff := cmp.Diff(wantComps, generated(t, ud.Script, "prebake_components")); diff != "" {
		t.Errorf("components as sh sees them (-want +got):\n%s", diff)
	}
	join := string(files[0].content)
	for _, s := range []string{"token: " + testToken, "apiServerEndpoint: 10.0.0.1:6443", "name: node-labels",
		"value: prebake.dev/group=pool-a,tier=batch", "key: dedicated", "effect: NoSchedule", "name: pool-a-1"} {
		if !strings.Contains(join, s) {
			t.Errorf("JoinConfiguration lacks %q:\n%s", s, join)
		}
	}
	if got, want := files[1].content, "providerID: static://pool-a-1\n"; got != want {
		t.Errorf("kubelet patch = %q, want %q", got, want)
	}
}

func TestScriptPassesShN(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		ud, err := Render(validInput(p))
		if err != nil {
			t.Fatal(err)
		}
		shN(t, ud.Script)
	}
}

// shN checks the script's syntax with the shell that runs it (dash on Debian).
func shN(t testing.TB, script []byte) {
	t.Helper()
	cmd := exec.Command("sh", "-n")
	cmd.Stdin = bytes.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}

// TestCloudInitSchema validates the user-data of every provider with Debian's cloud-init.
// It is a system test (docs/e2e.md, "Prerequisites").
func TestCloudInitSchema(t *testing.T) {
	t.Parallel()
	ci := requireCommand(t, "cloud-init", "apt-get install cloud-init")
	for _, p := range providers {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			ud, err := Render(validInput(p))
			if err != nil {
				t.Fatal(err)
			}
			path := t.TempDir() + "/user-data"
			if err := os.WriteFile(path, ud.CloudConfig, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(ci, "schema", "--config-file", path).CombinedOutput()
			if err != nil {
				t.Fatalf("cloud-init schema --config-file: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "Valid cloud-config") {
				t.Errorf("cloud-init schema did not say valid:\n%s", out)
			}
		})
	}
}

// TestCloudInitSchemaRejects shows the schema check can fail: a write_files entry with a
// wrong type is reported.
func TestCloudInitSchemaRejects(t *testing.T) {
	t.Parallel()
	ci := requireCommand(t, "cloud-init", "apt-get install cloud-init")
	path := t.TempDir() + "/user-data"
	if err := os.WriteFile(path, []byte("#cloud-config\nwrite_files:\n- path: 5\n  permissions: [1]\nruncmd: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ci, "schema", "--config-file", path).CombinedOutput()
	if err == nil {
		t.Fatalf("cloud-init schema accepted a broken config:\n%s", out)
	}
}

// requireCommand returns the command's path, or skips with one line; under CI=true a
// missing prerequisite fails instead (docs/e2e.md, "Prerequisites").
func requireCommand(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, name+" not found ("+install+")")
	}
	return p
}

func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("system test prerequisite missing under CI=true: %s", what)
	}
	t.Skipf("skipping system test: %s", what)
}
