package hcloud

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake/builderssh"
)

type sshBuilder struct {
	p     *Provider
	fake  *hcloudfake.Fake
	sshd  *builderssh.Sshd
	clock *hcloudfake.Clock
	spec  imagecatalog.BuilderSpec
}

func newSSHBuilder(t *testing.T, exec builderssh.Exec) sshBuilder {
	t.Helper()
	clk := hcloudfake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := newFake(t, hcloudfake.Options{Now: clk.Now})
	sshd := builderssh.New(f, exec)
	t.Cleanup(sshd.Close)
	p, err := New(Options{Token: testToken, Endpoint: f.URL(), PollInterval: time.Millisecond, Cluster: "c", MaxRetries: -1, Now: clk.Now, BuilderDial: sshd.Dial})
	if err != nil {
		t.Fatal(err)
	}
	spec := imagecatalog.BuilderSpec{Name: "prebake-builder-amd64-0123", BaseImage: "ubuntu-24.04", MachineType: "cx22",
		Location: "fsn1", UserData: []byte("#cloud-config\nruncmd:\n  - [sh, -c, echo build]\n"), Labels: map[string]string{imagecatalog.LabelBuilder: "0123"}}
	return sshBuilder{p, f, sshd, clk, spec}
}

func (b sshBuilder) boot(t *testing.T) imagecatalog.BuilderState {
	t.Helper()
	st, err := b.p.BootBuilder(context.Background(), b.spec)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBuilderSealCommandIsBootstrapsOwn: builderssh plays exactly the command prebake runs.
func TestBuilderSealCommandIsBootstrapsOwn(t *testing.T) {
	if builderssh.SealCommand != bootstrap.BuilderSealCommand {
		t.Fatalf("builderssh.SealCommand %q, bootstrap.BuilderSealCommand %q", builderssh.SealCommand, bootstrap.BuilderSealCommand)
	}
}

// TestBuilderReportOverSSH: prebake logs in with the key it put in the builder's user-data,
// checks the host key it put there, and reads the report seal prints; "not yet" is no report
// and no error.
func TestBuilderReportOverSSH(t *testing.T) {
	t.Parallel()
	report := []byte(`{"status":"done","observed":{},"hygiene":{}}` + "\n")
	b := newSSHBuilder(t, builderssh.Sealer(1, func(hcloudfake.Server) ([]byte, error) { return report, nil }))
	st := b.boot(t)
	if st.Address == "" {
		t.Fatalf("builder state %+v has no address", st)
	}
	ctx := context.Background()
	if data, ok, err := b.p.BuilderReport(ctx, st); err != nil || ok || data != nil {
		t.Fatalf("first BuilderReport = %q, %v, %v; want not yet (seal said 75)", data, ok, err)
	}
	data, ok, err := b.p.BuilderReport(ctx, st)
	if err != nil || !ok || string(data) != string(report) {
		t.Fatalf("second BuilderReport = %q, %v, %v; want the report", data, ok, err)
	}
	if n := b.sshd.Logins(); n != 2 {
		t.Errorf("%d logins, want 2", n)
	}

	// What the server received: cloud-init's host key, root's key (not the host key), and
	// the spec's own commands.
	var cc struct {
		Keys       map[string]string `yaml:"ssh_keys"`
		Authorized []string          `yaml:"ssh_authorized_keys"`
		RunCmd     [][]string        `yaml:"runcmd"`
	}
	ud := b.fake.Servers()[0].UserData
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(ud, "#cloud-config\n")), &cc); err != nil {
		t.Fatal(err)
	}
	if len(cc.Authorized) != 1 || strings.Contains(cc.Authorized[0], cc.Keys["ed25519_public"]) || len(cc.RunCmd) != 1 {
		t.Errorf("user-data: authorized %q, host key %q, runcmd %q", cc.Authorized, cc.Keys["ed25519_public"], cc.RunCmd)
	}
	// Each builder has keys of its own.
	spec2 := b.spec
	spec2.Name += "-2"
	if _, err := b.p.BootBuilder(ctx, spec2); err != nil {
		t.Fatal(err)
	}
	if ud2 := b.fake.Servers()[1].UserData; ud2 == ud {
		t.Error("two builders got the same keys")
	}
}

