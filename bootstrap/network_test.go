package bootstrap

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ign "github.com/coreos/ignition/v2/config/v3_4"
	igntypes "github.com/coreos/ignition/v2/config/v3_4/types"
)

var publicNetwork = Network{Mode: NetworkCiliumWireGuard, NodeAddress: NodeAddressPublic}

// addressStubs answer the address check: curl prints what the metadata service would (and
// records the URL it was asked), ip lists the interfaces' addresses and the default route.
func addressStubs(t testing.TB, metadata string, ifaddrs ...string) (path, urls string) {
	t.Helper()
	urls = filepath.Join(t.TempDir(), "urls")
	var addrLines strings.Builder
	for i, a := range ifaddrs {
		addrLines.WriteString("2: eth" + string(rune('0'+i)) + "    inet " + a + "/32 scope global eth0\n")
	}
	curl := `for a in "$@"; do case "$a" in http*) echo "$a" >>` + shQuote(urls) + ` ;; esac; done
`
	if metadata == "" {
		curl += "exit 22\n"
	} else {
		curl += "echo " + shQuote(metadata) + "\n"
	}
	ip := `case "$*" in
*"route show default"*) echo "default via 172.31.1.1 dev eth0" ;;
*"addr show"*) printf '` + addrLines.String() + `' ;;
esac
`
	scripts := versionStubs("v1.35.4", "v1.35.4")
	scripts["curl"], scripts["ip"] = curl, ip
	return stubs(t, scripts), urls
}

// stubs writes executables into a directory put first on PATH: what the join script asks
// the system (kubeadm, kubelet, curl, ip) answers from the test, and nothing leaves the host.
func stubs(t testing.TB, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir + ":" + os.Getenv("PATH")
}

// TestAddressCheck runs the address check both renderers carry: the advertised address is
// the public one or the run fails with the reason, before join, and the node's status file
// says so (result failed, error "address: ...") on the cloud-init path as on Ignition's.
func TestAddressCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, provider, metadata string
		ifaddrs                  []string
		env                      []string
		wantIP, wantURL, wantErr string
	}{
		{name: "hcloud public", provider: "hcloud", metadata: "5.75.1.2", ifaddrs: []string{"5.75.1.2"},
			wantIP: "5.75.1.2", wantURL: "http://169.254.169.254/hetzner/v1/metadata/public-ipv4"},
		{name: "gce external ip is a 1:1 NAT", provider: "gce", metadata: "34.1.2.3", ifaddrs: []string{"10.128.0.2"},
			wantURL: "http://169.254.169.254/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip",
			wantErr: "on none of this machine's interfaces"},
		{name: "hcloud without public ipv4", provider: "hcloud", ifaddrs: []string{"10.0.0.3"}, wantErr: "gave none"},
		{name: "static behind NAT", provider: "static", ifaddrs: []string{"192.168.1.20"}, wantErr: "is private (RFC 1918)"},
		{name: "static carrier-grade NAT", provider: "static", env: []string{"PREBAKE_PUBLIC_IPV4=100.64.3.4"},
			ifaddrs: []string{"100.64.3.4"}, wantErr: "shared (carrier-grade NAT"},
		{name: "static given by the operator", provider: "static", env: []string{"PREBAKE_PUBLIC_IPV4=88.99.1.2"},
			ifaddrs: []string{"10.1.1.1", "88.99.1.2"}, wantIP: "88.99.1.2"},
		{name: "static default route", provider: "static", ifaddrs: []string{"88.99.1.3"}, wantIP: "88.99.1.3"},
		{name: "metadata says garbage", provider: "hcloud", metadata: "<html>oops</html>", ifaddrs: []string{"5.75.1.2"}, wantErr: "is invalid"},
	}
	for _, tt := range tests {
		for _, renderer := range []string{"cloud-init", "ignition"} {
			t.Run(renderer+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				path, urls := addressStubs(t, tt.metadata, tt.ifaddrs...)
				envFile := filepath.Join(t.TempDir(), "kubelet")
				in := validInput(tt.provider)
				in.Network = publicNetwork
				var st Status
				var err error
				if renderer == "ignition" {
					// Ignition does not serve static machines (RenderIgnition refuses their
					// script form); the join script's address check is the same.
					ii := validIgnition(Flatcar, "hcloud")
					ii.Input.Provider, ii.Network = tt.provider, publicNetwork
					st, err = runJoinScriptWithEnvFile(t, ii, envFile, path, tt.env...)
				} else {
					st, err = runAddressPhase(t, in, envFile, path, tt.env...)
				}
				detail := phaseDetail(st, "address")
				if tt.wantErr != "" {
					if err == nil {
						t.Fatalf("check passed; want it to fail with %q", tt.wantErr)
					}
					// Both scripts report the failure in the node's status file.
					msg := st.Error
					if st.Result != "failed" || !strings.HasPrefix(st.Error, "address: ") {
						t.Errorf("status %+v does not report the address phase's failure", st)
					}
					if p, _ := st.Phase("address"); p.Result != "failed" {
						t.Errorf("address phase %+v, want failed", p)
					}
					for _, after := range []string{"kubelet", "join"} {
						if _, ran := st.Phase(after); ran {
							t.Errorf("the script went on to %s", after)
						}
					}
					if !strings.Contains(msg, tt.wantErr) {
						t.Errorf("error %q lacks %q", msg, tt.wantErr)
					}
					if _, statErr := os.Stat(envFile); statErr == nil {
						t.Errorf("the kubelet's env file was written although the check failed")
					}
				} else {
					if err != nil {
						t.Fatalf("check failed: %v (%s)", err, st.Error)
					}
					data, err := os.ReadFile(envFile)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := string(data), "KUBELET_EXTRA_ARGS=--node-ip="+tt.wantIP+"\n"; got != want {
						t.Errorf("kubelet env file = %q, want %q", got, want)
					}
					if !strings.Contains(detail, "node-ip "+tt.wantIP) {
						t.Errorf("phase detail %q does not name the address", detail)
					}
				}
				if tt.wantURL != "" {
					got, _ := os.ReadFile(urls)
					if strings.TrimSpace(string(got)) != tt.wantURL {
						t.Errorf("asked the metadata service %q, want %q", got, tt.wantURL)
					}
				}
			})
		}
	}
}

