package bootstrap

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ign "github.com/coreos/ignition/v2/config/v3_4"
	igntypes "github.com/coreos/ignition/v2/config/v3_4/types"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

const testSysextSHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// validIgnition is a Flatcar or FCOS node on the runtime path (the sysext is downloaded).
func validIgnition(family IgnitionOS, provider string) IgnitionInput {
	in := validInput(provider)
	in.ProviderID = ""
	in.Components = nil
	in.UserDataForm = FormCloudInit
	return IgnitionInput{Input: in, OS: family, Sysext: Sysext{
		Version: "v1.35.4", Arch: "amd64",
		URL:    "https://extensions.flatcar.org/extensions/kubernetes-v1.35.4-x86-64.raw",
		SHA256: testSysextSHA,
	}}
}

// hetznerUserDataLimit is the API's limit on user_data (32 KiB).
const hetznerUserDataLimit = 32 << 10

// parsed decodes a rendered config with the Ignition library, as Ignition does at boot.
func parsed(t testing.TB, data []byte) igntypes.Config {
	t.Helper()
	cfg, rpt, err := ign.Parse(data)
	if err != nil {
		t.Fatalf("ignition v3_4.Parse: %v\n%s", err, rpt)
	}
	return cfg
}

func ignFile(t testing.TB, cfg igntypes.Config, path string) (igntypes.File, bool) {
	t.Helper()
	for _, f := range cfg.Storage.Files {
		if f.Path == path {
			return f, true
		}
	}
	return igntypes.File{}, false
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// contents decodes an embedded (data URL) file.
func contents(t testing.TB, f igntypes.File) string {
	t.Helper()
	src := *f.Contents.Source
	b64, ok := strings.CutPrefix(src, "data:;base64,")
	if !ok {
		t.Fatalf("%s: source %q is not an embedded data URL", f.Path, src)
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("%s: %v", f.Path, err)
	}
	return string(data)
}

func TestRenderIgnitionPassesTheLibrarysValidation(t *testing.T) {
	t.Parallel()
	for _, family := range []IgnitionOS{Flatcar, FCOS} {
		for _, provider := range []string{"hcloud", "gce"} {
			for _, prebaked := range []bool{false, true} {
				name := string(family) + "/" + provider + "/runtime"
				if prebaked {
					name = string(family) + "/" + provider + "/prebaked"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					in := validIgnition(family, provider)
					in.Prebaked = prebaked
					got, err := RenderIgnition(in)
					if err != nil {
						t.Fatal(err)
					}
					if len(got.JSON) > hetznerUserDataLimit {
						t.Errorf("config is %d bytes, more than Hetzner's user_data limit of %d", len(got.JSON), hetznerUserDataLimit)
					}
					cfg := parsed(t, got.JSON)
					if cfg.Ignition.Version != "3.4.0" {
						t.Errorf("spec version %q", cfg.Ignition.Version)
					}
					checkIgnitionNode(t, in, cfg)
				})
			}
		}
	}
}

