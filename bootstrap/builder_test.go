package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func validBuilderInput() BuilderInput {
	return BuilderInput{
		Provider: "hcloud",
		Components: []Component{
			{Name: "containerd", Version: "1.6.20~ds1-1+b1"},
			{Name: "kubectl", Version: "1:1.35.4-1", Package: "kubernetes-client"},
			{Name: "kubelet", Version: "v1.35.4", URL: "http://127.0.0.1:8080/kubelet",
				SHA256: strings.Repeat("ab", 32), Path: "/usr/bin/kubelet"},
		},
	}
}

func TestRenderBuilderRejectsInvalidInputNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*BuilderInput)
		want   string
	}{
		{"provider", func(in *BuilderInput) { in.Provider = "Hetzner Cloud" }, `provider "Hetzner Cloud"`},
		{"no components", func(in *BuilderInput) { in.Components = nil }, "components: at least one is required"},
		{"range version", func(in *BuilderInput) { in.Components[0].Version = ">=1.6" }, "components[0] (containerd): version"},
		{"quote in version", func(in *BuilderInput) { in.Components[1].Version = "1'; rm -rf /" }, "components[1] (kubectl): version"},
		{"package", func(in *BuilderInput) { in.Components[1].Package = "Kube Client" }, `components[1] (kubectl): package "Kube Client"`},
		{"url with quote", func(in *BuilderInput) { in.Components[2].URL = "http://h/'x" }, "components[2] (kubelet): url"},
		{"sha", func(in *BuilderInput) { in.Components[2].SHA256 = "abc" }, "components[2] (kubelet): sha256"},
		{"path", func(in *BuilderInput) { in.Components[2].Path = "usr/bin/kubelet" }, "components[2] (kubelet): path"},
		{"sysctl", func(in *BuilderInput) { in.Sysctls = map[string]string{"net.ipv4.ip_forward": "1; reboot"} }, "sysctls:"},
		{"module", func(in *BuilderInput) { in.Modules = []string{"br netfilter"} }, `modules: "br netfilter"`},
		{"lock wait", func(in *BuilderInput) { in.DpkgLockWait = -1 }, "options.dpkgLockWait"},
		{"report", func(in *BuilderInput) { in.Report = "labels" }, `report "labels"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := validBuilderInput()
			tc.modify(&in)
			_, err := RenderBuilder(in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RenderBuilder error = %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := RenderBuilder(validBuilderInput()); err != nil {
		t.Fatalf("valid input: %v", err)
	}
}

// TestRenderBuilderCloudConfig: the script is written once and run step by step, and the
// builder's user-data carries nothing of a node's join (no token, no join configuration).
func TestRenderBuilderCloudConfig(t *testing.T) {
	t.Parallel()
	install := []string{"sh", BuilderScriptPath, "install"}
	for _, tc := range []struct {
		provider, report string
		runcmd           [][]string
	}{
		{provider: "hcloud", runcmd: [][]string{install}},
		{provider: "gce", runcmd: [][]string{install, {"sh", BuilderScriptPath, "seal-later", "gce-guest-attributes"}}},
		{provider: "gce", report: ReportOverSSH, runcmd: [][]string{install}},
		{provider: "hcloud", report: ReportToGCEGuestAttribute, runcmd: [][]string{install, {"sh", BuilderScriptPath, "seal-later", "gce-guest-attributes"}}},
		{provider: "docker", runcmd: [][]string{install, {"sh", BuilderScriptPath, "seal-later", "file"}}},
		{provider: "docker", report: ReportOverSSH, runcmd: [][]string{install}},
	} {
		in := validBuilderInput()
		in.Provider, in.Report = tc.provider, tc.report
		ud, err := RenderBuilder(in)
		if err != nil {
			t.Fatal(err)
		}
		var cc cloudConfig
		body, ok := strings.CutPrefix(string(ud.CloudConfig), "#cloud-config\n")
		if !ok {
			t.Fatalf("user-data does not start with #cloud-config:\n%.80s", ud.CloudConfig)
		}
		if err := yaml.Unmarshal([]byte(body), &cc); err != nil {
			t.Fatalf("cloud-config is not YAML: %v", err)
		}
		want := cloudConfig{
			WriteFiles: []writeFile{{Path: BuilderScriptPath, Owner: "root:root", Permissions: "0700", Content: string(ud.Script)}},
			RunCmd:     tc.runcmd,
		}
		if diff := cmp.Diff(want, cc); diff != "" {
			t.Errorf("%s builder, report %q: cloud-config (-want +got):\n%s", tc.provider, tc.report, diff)
		}
	}
	ud, err := RenderBuilder(validBuilderInput())
	if err != nil {
		t.Fatal(err)
	}
	// node.sh's join functions are in the script, but nothing generated feeds them and the
	// builder's steps never call them.
	prelude := builderPrelude(t, ud.Script)
	for _, s := range []string{"kubeadm-join.yaml", "bootstrapToken", "token:"} {
		if strings.Contains(prelude, s) {
			t.Errorf("builder script's generated part contains %q: a builder joins nothing", s)
		}
	}
	for _, s := range []string{"phase_kubelet", "phase_join", "prebake_main"} {
		if strings.Contains(builderScript, s) {
			t.Errorf("builder.sh calls %s: a builder joins nothing", s)
		}
	}
	// The install step's status is the builder's own, not the one a node writes.
	if got := generated(t, []byte(prelude+nodeScript), `printf '%s\0' "$PREBAKE_STATUS" "$PREBAKE_SKIP_JOIN"`); !slices.Equal(got, []string{BuilderStatusPath, "1"}) {
		t.Errorf("PREBAKE_STATUS, PREBAKE_SKIP_JOIN = %q, want %s, 1", got, BuilderStatusPath)
	}
}

// builderPrelude is the generated part of a builder script.
func builderPrelude(t testing.TB, script []byte) string {
	t.Helper()
	functions, _ := strings.CutSuffix(nodeScript, nodeMain)
	prelude, ok := strings.CutSuffix(string(script), functions+builderScript)
	if !ok {
		t.Fatal("builder script is not prelude + node.sh's functions + builder.sh")
	}
	return prelude
}

// TestBuilderScriptArguments: what the shell sees is what Go meant, for the components the
// report step observes and the files the install step writes.
func TestBuilderScriptArguments(t *testing.T) {
	t.Parallel()
	in := validBuilderInput()
	ud, err := RenderBuilder(in)
	if err != nil {
		t.Fatal(err)
	}
	prelude := []byte(builderPrelude(t, ud.Script) + nodeScript)
	wantComps := []string{
		"apt", "containerd", "1.6.20~ds1-1+b1", "containerd", "", "", "",
		"apt", "kubectl", "1:1.35.4-1", "kubernetes-client", "", "", "",
		"bin", "kubelet", "v1.35.4", "kubelet", "http://127.0.0.1:8080/kubelet", strings.Repeat("ab", 32), "/usr/bin/kubelet",
	}
	if diff := cmp.Diff(wantComps, generated(t, prelude, "prebake_components")); diff != "" {
		t.Errorf("components as sh sees them (-want +got):\n%s", diff)
	}
	ni, err := in.validate()
	if err != nil {
		t.Fatal(err)
	}
	files, err := configureFiles(ni)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		want = append(want, f.path, f.mode, f.action, f.content)
	}
	if diff := cmp.Diff(want, generated(t, prelude, "prebake_configure_files")); diff != "" {
		t.Errorf("configure files as sh sees them (-want +got):\n%s", diff)
	}
	if got := generated(t, prelude, "prebake_kubelet_files; printf 'none\\0'"); !slices.Equal(got, []string{"none"}) {
		t.Errorf("prebake_kubelet_files writes %q, want nothing", got)
	}
}

func TestRenderBuilderPassesShN(t *testing.T) {
	t.Parallel()
	ud, err := RenderBuilder(validBuilderInput())
	if err != nil {
		t.Fatal(err)
	}
	shN(t, ud.Script)
}

// TestBuilderScriptRejectsAnUnknownStep: a typo in a runcmd entry fails loudly, not as a
// silent no-op.
func TestBuilderScriptRejectsAnUnknownStep(t *testing.T) {
	t.Parallel()
	ud, err := RenderBuilder(validBuilderInput())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "builder.sh")
	if err := os.WriteFile(path, ud.Script, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", path, "reprot").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown step 'reprot'") {
		t.Fatalf("sh builder.sh reprot = %v, %s; want exit 2 naming the step", err, out)
	}
}

// TestBuilderReportStep runs the report step's functions outside a chroot, with dpkg-query
// and apt-config stubbed and the binaries in a temporary directory, and reads the JSON it
// writes. It proves the observing and the JSON; the hygiene checks look at this host's
// /etc, so only their names are checked here (the sandboxed build in imagecatalog checks
// their values in a real Debian root).
func TestBuilderReportStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stubs := filepath.Join(dir, "stubs")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// dpkg-query knows containerd (installed) and conntrack (removed, config files left).
	write(filepath.Join(stubs, "dpkg-query"), `#!/bin/sh
for last; do :; done
case "$last" in
containerd) printf 'installed 1.6.20~ds1-1+b1' ;;
conntrack) printf 'config-files 1:1.4.7-1+b2' ;;
*) echo "dpkg-query: no packages found matching $last" >&2; exit 1 ;;
esac
`)
	write(filepath.Join(stubs, "apt-config"), "#!/bin/sh\necho \"UU='0'\"\n")
	kubelet := filepath.Join(dir, "bin", "kubelet")
	write(kubelet, "#!/bin/sh\necho 'Kubernetes v1.35.4'\n")
	crictl := filepath.Join(dir, "bin", "crictl")
	write(crictl, "#!/bin/sh\necho crictl\n")
	sum := sha256.Sum256([]byte("#!/bin/sh\necho crictl\n"))
	ctr := filepath.Join(dir, "bin", "ctr")
	write(ctr, "#!/bin/sh\necho replaced\n")
	replaced := sha256.Sum256([]byte("#!/bin/sh\necho replaced\n"))
	write(filepath.Join(dir, "status.json"), `{"version":1,"provider":"gce","node":"prebake-builder","result":"ok","prebaked":false,"installed":["containerd"],"alreadyPresent":[],"totalMs":9,"phases":[{"name":"install","ms":8,"result":"ok","detail":""}],"error":""}`)

	in := BuilderInput{Provider: "gce", Components: []Component{
		{Name: "containerd", Version: "1.6.20~ds1-1+b1"},
		{Name: "conntrack", Version: "1:1.4.7-1+b2"},
		{Name: "socat", Version: "1.7.4.4-2"},
		{Name: "kubelet", Version: "v1.35.4", URL: "http://127.0.0.1/kubelet", SHA256: strings.Repeat("0", 64), Path: kubelet},
		{Name: "cri-tools", Version: "v1.35.0", URL: "http://127.0.0.1/crictl", SHA256: hex.EncodeToString(sum[:]), Path: crictl},
		{Name: "ctr", Version: "v2.0.0", URL: "http://127.0.0.1/ctr", SHA256: strings.Repeat("1", 64), Path: ctr},
		{Name: "runc", Version: "1.1.5", URL: "http://127.0.0.1/runc", SHA256: strings.Repeat("2", 64), Path: filepath.Join(dir, "bin", "runc")},
	}}
	ud, err := RenderBuilder(in)
	if err != nil {
		t.Fatal(err)
	}
	script, _, ok := strings.Cut(string(ud.Script), "\ntrap - EXIT\ncase ")
	if !ok {
		t.Fatal("builder script has no step dispatch")
	}
	report := filepath.Join(dir, "out", "report.json")
	script += "\nPATH=" + shQuote(stubs) + ":$PATH\nPREBAKE_STATUS=" + shQuote(filepath.Join(dir, "status.json")) +
		"\nBUILD_REPORT=" + shQuote(report) + "\ntrap - EXIT\nbuilder_report\n"
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("report step: %v\n%s", err, out)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseBuildReport(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if r.Status != "done" {
		t.Errorf("status %q, want done (the install status says ok)", r.Status)
	}
	wantComps := map[string]string{
		"containerd": "1.6.20~ds1-1+b1",                                // dpkg: installed
		"kubelet":    "v1.35.4",                                        // its --version, not the (wrong) sha256
		"cri-tools":  "v1.35.0",                                        // its sha256 is the recipe's
		"ctr":        "sha256-" + hex.EncodeToString(replaced[:])[:12], // another binary: named by its bits
		// conntrack (only config files left), socat (unknown) and runc (no file) are absent.
	}
	if diff := cmp.Diff(wantComps, r.Observed.Components); diff != "" {
		t.Errorf("observed components (-want +got):\n%s", diff)
	}
	if !r.Observed.UnattendedUpgradesDisabled {
		t.Errorf("unattended-upgrades reported enabled; apt-config says the periodic run is 0 and the package is absent")
	}
	var checks []string
	for c := range r.Hygiene {
		checks = append(checks, c)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(BuilderHygieneChecks)), slices.Sorted(slices.Values(checks))); diff != "" {
		t.Errorf("hygiene checks (-want +got):\n%s", diff)
	}

	// An install that did not finish is reported as failed.
	// The phases before the failed one have results of their own: the top-level one counts.
	write(filepath.Join(dir, "status.json"), `{"version":1,"provider":"gce","node":"prebake-builder","result":"failed","prebaked":false,"installed":[],"alreadyPresent":[],"totalMs":9,"phases":[{"name":"manifest","ms":1,"result":"ok","detail":""},{"name":"install","ms":8,"result":"failed","detail":""}],"error":"install: apt"}`)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("report step: %v\n%s", err, out)
	}
	data, _ = os.ReadFile(report)
	if r, err := ParseBuildReport(data); err != nil || r.Status != "failed" {
		t.Errorf("after a failed install: status %q, %v; want failed", r.Status, err)
	}
}

func TestParseBuildReport(t *testing.T) {
	t.Parallel()
	r, err := ParseBuildReport([]byte(`{"status":"done","observed":{"components":{"socat":"1.7.4.4-2"},"sysctls":{"net.ipv4.ip_forward":"1"},"modules":["overlay"],"unattendedUpgradesDisabled":true},"hygiene":{"machine-id":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := BuildReport{Status: "done", Hygiene: map[string]bool{"machine-id": true}, Observed: Manifest{
		Components: map[string]string{"socat": "1.7.4.4-2"}, Sysctls: map[string]string{"net.ipv4.ip_forward": "1"},
		Modules: []string{"overlay"}, UnattendedUpgradesDisabled: true}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{"status":"ok"}`, `{"status":"done","extra":1}`, `{`} {
		if _, err := ParseBuildReport([]byte(bad)); err == nil {
			t.Errorf("ParseBuildReport(%s): want an error", bad)
		}
	}
}

// FuzzBuilder feeds odd versions, packages and kernel settings to RenderBuilder.
// Whatever it accepts passes sh -n, and the shell sees the version and package exactly.
func FuzzBuilder(f *testing.F) {
	f.Add("1.6.20~ds1-1+b1", "containerd", "net.ipv4.ip_forward", "1")
	f.Add("1:9.2.1-3", "kubernetes-client", "kernel.pid_max", "4194304")
	f.Add("v1'$(x)`y`", "a b", "k", "1; reboot")
	f.Add("latest", "", "net.core.somaxconn", "32768 x")
	f.Fuzz(func(t *testing.T, version, pkg, sysKey, sysVal string) {
		in := validBuilderInput()
		in.Components[0].Version = version
		in.Components[1].Package = pkg
		in.Sysctls = map[string]string{sysKey: sysVal}
		ud, err := RenderBuilder(in)
		if err != nil {
			return
		}
		shN(t, ud.Script)
		prelude := []byte(builderPrelude(t, ud.Script) + nodeScript)
		comps := generated(t, prelude, "prebake_components")
		wantPkg := pkg
		if wantPkg == "" {
			wantPkg = "kubectl"
		}
		if len(comps) != 21 || comps[2] != version || comps[10] != wantPkg {
			t.Fatalf("the shell sees %q; want version %q and package %q", comps, version, wantPkg)
		}
	})
}

// TestBuilderCloudInitSchema validates the builder's user-data with Debian's cloud-init, as
// TestCloudInitSchema does a node's. It is a system test (docs/e2e.md, "Prerequisites").
func TestBuilderCloudInitSchema(t *testing.T) {
	t.Parallel()
	ci := requireCommand(t, "cloud-init", "apt-get install cloud-init")
	for _, provider := range []string{"hcloud", "gce"} {
		in := validBuilderInput()
		in.Provider = provider
		ud, err := RenderBuilder(in)
		if err != nil {
			t.Fatal(err)
		}
		// Hetzner's builder boots with prebake's SSH access merged in.
		userData, err := WithSSHAccess(ud.CloudConfig, testSSHAccess(t))
		if err != nil {
			t.Fatal(err)
		}
		path := t.TempDir() + "/user-data"
		if err := os.WriteFile(path, userData, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(ci, "schema", "--config-file", path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Valid cloud-config") {
			t.Fatalf("%s builder: cloud-init schema --config-file: %v\n%s", provider, err, out)
		}
	}
}

// TestBuilderRejectsImagesNamingTheField: an image reference that is none, or one listed
// twice, is refused naming the field.
func TestBuilderRejectsImagesNamingTheField(t *testing.T) {
	t.Parallel()
	in := BuilderInput{Provider: "docker", Components: []Component{{Name: "containerd", Version: "1.6.20~ds1-1+b1"}},
		Images: []string{"Not An Image", "172.18.0.1:5000/prebake/pause:1", "172.18.0.1:5000/prebake/pause:1"}}
	_, err := RenderBuilder(in)
	for _, w := range []string{`images[0] "Not An Image": want an image reference`, `images[2] "172.18.0.1:5000/prebake/pause:1": listed twice`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("RenderBuilder error %v, want it to say %q", err, w)
		}
	}
}
