//go:build system

package bootstrap_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/bootstrap/rootfstest"
	"github.com/prebake-dev/prebake/internal/kubetest"
)

// aptComponents are the Debian packages of imagecatalog.DefaultComponents that bookworm
// ships and minbase lacks; their versions are whatever the cached package lists offer.
var aptComponents = []string{"containerd", "runc", "conntrack", "socat", "ethtool", "iptables", "ebtables"}

// shimApt replaces apt-get, apt-cache and apt-mark in root with wrappers that log every
// call to /var/log/prebake-apt-calls and then run the real command.
func shimApt(t testing.TB, root string) {
	t.Helper()
	for _, c := range []string{"apt-get", "apt-cache", "apt-mark"} {
		p := filepath.Join(root, "usr/bin", c)
		if err := os.Rename(p, p+".real"); err != nil {
			t.Fatal(err)
		}
		rootfstest.WriteFile(t, p, fmt.Sprintf("#!/bin/sh\necho \"%s $*\" >>/var/log/prebake-apt-calls\nexec /usr/bin/%s.real \"$@\"\n", c, c), 0o755)
	}
}

func aptCalls(t testing.TB, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "var/log/prebake-apt-calls"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func nodeInput(name string, comps []bootstrap.Component) bootstrap.Input {
	return bootstrap.Input{
		Provider:   "static",
		Cluster:    bootstrap.Cluster{APIServerEndpoint: "127.0.0.1:6443", CACertHashes: []string{"sha256:" + strings.Repeat("0", 64)}},
		JoinToken:  "abcdef.0123456789abcdef",
		NodeName:   name,
		ProviderID: "static://" + name,
		Labels:     map[string]string{"prebake.dev/group": "pool"},
		Components: comps,
		Options:    bootstrap.Options{RecordHostCommands: true, SkipJoin: true, DpkgLockWait: time.Minute},
	}
}

// runScript renders in, runs it in root like cloud-init would, and returns its status.
func runScript(t testing.TB, root string, in bootstrap.Input) (bootstrap.Status, []byte, error) {
	t.Helper()
	writeScript(t, root, in)
	out, err := rootfstest.Cmd(root, nil, "sh", bootstrap.ScriptPath).CombinedOutput()
	return readStatus(t, root, out, err), out, err
}

// runScriptStdin pipes the standalone script to `sh -s` with env, the way providers/static
// runs it over SSH.
func runScriptStdin(t testing.TB, root string, in bootstrap.Input, env ...string) (bootstrap.Status, []byte, error) {
	t.Helper()
	ud, err := bootstrap.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := rootfstest.Cmd(root, env, "sh", "-s")
	cmd.Stdin = bytes.NewReader(ud.Script)
	out, err := cmd.CombinedOutput()
	return readStatus(t, root, out, err), out, err
}

func writeScript(t testing.TB, root string, in bootstrap.Input) {
	t.Helper()
	ud, err := bootstrap.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, strings.TrimPrefix(bootstrap.ScriptPath, "/"))
	if old, err := os.ReadFile(path); err == nil && string(old) == string(ud.Script) {
		return // cloud-init writes it once; rewriting it would show as a change
	}
	rootfstest.WriteFile(t, path, string(ud.Script), 0o700)
}

func readStatus(t testing.TB, root string, out []byte, runErr error) bootstrap.Status {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(bootstrap.DefaultStatusPath, "/")))
	if err != nil {
		t.Fatalf("no status file after the script (%v): %v\n%s", runErr, err, rootfstest.Tail(out))
	}
	st, err := bootstrap.ParseStatus(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return st
}