func checkIgnitionNode(t *testing.T, in IgnitionInput, cfg igntypes.Config) {
	valid, err := in.validate()
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := kubeletFiles(valid.Input)
	if err != nil {
		t.Fatal(err)
	}
	// The JoinConfiguration is the cloud-init renderer's, byte for byte, and root's alone.
	join, ok := ignFile(t, cfg, JoinConfigPath)
	if !ok || kubelet[0].path != JoinConfigPath {
		t.Fatalf("no %s in the config (cloud-init writes %s)", JoinConfigPath, kubelet[0].path)
	}
	if got := contents(t, join); got != kubelet[0].content || !strings.Contains(got, "token: "+testToken) {
		t.Errorf("JoinConfiguration differs from the cloud-init renderer's:\n%s", got)
	}
	if *join.Mode != 0o600 {
		t.Errorf("%s mode %o, want 0600", JoinConfigPath, *join.Mode)
	}
	if patch, ok := ignFile(t, cfg, KubeletPatchPath); !ok || contents(t, patch) != "{}\n" {
		t.Errorf("kubelet patch missing or not empty")
	}

	sysext, hasSysext := ignFile(t, cfg, in.Sysext.Path())
	if in.Prebaked {
		if hasSysext || len(cfg.Storage.Links) != 0 {
			t.Errorf("prebaked: the config downloads or links the sysext the image carries")
		}
	} else {
		if !hasSysext || deref(sysext.Contents.Source) != in.Sysext.URL || deref(sysext.Contents.Verification.Hash) != "sha256-"+testSysextSHA {
			t.Errorf("runtime: sysext file %+v, want %s from %s with its sha256", sysext, in.Sysext.Path(), in.Sysext.URL)
		}
		want := []igntypes.Link{{Node: igntypes.Node{Path: SysextLink, Overwrite: ptr(true)},
			LinkEmbedded1: igntypes.LinkEmbedded1{Target: ptr(in.Sysext.Path()), Hard: ptr(false)}}}
		if diff := cmp.Diff(want, cfg.Storage.Links); diff != "" {
			t.Errorf("sysext link (-want +got):\n%s", diff)
		}
	}
	if in.Sysext.Path() != "/opt/extensions/kubernetes/kubernetes-v1.35.4-x86-64.raw" {
		t.Errorf("sysext path %s is not the bakery's name", in.Sysext.Path())
	}

	_, hasContainerd := ignFile(t, cfg, "/etc/containerd/config.toml")
	if hasContainerd != (in.OS == FCOS) {
		t.Errorf("%s: containerd config written = %v; only FCOS needs it", in.OS, hasContainerd)
	}
	if _, ok := ignFile(t, cfg, autoUpdatesOff[in.OS].path); !ok {
		t.Errorf("%s: auto-updates are not turned off (%s)", in.OS, autoUpdatesOff[in.OS].path)
	}
	for _, p := range []string{"/etc/sysctl.d/99-prebake.conf", "/etc/modules-load.d/prebake.conf"} {
		if _, ok := ignFile(t, cfg, p); !ok {
			t.Errorf("no %s", p)
		}
	}
	units := map[string]igntypes.Unit{}
	for _, u := range cfg.Systemd.Units {
		units[u.Name] = u
	}
	if u := units[IgnitionJoinUnit]; u.Enabled == nil || !*u.Enabled || u.Contents == nil ||
		!strings.Contains(*u.Contents, "ExecStart=/bin/sh "+IgnitionJoinScript) {
		t.Errorf("join unit %+v: not enabled or does not run %s", u, IgnitionJoinScript)
	}
	script, ok := ignFile(t, cfg, IgnitionJoinScript)
	if !ok {
		t.Fatal("no join script")
	}
	body := contents(t, script)
	if strings.Contains(body, testToken) {
		t.Errorf("the join script holds the token; only the 0600 JoinConfiguration may")
	}
	shN(t, []byte(body))
}

// TestRenderIgnitionRejectsInvalidInput: a missing required input, a bad sysext hash and a
// family that is not Ignition's are errors naming the field, without the token.
func TestRenderIgnitionRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*IgnitionInput)
		want   string
	}{
		{"bad sysext hash", func(in *IgnitionInput) { in.Sysext.SHA256 = "sha256-" + testSysextSHA }, "sysext.sha256"},
		{"short sysext hash", func(in *IgnitionInput) { in.Sysext.SHA256 = testSysextSHA[1:] }, "sysext.sha256"},
		// Ignition's own validation checks a hash's length only (64 z's pass it), so this
		// one is RenderIgnition's.
		{"sysext hash not hex", func(in *IgnitionInput) { in.Sysext.SHA256 = strings.Repeat("z", 64) }, "sysext.sha256"},
		{"no sysext url on the runtime path", func(in *IgnitionInput) { in.Sysext.URL = "" }, "sysext.url"},
		{"no sysext version", func(in *IgnitionInput) { in.Sysext.Version = "" }, "sysext.version"},
		{"sysext version range", func(in *IgnitionInput) { in.Sysext.Version = "v1.35" }, "sysext.version"},
		{"unknown arch", func(in *IgnitionInput) { in.Sysext.Arch = "x86_64" }, "sysext.arch"},
		{"no token", func(in *IgnitionInput) { in.JoinToken = "" }, "joinToken"},
		{"no endpoint", func(in *IgnitionInput) { in.Cluster.APIServerEndpoint = "" }, "cluster.apiServerEndpoint"},
		{"debian", func(in *IgnitionInput) { in.OS = "debian" }, `os "debian"`},
		// The provider's declared form decides, not its name.
		{"script form (static)", func(in *IgnitionInput) { in.UserDataForm = FormScript }, "userDataForm script"},
		{"no user-data (kwok)", func(in *IgnitionInput) { in.UserDataForm = FormNone }, "userDataForm none"},
		{"bad network mode", func(in *IgnitionInput) { in.Network = Network{Mode: "wireguard"} }, "network.mode"},
		{"mode without address", func(in *IgnitionInput) { in.Network = Network{Mode: NetworkCiliumWireGuard} }, "network.nodeAddress"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := validIgnition(Flatcar, "hcloud")
			tt.modify(&in)
			_, err := RenderIgnition(in)
			if err == nil {
				t.Fatalf("rendered despite %s", tt.name)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %q", err, tt.want)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error holds the token: %v", err)
			}
		})
	}
	// A prebaked node needs no URL or hash: the image has the sysext.
	in := validIgnition(FCOS, "gce")
	in.Prebaked, in.Sysext.URL, in.Sysext.SHA256 = true, "", ""
	if _, err := RenderIgnition(in); err != nil {
		t.Errorf("prebaked without a download: %v", err)
	}
}