func phaseDetail(st Status, name string) string {
	p, _ := st.Phase(name)
	return p.Detail
}

// runAddressPhase runs the cloud-init script with its own status machinery (run_phase,
// fail, write_status from node.sh) but only the address phase: the phases before it need
// root and apt (the system tests run them). PATH is set after node.sh's own, so the stubs
// answer; the kubelet env file is moved to envFile and the status file to a temp dir. It
// returns the status file and the script's exit error.
func runAddressPhase(t *testing.T, in Input, envFile, path string, env ...string) (Status, error) {
	t.Helper()
	in.Options.StatusPath = filepath.Join(t.TempDir(), "status.json")
	ud, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	const main = "prebake_main </dev/null\n"
	script, ok := strings.CutSuffix(string(ud.Script), main)
	if !ok {
		t.Fatalf("the script does not end by calling %q", main)
	}
	script = movedEnvFile(t, script, KubeletEnvDebian, envFile) + "PATH=" + shQuote(path) + `
run_phase address phase_address
PHASE=done
RESULT=ok
write_status
`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append([]string{"PATH=" + path}, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var runErr error
	if err := cmd.Run(); err != nil {
		runErr = &scriptError{stderr.String()}
	}
	data, err := os.ReadFile(in.Options.StatusPath)
	if err != nil {
		t.Fatalf("no status file (%v); stderr:\n%s", err, stderr.String())
	}
	st, err := ParseStatus(data)
	if err != nil {
		t.Fatalf("status file: %v\n%s", err, data)
	}
	return st, runErr
}

type scriptError struct{ msg string }

func (e *scriptError) Error() string { return e.msg }

// movedEnvFile points the rendered script's kubelet env file at a test file. The rendered
// line must be there first: it is what the kubelet's unit reads.
func movedEnvFile(t *testing.T, script, rendered, moved string) string {
	t.Helper()
	line := "PREBAKE_KUBELET_ENV=" + shQuote(rendered) + "\n"
	if !strings.Contains(script, line) {
		t.Fatalf("the script does not set %s", strings.TrimSpace(line))
	}
	return strings.Replace(script, line, "PREBAKE_KUBELET_ENV="+shQuote(moved)+"\n", 1)
}

func runJoinScriptWithEnvFile(t *testing.T, in IgnitionInput, envFile, path string, env ...string) (Status, error) {
	t.Helper()
	dir := t.TempDir()
	in.Options.StatusPath = filepath.Join(dir, "status.json")
	in.Options.SkipJoin = true
	valid, err := in.validate()
	if err != nil {
		t.Fatal(err)
	}
	script := movedEnvFile(t, renderIgnitionJoinScript(valid), KubeletEnvSysext, envFile)
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

// TestNetworkModeRendersTheCheck: without a network mode neither script checks or sets the
// node address; with it both do, and point the kubelet at their OS's env file.
func TestNetworkModeRendersTheCheck(t *testing.T) {
	t.Parallel()
	for _, network := range []Network{{}, publicNetwork} {
		in := validInput("hcloud")
		in.Network = network
		ud, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		want := shQuote(network.nodeAddressCheck())
		if got := "PREBAKE_NODE_ADDRESS=" + want + "\n"; !strings.Contains(string(ud.Script), got) {
			t.Errorf("cloud-init script lacks %q", got)
		}
		if !strings.Contains(string(ud.Script), "PREBAKE_KUBELET_ENV='"+KubeletEnvDebian+"'") {
			t.Errorf("cloud-init script does not write %s", KubeletEnvDebian)
		}
		ii := validIgnition(FCOS, "hcloud")
		ii.Network = network
		valid, err := ii.validate()
		if err != nil {
			t.Fatal(err)
		}
		script := renderIgnitionJoinScript(valid)
		if !strings.Contains(script, "PREBAKE_NODE_ADDRESS="+want+"\n") || !strings.Contains(script, "PREBAKE_KUBELET_ENV='"+KubeletEnvSysext+"'") {
			t.Errorf("join script lacks the address check's values for %+v", network)
		}
	}
	// Without a mode the phase is not run at all, so existing status files keep their phases;
	// with nodeAddress internal neither (the kubelet picks its own address), and both
	// renderers take it.
	internal := Network{Mode: NetworkCiliumWireGuard, NodeAddress: NodeAddressInternal}
	for _, network := range []Network{{}, internal} {
		in := validIgnition(Flatcar, "hcloud")
		in.Network = network
		st, err := runJoinScript(t, in, stubs(t, versionStubs("v1.35.4", "v1.35.4")))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := st.Phase("address"); ok {
			t.Errorf("an address phase ran with network %+v", network)
		}
		ci := validInput("gce")
		ci.Network = network
		ud, err := Render(ci)
		if err != nil {
			t.Fatalf("network %+v: %v", network, err)
		}
		if !strings.Contains(string(ud.Script), "\nPREBAKE_NODE_ADDRESS=''\n") {
			t.Errorf("network %+v: the cloud-init script checks an address", network)
		}
	}
	bad := validInput("gce")
	bad.Network = Network{Mode: NetworkCiliumWireGuard, NodeAddress: "private"}
	if _, err := Render(bad); err == nil || !strings.Contains(err.Error(), `network.nodeAddress "private"`) {
		t.Errorf("nodeAddress private: %v", err)
	}
}

// TestIgnitionLibraryChecksHashLengthOnly pins why RenderIgnition checks the sysext's sha256
// itself: Ignition's validation takes 64 characters that are not hex.
func TestIgnitionLibraryChecksHashLengthOnly(t *testing.T) {
	t.Parallel()
	cfg := igntypes.Config{Ignition: igntypes.Ignition{Version: IgnitionSpecVersion}}
	cfg.Storage.Files = []igntypes.File{{Node: igntypes.Node{Path: "/opt/x.raw"}, FileEmbedded1: igntypes.FileEmbedded1{
		Contents: igntypes.Resource{Source: ptr("https://example.invalid/x.raw"),
			Verification: igntypes.Verification{Hash: ptr("sha256-" + strings.Repeat("z", 64))}}}}}
	data, err := validateIgnition(cfg, "")
	if err != nil {
		t.Skipf("the library now rejects a non-hex hash itself (%v); RenderIgnition's check is then belt and braces", err)
	}
	if _, _, err := ign.Parse(data); err != nil {
		t.Fatal(err)
	}
}