// TestInstallVanillaThenPrebaked runs the node script for real in a debootstrapped Debian:
//   - vanilla: every component is missing and gets installed (apt at pinned versions,
//     kubelet and kubeadm from the loopback file server with sha256 checks);
//   - the same script again changes nothing (idempotence: the filesystem is compared);
//   - a new node booted from that filesystem (now a prebaked image with its manifest)
//     installs nothing and never calls apt.
//
// It prints the install-phase times of both from this one run (docs/bootstrap.md).
func TestInstallVanillaThenPrebaked(t *testing.T) {
	root := rootfstest.Fresh(t)
	comps := rootfstest.NodeBinaryComponents(t)
	versions := rootfstest.CandidateVersions(t, root, aptComponents)
	for _, p := range aptComponents {
		comps = append(comps, bootstrap.Component{Name: p, Version: versions[p]})
	}
	shimApt(t, root)

	// 1. Vanilla.
	vanilla, out, err := runScript(t, root, nodeInput("node-a", comps))
	if err != nil {
		t.Fatalf("vanilla run: %v\n%s", err, rootfstest.Tail(out))
	}
	if vanilla.Result != "ok" || vanilla.Prebaked {
		t.Fatalf("vanilla status: result %q prebaked %v, want ok and false: %+v", vanilla.Result, vanilla.Prebaked, vanilla)
	}
	var names []string
	for _, c := range comps {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff(sorted(names), sorted(vanilla.Installed)); diff != "" {
		t.Errorf("vanilla installed (-want +got):\n%s", diff)
	}
	for _, p := range aptComponents {
		if got := rootfstest.Chroot(t, root, "dpkg-query", "-W", "-f=${Version}", p); got != versions[p] {
			t.Errorf("%s installed at %q, want %q", p, got, versions[p])
		}
	}
	for _, c := range comps {
		if c.URL == "" {
			continue
		}
		if got := rootfstest.FileSHA256(t, filepath.Join(root, c.Path)); got != c.SHA256 {
			t.Errorf("%s sha256 %s, want %s", c.Path, got, c.SHA256)
		}
	}
	if got := rootfstest.Chroot(t, root, "/usr/bin/kubeadm", "version", "-o", "short"); strings.TrimSpace(got) != kubetest.KubernetesVersion {
		t.Errorf("kubeadm version in the rootfs = %q, want %s", got, kubetest.KubernetesVersion)
	}
	if calls := aptCalls(t, root); !slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "apt-get install") }) {
		t.Errorf("vanilla run never called apt-get install; calls: %q", calls)
	}
	m := readManifest(t, root)
	for _, c := range comps {
		if m.Components[c.Name] != c.Version {
			t.Errorf("manifest after install: %s = %q, want %q", c.Name, m.Components[c.Name], c.Version)
		}
	}
	if !m.UnattendedUpgradesDisabled {
		t.Errorf("manifest after install: unattendedUpgradesDisabled is false")
	}
	recorded := readFile(t, filepath.Join(root, "var/lib/prebake/recorded-host-commands"))
	for _, want := range []string{"systemctl mask apt-daily.service apt-daily-upgrade.service unattended-upgrades.service",
		"sysctl --system", "modprobe br_netfilter", "systemctl restart containerd", "systemctl enable kubelet"} {
		if !strings.Contains(recorded, want+"\n") {
			t.Errorf("recorded host commands lack %q:\n%s", want, recorded)
		}
	}

	// 2. The same script again: nothing changes but the status file.
	os.Remove(filepath.Join(root, "var/log/prebake-apt-calls"))
	before := snapshot(t, root)
	again, out, err := runScript(t, root, nodeInput("node-a", comps))
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, rootfstest.Tail(out))
	}
	if len(again.Installed) != 0 {
		t.Errorf("second run installed %q, want nothing", again.Installed)
	}
	if diff := cmp.Diff(before, snapshot(t, root)); diff != "" {
		t.Errorf("second run changed the filesystem (-before +after):\n%s", diff)
	}

	// 3. A new node from this filesystem as a prebaked image; this time the standalone
	// script is piped to sh -s, as providers/static does: rendered before a machine was
	// claimed, it takes the providerID from the environment the provider sets.
	dpkgLog := readFile(t, filepath.Join(root, "var/log/dpkg.log"))
	nodeB := nodeInput("node-b", comps)
	nodeB.ProviderID = ""
	prebaked, out, err := runScriptStdin(t, root, nodeB, "PREBAKE_PROVIDER_ID=static://node-b")
	if err != nil {
		t.Fatalf("prebaked run: %v\n%s", err, rootfstest.Tail(out))
	}
	if !prebaked.Prebaked || len(prebaked.Installed) != 0 {
		t.Errorf("prebaked status: prebaked %v installed %q, want true and nothing", prebaked.Prebaked, prebaked.Installed)
	}
	if ph, _ := prebaked.Phase("install"); ph.Result != "skipped" {
		t.Errorf("prebaked install phase = %+v, want skipped", ph)
	}
	if calls := aptCalls(t, root); len(calls) != 0 {
		t.Errorf("prebaked node called apt: %q", calls)
	}
	if got := readFile(t, filepath.Join(root, "var/log/dpkg.log")); got != dpkgLog {
		t.Errorf("prebaked node changed /var/log/dpkg.log")
	}
	if got := readFile(t, filepath.Join(root, "etc/prebake/kubeadm-patches/kubeletconfiguration+merge.yaml")); got != "providerID: 'static://node-b'\n" {
		t.Errorf("kubelet patch = %q, want node-b's providerID", got)
	}

	// The JoinConfiguration is one the real kubeadm accepts; a broken one it rejects.
	rootfstest.Chroot(t, root, "/usr/bin/kubeadm", "config", "validate", "--config", "/etc/prebake/kubeadm-join.yaml")
	join := readFile(t, filepath.Join(root, "etc/prebake/kubeadm-join.yaml"))
	rootfstest.WriteFile(t, filepath.Join(root, "tmp/broken.yaml"), strings.Replace(join, "nodeRegistration:", "nodeRegistrashun:", 1), 0o600)
	if out, err := rootfstest.Cmd(root, nil, "/usr/bin/kubeadm", "config", "validate", "--config", "/tmp/broken.yaml").CombinedOutput(); err == nil {
		t.Errorf("kubeadm config validate accepted an unknown field:\n%s", out)
	}

	// 4. The join phase for real, with kubeadm replaced by a shim that records its arguments
	// and leaves the kubeconfig a join leaves (there is no cluster to join in a chroot).
	kubeadm := filepath.Join(root, "usr/bin/kubeadm")
	if err := os.Rename(kubeadm, kubeadm+".real"); err != nil {
		t.Fatal(err)
	}
	rootfstest.WriteFile(t, kubeadm, "#!/bin/sh\necho \"$*\" >>/var/log/kubeadm-calls\nmkdir -p /etc/kubernetes && : >/etc/kubernetes/kubelet.conf\n", 0o755)
	// Once joined, the node annotates itself with its phases (kubectl is a shim too).
	rootfstest.WriteFile(t, filepath.Join(root, "usr/local/bin/kubectl"), "#!/bin/sh\necho \"$*\" >>/var/log/kubectl-calls\n", 0o755)
	in := nodeInput("node-b", comps)
	in.Options.SkipJoin = false
	for _, want := range []string{"ok", "skipped"} {
		st, out, err := runScript(t, root, in)
		if err != nil {
			t.Fatalf("run with join: %v\n%s", err, rootfstest.Tail(out))
		}
		if ph, _ := st.Phase("join"); ph.Result != want {
			t.Errorf("join phase = %+v, want %s", ph, want)
		}
	}
	if got := readFile(t, filepath.Join(root, "var/log/kubeadm-calls")); got != "join --config /etc/prebake/kubeadm-join.yaml\n" {
		t.Errorf("kubeadm calls = %q, want one join (the second run finds the node joined)", got)
	}
	calls := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(root, "var/log/kubectl-calls"))), "\n")
	annotate := regexp.MustCompile(`^--kubeconfig /etc/kubernetes/kubelet.conf annotate --overwrite node node-b ` +
		`prebake.dev/bootstrap=prebaked=true total=\d+ms start=\d{13} manifest=\d+ms/ok plan=\d+ms/ok install=\d+ms/skipped ` +
		`configure=\d+ms/ok kubelet=\d+ms/ok join=\d+ms/(ok|skipped)$`)
	if len(calls) != 2 || !annotate.MatchString(calls[0]) || !annotate.MatchString(calls[1]) {
		t.Errorf("kubectl calls = %q, want two annotations matching %s", calls, annotate)
	}

	printTable(t, vanilla, prebaked)
}