// TestIgnitionValidationRejects feeds the library's validation configs it must refuse: a
// path Ignition does not write, a malformed sysext hash, a path written twice. It shows the
// check RenderIgnition relies on can fail.
func TestIgnitionValidationRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*igntypes.Config)
		want   string
	}{
		{"relative path", func(c *igntypes.Config) { c.Storage.Files[0].Path = "etc/prebake/kubeadm-join.yaml" }, "path not absolute"},
		{"path with ..", func(c *igntypes.Config) { c.Storage.Files[0].Path = "/etc/prebake/../shadow" }, "not fully simplified"},
		{"sysext hash too short", func(c *igntypes.Config) {
			f := &c.Storage.Files[len(c.Storage.Files)-1]
			f.Contents.Verification.Hash = ptr("sha256-" + testSysextSHA[2:])
		}, "incorrect size for hash sum"},
		{"sysext hash without a function", func(c *igntypes.Config) {
			f := &c.Storage.Files[len(c.Storage.Files)-1]
			f.Contents.Verification.Hash = ptr(testSysextSHA)
		}, "malformed hash specifier"},
		{"sysext hash of another function", func(c *igntypes.Config) {
			f := &c.Storage.Files[len(c.Storage.Files)-1]
			f.Contents.Verification.Hash = ptr("md5-" + testSysextSHA[:32])
		}, "unrecognized hash function"},
		{"a path written twice", func(c *igntypes.Config) { c.Storage.Files = append(c.Storage.Files, c.Storage.Files[0]) }, "duplicate"},
		{"unit without a suffix", func(c *igntypes.Config) { c.Systemd.Units[2].Name = "prebake-join" }, "invalid systemd unit extension"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			valid, err := validIgnition(Flatcar, "hcloud").validate()
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := buildIgnition(valid)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := validateIgnition(cfg, testToken); err != nil {
				t.Fatalf("the unmodified config is invalid: %v", err)
			}
			tt.modify(&cfg)
			_, err = validateIgnition(cfg, testToken)
			if err == nil {
				t.Fatalf("the library accepted a config with %s", tt.name)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error holds the token: %v", err)
			}
		})
	}
}