// TestBuilderReportHostKey: another host key gets nothing sent (no login); it is waited out
// for builderHostKeyGrace, then the builder is unusable, naming both fingerprints.
func TestBuilderReportHostKey(t *testing.T) {
	t.Parallel()
	b := newSSHBuilder(t, builderssh.Sealer(0, func(hcloudfake.Server) ([]byte, error) { return []byte("{}"), nil }))
	st := b.boot(t)
	b.sshd.ShowWrongHostKey(1)
	_, ok, err := b.p.BuilderReport(context.Background(), st)
	if err == nil || ok || errors.Is(err, imagecatalog.ErrBuilderUnusable) || !strings.Contains(err.Error(), "want the builder's own SHA256:") {
		t.Fatalf("BuilderReport with another host key at boot = %v, %v; want a retryable error naming both keys", ok, err)
	}
	b.clock.Advance(builderHostKeyGrace + time.Second)
	b.sshd.ShowWrongHostKey(1)
	_, _, err = b.p.BuilderReport(context.Background(), st)
	if !errors.Is(err, imagecatalog.ErrBuilderUnusable) || strings.Count(err.Error(), "SHA256:") != 2 {
		t.Fatalf("BuilderReport with another host key after the grace = %v; want unusable, naming both fingerprints", err)
	}
	if n := b.sshd.Logins(); n != 0 {
		t.Errorf("%d logins to a server with the wrong host key, want none", n)
	}
}

// TestBuilderReportUnusable: a failing seal, and a builder this process did not boot, stop
// the build at once; a builder that is not running yet is simply not ready.
func TestBuilderReportUnusable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newSSHBuilder(t, func(_ hcloudfake.Server, _ string, _, stderr io.Writer) int {
		io.WriteString(stderr, "sh: 1: cannot open /var/lib/prebake/builder.sh: No such file")
		return 2
	})
	st := b.boot(t)
	_, _, err := b.p.BuilderReport(ctx, st)
	if !errors.Is(err, imagecatalog.ErrBuilderUnusable) || !strings.Contains(err.Error(), "exited 2: sh: 1: cannot open") {
		t.Errorf("BuilderReport of a failing seal = %v; want unusable with its stderr", err)
	}
	noAddress := st
	noAddress.Address = ""
	if _, _, err := b.p.BuilderReport(ctx, noAddress); !errors.Is(err, imagecatalog.ErrBuilderUnusable) || !strings.Contains(err.Error(), "no public IPv4") {
		t.Errorf("BuilderReport of a builder without a public IPv4 = %v; want unusable, saying why", err)
	}
	starting := st
	starting.Status = "starting"
	if data, ok, err := b.p.BuilderReport(ctx, starting); data != nil || ok || err != nil {
		t.Errorf("BuilderReport of a starting builder = %q, %v, %v; want not ready", data, ok, err)
	}

	// Another process (a re-run) has no keys for it: its report is out of reach, and
	// booting the same builder replaces it.
	other, err := New(Options{Token: testToken, Endpoint: b.fake.URL(), PollInterval: time.Millisecond, Cluster: "c", MaxRetries: -1, Now: b.clock.Now, BuilderDial: b.sshd.Dial})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.BuilderReport(ctx, st); !errors.Is(err, imagecatalog.ErrBuilderUnusable) {
		t.Errorf("BuilderReport of a builder booted elsewhere = %v; want unusable", err)
	}
	again, err := other.BootBuilder(ctx, b.spec)
	if err != nil || again.ID == st.ID {
		t.Fatalf("BootBuilder over a leftover builder = %+v, %v; want a new one", again, err)
	}
	if n := b.fake.Live(); n != 1 {
		t.Errorf("%d servers after replacing the leftover builder, want 1", n)
	}

	// User-data that is no cloud-config cannot carry the keys: nothing is created.
	posts := b.fake.Calls("POST", "/servers")
	bad := b.spec
	bad.Name, bad.UserData = "prebake-builder-amd64-4567", []byte("#!/bin/sh\necho build\n")
	if _, err := b.p.BootBuilder(ctx, bad); err == nil || !strings.Contains(err.Error(), "not a #cloud-config") {
		t.Errorf("BootBuilder with a shell script = %v; want a refusal saying why", err)
	}
	if n := b.fake.Calls("POST", "/servers"); n != posts {
		t.Errorf("a refused builder created %d servers", n-posts)
	}
}