func printTable(t *testing.T, vanilla, prebaked bootstrap.Status) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| phase | vanilla (runtime install) | prebaked |\n|---|---:|---:|\n")
	for _, p := range vanilla.Phases {
		q, _ := prebaked.Phase(p.Name)
		fmt.Fprintf(&b, "| %s | %s | %s |\n", p.Name, cell(p), cell(q))
	}
	fmt.Fprintf(&b, "| **total** | **%.2f s** | **%.2f s** |\n", float64(vanilla.TotalMs)/1000, float64(prebaked.TotalMs)/1000)
	fmt.Fprintf(&b, "\nvanilla installed %d components: %s\n", len(vanilla.Installed), strings.Join(vanilla.Installed, " "))
	if ph, ok := vanilla.Phase("install"); ok {
		fmt.Fprintf(&b, "vanilla install phase: %s\n", ph.Detail)
	}
	t.Log(b.String())
}

func cell(p bootstrap.Phase) string {
	s := fmt.Sprintf("%.2f s", p.Duration().Seconds())
	if p.Result != "ok" {
		s += " (" + p.Result + ")"
	}
	return s
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func readManifest(t testing.TB, root string) bootstrap.Manifest {
	t.Helper()
	m, err := bootstrap.ParseManifest([]byte(readFile(t, filepath.Join(root, strings.TrimPrefix(bootstrap.ManifestPath, "/")))))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// snapshot lists every path under root with its type, mode, size and mtime (and a symlink's
// target); any write shows up as a change. The status file, a report, is left out.
func snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	skip := map[string]bool{"/proc": true, "/dev": true, "/run": true, "/sys": true,
		bootstrap.DefaultStatusPath: true, filepath.Dir(bootstrap.DefaultStatusPath): true}
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		if skip[rel] {
			if d.IsDir() && rel != filepath.Dir(bootstrap.DefaultStatusPath) {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		v := fmt.Sprintf("%s %d %s", info.Mode(), info.Size(), info.ModTime().Format(time.RFC3339Nano))
		if info.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			v += " -> " + target
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