func TestIgnitionConfigStringRedacts(t *testing.T) {
	t.Parallel()
	got, err := RenderIgnition(validIgnition(FCOS, "hcloud"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(got.JSON) {
		t.Fatal("config is not JSON")
	}
	if s := got.String(); strings.Contains(s, testToken) {
		t.Errorf("String() leaks the token: %s", s)
	}
}

// runJoinScript runs the rendered join script (in test mode: no join) and returns its
// status file, parsed.
func runJoinScript(t *testing.T, in IgnitionInput, path string, env ...string) (Status, error) {
	t.Helper()
	dir := t.TempDir()
	in.Options.StatusPath = filepath.Join(dir, "status.json")
	in.Options.SkipJoin = true
	valid, err := in.validate()
	if err != nil {
		t.Fatal(err)
	}
	script := renderIgnitionJoinScript(valid)
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append([]string{"PATH=" + path}, env...)
	out, runErr := cmd.CombinedOutput()
	data, err := os.ReadFile(in.Options.StatusPath)
	if err != nil {
		t.Fatalf("no status file (%v); output:\n%s", err, out)
	}
	st, err := ParseStatus(data)
	if err != nil {
		t.Fatalf("status file: %v\n%s", err, data)
	}
	return st, runErr
}

func versionStubs(kubeadm, kubelet string) map[string]string {
	return map[string]string{
		"kubeadm": "echo " + kubeadm + "\n",
		"kubelet": "echo Kubernetes " + kubelet + "\n",
	}
}

func TestJoinScriptChecksTheSysextVersion(t *testing.T) {
	t.Parallel()
	in := validIgnition(Flatcar, "hcloud")
	st, err := runJoinScript(t, in, stubs(t, versionStubs("v1.35.4", "v1.35.4")))
	if err != nil {
		t.Fatalf("join script failed: %v (%+v)", err, st)
	}
	if st.Result != "ok" || st.Prebaked || len(st.Installed) != 1 || st.Installed[0] != SysextComponent {
		t.Errorf("status %+v: want ok, runtime path, installed %s", st, SysextComponent)
	}
	var names []string
	for _, p := range st.Phases {
		names = append(names, p.Name+"/"+p.Result)
	}
	if diff := cmp.Diff([]string{"sysext/ok", "join/skipped"}, names); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}

	in.Prebaked = true
	st, err = runJoinScript(t, in, stubs(t, versionStubs("v1.35.4", "v1.34.9")))
	if err == nil || st.Result != "failed" {
		t.Fatalf("a kubelet of another version passed: %+v", st)
	}
	for _, s := range []string{"sysext:", "v1.34.9", "want v1.35.4", "prebaked", "roll its channel back"} {
		if !strings.Contains(st.Error, s) {
			t.Errorf("status error %q lacks %q", st.Error, s)
		}
	}
	if p, _ := st.Phase("join"); p.Name != "" {
		t.Errorf("the script went on to join after the sysext check failed")
	}
}

// FuzzRenderIgnition feeds odd labels, taints, names, ids and sysext fields to
// RenderIgnition. Whatever it accepts has passed the Ignition library's validation (Render
// runs it) and must come out intact: the JoinConfiguration parses back to what went in, the
// sysext is downloaded from the URL with the hash given, the join script passes sh -n and
// holds no token; errors never hold the token.
func FuzzRenderIgnition(f *testing.F) {
	f.Add("tier", "batch", "dedicated", "gpu", "NoSchedule", "node-1", "hcloud://1", "v1.35.4", "https://e.example/k.raw", testSysextSHA, false)
	f.Add("a.b/c", "x_y-z.1", "k", "", "NoExecute", "n.example", "gce://p/z/n 'q' $(x)", "v1.0.0", "http://[::1]:80/a b", strings.Repeat("0", 64), true)
	f.Add("x", "it's", "k", "v\n: x", "PreferNoSchedule", "a", "", "v01.2.3", "data:,x", "ABC", false)
	f.Fuzz(func(t *testing.T, lk, lv, tk, tv, effect, node, providerID, version, url, sha string, prebaked bool) {
		in := validIgnition(FCOS, "gce")
		in.Labels = map[string]string{lk: lv}
		in.Taints = []Taint{{Key: tk, Value: tv, Effect: effect}}
		in.NodeName, in.ProviderID = node, providerID
		in.Sysext.Version, in.Sysext.URL, in.Sysext.SHA256 = version, url, sha
		in.Prebaked = prebaked
		got, err := RenderIgnition(in)
		if err != nil {
			if strings.Contains(err.Error(), testToken) {
				t.Fatalf("error holds the token: %v", err)
			}
			return
		}
		cfg := parsed(t, got.JSON)
		join, ok := ignFile(t, cfg, JoinConfigPath)
		if !ok {
			t.Fatal("no JoinConfiguration")
		}
		var jc joinConfiguration
		if err := yaml.Unmarshal([]byte(contents(t, join)), &jc); err != nil {
			t.Fatalf("JoinConfiguration does not parse: %v", err)
		}
		if jc.NodeRegistration.Name != node || jc.Discovery.BootstrapToken.Token != testToken {
			t.Errorf("JoinConfiguration name %q, token intact %v", jc.NodeRegistration.Name, jc.Discovery.BootstrapToken.Token == testToken)
		}
		if diff := cmp.Diff([]taint{{Key: tk, Value: tv, Effect: effect}}, jc.NodeRegistration.Taints); diff != "" {
			t.Errorf("taints (-want +got):\n%s", diff)
		}
		if want := lk + "=" + lv; jc.NodeRegistration.KubeletExtraArgs[0].Value != want {
			t.Errorf("node-labels %q, want %q", jc.NodeRegistration.KubeletExtraArgs[0].Value, want)
		}
		if patch, ok := ignFile(t, cfg, KubeletPatchPath); providerID != "" {
			var p map[string]string
			if !ok || yaml.Unmarshal([]byte(contents(t, patch)), &p) != nil || p["providerID"] != providerID {
				t.Errorf("kubelet patch does not give back providerID %q", providerID)
			}
		}
		sysext, has := ignFile(t, cfg, in.Sysext.Path())
		if has == prebaked {
			t.Fatalf("prebaked=%v but the config downloads the sysext: %v", prebaked, has)
		}
		if has && (deref(sysext.Contents.Source) != url || deref(sysext.Contents.Verification.Hash) != "sha256-"+sha) {
			t.Errorf("sysext from %q with %q, want %q with sha256-%s", deref(sysext.Contents.Source), deref(sysext.Contents.Verification.Hash), url, sha)
		}
		script, _ := ignFile(t, cfg, IgnitionJoinScript)
		body := contents(t, script)
		if strings.Contains(body, testToken) {
			t.Fatal("join script holds the token")
		}
		shN(t, []byte(body))
	})
}
