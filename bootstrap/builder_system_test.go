//go:build system

package bootstrap_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/bootstrap/rootfstest"
)

// TestInstallBuilderStandalone pipes the builder's standalone script (no argument: all three
// steps) to `sh -s` in a debootstrapped Debian that carries what a first boot leaves, and
// reads the report it writes. With a version apt cannot give, the install fails, and the
// script still cleans up and reports "failed". The cloud-config path (one runcmd entry per
// step) is proven by imagecatalog's sandboxed build.
func TestInstallBuilderStandalone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		socat      func(candidate string) string
		wantStatus string
	}{
		{"install ok", func(c string) string { return c }, "done"},
		{"install fails", func(string) string { return "1.7.4.4-2+prebake1" }, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := rootfstest.Fresh(t)
			candidate := rootfstest.CandidateVersions(t, root, []string{"socat"})["socat"]
			tool := filepath.Join(t.TempDir(), "prebake-tool")
			rootfstest.WriteFile(t, tool, "#!/bin/sh\necho tool\n", 0o755)
			comps := append([]bootstrap.Component{{Name: "socat", Version: tc.socat(candidate)}},
				rootfstest.Serve(t, []bootstrap.Component{{Name: "cri-tools", Version: "v1.35.0", URL: tool,
					SHA256: rootfstest.FileSHA256(t, tool), Path: "/usr/bin/crictl"}})...)
			ud, err := bootstrap.RenderBuilder(bootstrap.BuilderInput{Provider: "gce", Components: comps,
				Sysctls: map[string]string{"net.ipv4.ip_forward": "1"}, Modules: []string{"overlay", "wireguard"},
				DpkgLockWait: time.Minute, RecordHostCommands: true})
			if err != nil {
				t.Fatal(err)
			}
			// What a first boot leaves, and logs.
			for path, content := range map[string]string{
				"etc/machine-id": "0123456789abcdef0123456789abcdef\n", "etc/ssh/ssh_host_ed25519_key": "key\n",
				"etc/ssh/ssh_host_ed25519_key.pub": "pub\n", "var/lib/cloud/instances/i-1/boot-finished": "",
				"var/lib/cloud/data/instance-id": "i-1\n", "var/log/syslog.1.gz": "old", "var/log/cloud-init.log": "first boot\n",
			} {
				rootfstest.WriteFile(t, filepath.Join(root, path), content, 0o600)
			}
			if err := os.Symlink("/var/lib/cloud/instances/i-1", filepath.Join(root, "var/lib/cloud/instance")); err != nil {
				t.Fatal(err)
			}

			began := time.Now()
			cmd := rootfstest.Cmd(root, nil, "sh", "-s")
			cmd.Stdin = bytes.NewReader(ud.Script)
			out, err := cmd.CombinedOutput()
			t.Logf("builder script (%s): %.1f s", tc.name, time.Since(began).Seconds())
			if err != nil {
				t.Fatalf("the standalone builder script failed: %v\n%s", err, rootfstest.Tail(out))
			}
			data, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(bootstrap.BuildReportPath, "/")))
			if err != nil {
				t.Fatalf("no report: %v\n%s", err, rootfstest.Tail(out))
			}
			r, err := bootstrap.ParseBuildReport(data)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.wantStatus {
				t.Errorf("report status %q, want %s\n%s", r.Status, tc.wantStatus, rootfstest.Tail(out))
			}
			wantComps := map[string]string{"socat": candidate, "cri-tools": "v1.35.0"}
			if tc.wantStatus == "failed" {
				// apt installed nothing, and the binaries come after apt.
				wantComps = map[string]string{}
			}
			if d := cmp.Diff(wantComps, r.Observed.Components); d != "" {
				t.Errorf("observed components (-want +got):\n%s", d)
			}
			wantHygiene := map[string]bool{}
			for _, c := range bootstrap.BuilderHygieneChecks {
				wantHygiene[c] = true
			}
			if d := cmp.Diff(wantHygiene, r.Hygiene); d != "" {
				t.Errorf("hygiene (-want +got):\n%s", d)
			}
			if !r.Observed.UnattendedUpgradesDisabled {
				t.Error("unattended-upgrades reported enabled after the install step disabled it")
			}
			if tc.wantStatus == "done" {
				if r.Observed.Sysctls["net.ipv4.ip_forward"] != "1" || !slices.Contains(r.Observed.Modules, "wireguard") {
					t.Errorf("observed sysctls %v modules %v; want the baked ip_forward and wireguard", r.Observed.Sysctls, r.Observed.Modules)
				}
				if got := rootfstest.Chroot(t, root, "dpkg-query", "-W", "-f=${Version}", "socat"); got != r.Observed.Components["socat"] {
					t.Errorf("dpkg has socat %q, the report says %q", got, r.Observed.Components["socat"])
				}
			}

			// Checked again from outside the script: what the cleanup removed, and what a
			// builder never writes.
			for _, p := range []string{"etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_ed25519_key.pub", "var/lib/cloud/instances",
				"var/lib/cloud/instance", "var/lib/cloud/data/instance-id", "var/log/syslog.1.gz",
				"etc/prebake/kubeadm-join.yaml", strings.TrimPrefix(bootstrap.DefaultStatusPath, "/")} {
				if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
					t.Errorf("/%s is still there (%v)", p, err)
				}
			}
			for _, p := range []string{"etc/machine-id", "var/log/cloud-init.log"} {
				if fi, err := os.Stat(filepath.Join(root, p)); err != nil || fi.Size() != 0 {
					t.Errorf("/%s: %v, want it empty", p, err)
				}
			}
			if lists, _ := filepath.Glob(filepath.Join(root, "var/lib/apt/lists/*_Packages")); len(lists) != 0 {
				t.Errorf("apt lists left: %v", lists)
			}
			st, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(bootstrap.BuilderStatusPath, "/")))
			if err != nil {
				t.Fatal(err)
			}
			s, err := bootstrap.ParseStatus(st)
			if err != nil || map[string]string{"done": "ok", "failed": "failed"}[tc.wantStatus] != s.Result {
				t.Errorf("install status %q (%v), want the report's %s", s.Result, err, tc.wantStatus)
			}
		})
	}
}
