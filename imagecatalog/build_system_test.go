//go:build system

package imagecatalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/bootstrap/rootfstest"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// sandboxApt maps each default component that bookworm main ships to its Debian package:
// kubectl is Debian's kubernetes-client, kubernetes-cni its containernetworking-plugins, and
// wireguard the tools (the module is in the kernel; the wireguard metapackage would pull a
// kernel image into the chroot).
var sandboxApt = map[string]string{
	"containerd": "containerd", "runc": "runc", "conntrack": "conntrack", "socat": "socat",
	"ebtables": "ebtables", "ethtool": "ethtool", "iptables": "iptables", "open-iscsi": "open-iscsi",
	"nfs-common": "nfs-common", "wireguard": "wireguard-tools", "kubectl": "kubernetes-client",
	"kubernetes-cni": "containernetworking-plugins",
}

// crictlStandIn is cri-tools: no crictl build is hermetic (the Go module proxy does not serve
// sigs.k8s.io/cri-tools at a matching version, see e2e/kubetest.BuildNodeBinaries) and bookworm
// does not package it, so the test serves this script and the report identifies it by its
// sha256, the way it would identify a real crictl.
const crictlStandIn = "#!/bin/sh\necho 'crictl version v1.35.0 (prebake system-test stand-in)'\n"

// sandboxRecipe is the build's components: the apt ones at the versions the cached package
// lists offer, kubelet and kubeadm built from k8s.io/kubernetes, and the crictl stand-in,
// binaries served from 127.0.0.1.
func sandboxRecipe(t *testing.T, root string) []bootstrap.Component {
	t.Helper()
	var comps []bootstrap.Component
	for _, c := range rootfstest.NodeBinaryComponents(t) {
		if c.Name == "kubelet" || c.Name == "kubeadm" {
			comps = append(comps, c)
		}
	}
	crictl := filepath.Join(t.TempDir(), "crictl")
	rootfstest.WriteFile(t, crictl, crictlStandIn, 0o755)
	comps = append(comps, rootfstest.Serve(t, []bootstrap.Component{{Name: "cri-tools", Version: "v1.35.0",
		URL: crictl, SHA256: rootfstest.FileSHA256(t, crictl), Path: "/usr/bin/crictl"}})...)
	names := slices.Sorted(maps.Keys(sandboxApt))
	var pkgs []string
	for _, n := range names {
		pkgs = append(pkgs, sandboxApt[n])
	}
	versions := rootfstest.CandidateVersions(t, root, pkgs)
	for _, n := range names {
		c := bootstrap.Component{Name: n, Version: versions[sandboxApt[n]]}
		if sandboxApt[n] != n {
			c.Package = sandboxApt[n]
		}
		comps = append(comps, c)
	}
	return comps
}

// builderUserData is what `prebake images build` boots the builder with when the recipe
// names no userDataFile: bootstrap's builder user-data for the recipe (install, cleanup,
// report), the shipped script. The chroot cannot run systemctl, sysctl or modprobe against
// the host, so those are recorded.
func builderUserData(t *testing.T, comps []bootstrap.Component) []byte {
	t.Helper()
	ud, err := bootstrap.RenderBuilder(bootstrap.BuilderInput{
		Provider:           "hcloud",
		Components:         comps,
		Sysctls:            maps.Clone(imagecatalog.DefaultSysctls),
		Modules:            slices.Clone(imagecatalog.DefaultModules),
		DpkgLockWait:       time.Minute,
		RecordHostCommands: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return ud.CloudConfig
}

// readBuildReport reads the report the builder's report step wrote in the image, strictly:
// its JSON is imagecatalog.Report's, field for field.
func readBuildReport(root string) (imagecatalog.Report, error) {
	var r imagecatalog.Report
	data, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(bootstrap.BuildReportPath, "/")))
	if err != nil {
		return r, fmt.Errorf("the report step wrote no report: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("report %s: %w\n%s", bootstrap.BuildReportPath, err, data)
	}
	return r, nil
}

// sandboxAgent is the provider, plus a builder VM played by a real Debian root filesystem:
// when a builder boots, the agent takes the user-data the fake received and does what
// cloud-init would (write_files, then each runcmd entry, going on after a failed one, then
// boot-finished) in a chroot. The user-data is bootstrap's builder with prebake's SSH access
// merged in. Build then logs in through the provider's real SSH client to a stand-in sshd
// (builderssh), whose shell runs the shipped seal step in the same chroot: the report Build
// reads is the one the script printed. The VM works in the background while Build polls.
type sandboxAgent struct {
	*hcloud.Provider
	cloud buildCloud
	root  string
	hooks sandboxHooks
	// cancel ends the Build when the sandbox itself breaks, so it does not wait out its
	// timeout for a report that will never come.
	cancel context.CancelFunc
	// booted is set when a builder booted; done then receives what its cloud-init did.
	booted bool
	done   chan sandboxRun
	// sshUp is set once cloud-init wrote the files and keys: only then does the builder's
	// sshd answer with the builder's host key (builderssh.SetReady).
	sshUp atomic.Bool
}

// sandboxHooks change the builder's filesystem: after the install step's runcmd entry, and
// between the seal's cleanup and report (as a broken script or a stray process would; seal
// then runs as its two steps, cleanup and report, with the hook between).
type sandboxHooks struct {
	afterInstall, afterCleanup func(root string) error
}

// sandboxRun is what the builder VM's cloud-init did.
type sandboxRun struct {
	install time.Duration
	status  string // of the install step: done or failed
	out     []byte // the user-data's output
	err     error  // the sandbox itself broke (not the user-data)
}

func (a *sandboxAgent) BootBuilder(ctx context.Context, spec imagecatalog.BuilderSpec) (imagecatalog.BuilderState, error) {
	st, err := a.Provider.BootBuilder(ctx, spec)
	if err != nil {
		return st, err
	}
	var userData string
	for _, s := range a.cloud.fake.Servers() {
		if strconv.FormatInt(s.ID, 10) == st.ID {
			userData = s.UserData
		}
	}
	a.booted = true
	go func() {
		r := a.run(st.ID, userData)
		if r.err != nil {
			a.cancel()
		}
		a.done <- r
	}()
	return st, nil
}

func (a *sandboxAgent) run(id, userData string) (res sandboxRun) {
	if userData == "" {
		res.err = fmt.Errorf("builder %s: the fake received no user-data", id)
		return res
	}
	// First boot leaves what the cleanup must remove: a machine id, host keys, cloud-init's
	// instance state.
	for path, content := range map[string]string{
		"etc/machine-id": "0123456789abcdef0123456789abcdef\n", "etc/ssh/ssh_host_ed25519_key": "first-boot host key\n",
		"var/lib/cloud/data/instance-id": id + "\n",
	} {
		if res.err = writeRootFile(a.root, path, content, 0o600); res.err != nil {
			return res
		}
	}
	if res.err = os.MkdirAll(filepath.Join(a.root, "var/lib/cloud/instances", id), 0o755); res.err != nil {
		return res
	}
	if res.err = os.Symlink("/var/lib/cloud/instances/"+id, filepath.Join(a.root, "var/lib/cloud/instance")); res.err != nil {
		return res
	}

	// cloud-init: write_files, then runcmd.
	var cc struct {
		WriteFiles []struct {
			Path, Permissions, Content string
		} `yaml:"write_files"`
		RunCmd [][]string `yaml:"runcmd"`
	}
	body, ok := strings.CutPrefix(userData, "#cloud-config\n")
	if !ok {
		res.err = fmt.Errorf("builder %s: user-data is not #cloud-config", id)
		return res
	}
	if res.err = yaml.Unmarshal([]byte(body), &cc); res.err != nil {
		return res
	}
	began := time.Now()
	for _, f := range cc.WriteFiles {
		mode, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			res.err = fmt.Errorf("write_files %s: permissions %q: %w", f.Path, f.Permissions, err)
			return res
		}
		if res.err = writeRootFile(a.root, f.Path, f.Content, os.FileMode(mode)); res.err != nil {
			return res
		}
	}
	a.sshUp.Store(true) // cloud-init's ssh module runs in the same stage as write_files
	if d := cmp.Diff(bootstrap.BuilderRunCmd(bootstrap.ReportOverSSH), cc.RunCmd); d != "" {
		res.err = fmt.Errorf("builder runcmd (-bootstrap.BuilderRunCmd +user-data):\n%s", d)
		return res
	}
	for _, argv := range cc.RunCmd {
		out, err := rootfstest.Cmd(a.root, nil, argv...).CombinedOutput()
		res.out = append(res.out, out...)
		res.status = map[bool]string{true: "done", false: "failed"}[err == nil]
	}
	res.install = time.Since(began)
	if h := a.hooks.afterInstall; h != nil {
		if res.err = h(a.root); res.err != nil {
			return res
		}
	}
	// cloud-init's final stage ends: only now may seal go ahead.
	res.err = writeRootFile(a.root, "var/lib/cloud/instances/"+id+"/boot-finished", "", 0o644)
	return res
}

// seal is the builder's shell as the stand-in sshd runs it: the command in the chroot.
func (a *sandboxAgent) seal(_ hcloudfake.Server, command string, stdout, stderr io.Writer) int {
	if command != bootstrap.BuilderSealCommand {
		fmt.Fprintf(stderr, "the sandbox runs only %q, not %q\n", bootstrap.BuilderSealCommand, command)
		return 127
	}
	run := func(out io.Writer, argv ...string) int {
		cmd := rootfstest.Cmd(a.root, nil, argv...)
		cmd.Stdout, cmd.Stderr = out, stderr
		var ee *exec.ExitError
		if err := cmd.Run(); errors.As(err, &ee) {
			return ee.ExitCode()
		} else if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	if a.hooks.afterCleanup == nil {
		return run(stdout, strings.Fields(command)...)
	}
	// The shipped seal's own waiting first, with its output thrown away.
	if code := run(io.Discard, "sh", "-c", "[ -e /var/lib/cloud/instance/boot-finished ] || exit 75"); code != 0 {
		return code
	}
	if code := run(stderr, "sh", bootstrap.BuilderScriptPath, "cleanup"); code != 0 {
		return code
	}
	if err := a.hooks.afterCleanup(a.root); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if code := run(stderr, "sh", bootstrap.BuilderScriptPath, "report"); code != 0 {
		return code
	}
	return run(stdout, "cat", bootstrap.BuildReportPath)
}

func writeRootFile(root, path, content string, mode os.FileMode) error {
	p := filepath.Join(root, strings.TrimPrefix(path, "/"))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

func sandboxSpec(comps []bootstrap.Component, userData []byte) imagecatalog.BuildSpec {
	versions := map[string]string{}
	for _, c := range comps {
		versions[c.Name] = c.Version
	}
	return imagecatalog.BuildSpec{
		OS: "debian", OSVersion: "12", K8s: imagecatalog.Version{Major: 1, Minor: 35, Patch: 4}, Arch: "amd64",
		Provider: "hcloud", BaseImage: "debian-12", MachineType: "cx22", BuilderLocation: "fsn1",
		Components: versions, UserData: userData,
	}
}

// sandboxBuild is one Build whose builder was a fresh copy of the cached rootfs.
type sandboxBuild struct {
	res      imagecatalog.BuildResult
	err      error
	progress string
	run      sandboxRun
	root     string
	cloud    buildCloud
	spec     imagecatalog.BuildSpec
	store    imagecatalog.FileStore
	logins   int // to the builder, over SSH
}

// runSandboxBuild builds the recipe, changed first by request when that is set, with hooks
// run on the builder's filesystem between its steps.
func runSandboxBuild(t *testing.T, request func([]bootstrap.Component), hooks sandboxHooks) sandboxBuild {
	t.Helper()
	root := rootfstest.Fresh(t)
	comps := sandboxRecipe(t, root)
	if request != nil {
		request(comps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := &sandboxAgent{root: root, hooks: hooks, cancel: cancel, done: make(chan sandboxRun, 1)}
	cloud := newBuildCloudExec(t, agent.seal)
	cloud.sshd.SetReady(func(hcloudfake.Server) bool { return agent.sshUp.Load() })
	agent.Provider, agent.cloud = cloud.p, cloud
	sb := sandboxBuild{root: root, cloud: cloud, spec: sandboxSpec(comps, builderUserData(t, comps)),
		store: imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "images.yaml")}}
	var progress bytes.Buffer
	opts := imagecatalog.BuildOptions{Poll: 100 * time.Millisecond, Timeout: 20 * time.Minute, Progress: &progress, Now: cloud.clock.Now}
	began := time.Now()
	sb.res, sb.err = imagecatalog.Build(ctx, agent, sb.store, sb.spec, opts)
	elapsed := time.Since(began)
	sb.progress = progress.String()
	if !agent.booted {
		t.Fatalf("Build booted no builder: %v\nprogress:\n%s", sb.err, sb.progress)
	}
	sb.run = <-agent.done
	if sb.run.err != nil {
		t.Fatalf("the sandbox builder broke: %v\nuser-data output:\n%s", sb.run.err, rootfstest.Tail(sb.run.out))
	}
	sb.logins = cloud.sshd.Logins()
	t.Logf("sandbox build: %.1f s in Build; the builder's install step (runtime install) %.1f s; install result %s; %d SSH logins",
		elapsed.Seconds(), sb.run.install.Seconds(), sb.run.status, sb.logins)
	return sb
}

// TestBuildObservesTheSandbox: Build against the hcloud fake, with the builder's user-data
// (bootstrap's runtime install) run for real in a debootstrapped Debian, and the manifest
// published to candidate is what the report step observed there. It also shows the
// observation is not the request: the versions of the recipe's apt components come from
// dpkg, and the report's observed manifest differs from bootstrap's own record when the
// image is tampered with (see TestBuildRejectsWhatTheSandboxDidNotInstall).
func TestBuildObservesTheSandbox(t *testing.T) {
	sb := runSandboxBuild(t, nil, sandboxHooks{})
	res, err, progress, run, cloud, spec, store := sb.res, sb.err, sb.progress, sb.run, sb.cloud, sb.spec, sb.store
	if err != nil {
		t.Fatalf("build: %v\nprogress:\n%s\nuser-data output:\n%s", err, progress, rootfstest.Tail(run.out))
	}
	if !res.Built || res.Image.ID == "" {
		t.Fatalf("build result %+v, want a built image", res)
	}
	// The report Build verified came over SSH from the shipped seal step, which left the
	// same report in the image.
	observed, err := readBuildReport(sb.root)
	if err != nil {
		t.Fatal(err)
	}
	if sb.logins == 0 {
		t.Error("Build never logged in to the builder")
	}

	// What the sandbox observed is the whole default set, and it is what is in the
	// filesystem: checked here again from outside the report step.
	if d := cmp.Diff(slices.Sorted(slices.Values(imagecatalog.DefaultComponents)), slices.Sorted(maps.Keys(observed.Observed.Components))); d != "" {
		t.Errorf("observed components (-default set +observed):\n%s", d)
	}
	for name, pkg := range sandboxApt {
		if got := rootfstest.Chroot(t, sb.root, "dpkg-query", "-W", "-f=${Version}", pkg); got != observed.Observed.Components[name] {
			t.Errorf("%s: dpkg has %s %q, the report says %q", name, pkg, got, observed.Observed.Components[name])
		}
	}
	if got := strings.TrimSpace(rootfstest.Chroot(t, sb.root, "/usr/bin/kubeadm", "version", "-o", "short")); got != observed.Observed.Components["kubeadm"] {
		t.Errorf("kubeadm in the rootfs is %q, the report says %q", got, observed.Observed.Components["kubeadm"])
	}

	// The published candidate's manifest is the observed one: in the catalog and on the
	// snapshot's labels.
	c, _, err := store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id, err := imagecatalog.Resolve(c, imagecatalog.Query{Channel: imagecatalog.ChannelCandidate, Key: spec.Key()})
	if err != nil || id != res.Image.ID {
		t.Fatalf("resolve candidate = %q, %v; want %s", id, err, res.Image.ID)
	}
	im, _ := c.Image(id)
	if d := cmp.Diff(observed.Observed, im.Manifest); d != "" {
		t.Errorf("catalog manifest (-observed +published):\n%s", d)
	}
	ims := snapshots(t, cloud.p)
	if len(ims) != 1 {
		t.Fatalf("%d snapshots, want 1", len(ims))
	}
	fromLabels, _, err := imagecatalog.ManifestFromLabels(ims[0].Labels)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(observed.Observed, fromLabels); d != "" {
		t.Errorf("snapshot labels' manifest (-observed +labels):\n%s", d)
	}
	if live := cloud.fake.Live(); live != 0 {
		t.Errorf("%d servers left after the build, want the builder deleted", live)
	}
	for _, want := range []string{"waiting for its report", "verified: 15 components", "published"} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q:\n%s", want, progress)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| component | observed in the sandbox |\n|---|---|\n")
	for _, n := range slices.Sorted(maps.Keys(im.Manifest.Components)) {
		fmt.Fprintf(&b, "| %s | %s |\n", n, im.Manifest.Components[n])
	}
	fmt.Fprintf(&b, "\nsandbox build: install step (runtime install) %.1f s, kubelet/kubeadm %s\n",
		run.install.Seconds(), kubetest.KubernetesVersion)
	t.Log(b.String())
}

// TestBuildRejectsWhatTheSandboxDidNotInstall: after the install, socat is removed and
// crictl replaced (what a later apt run or a broken script would do). bootstrap's own
// manifest file still claims both at the requested versions; the report observes what is
// there, and the build fails naming both, and publishes nothing.
func TestBuildRejectsWhatTheSandboxDidNotInstall(t *testing.T) {
	var claimed bootstrap.Manifest
	tamper := func(root string) error {
		data, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(bootstrap.ManifestPath, "/")))
		if err != nil {
			return err
		}
		if claimed, err = bootstrap.ParseManifest(data); err != nil {
			return err
		}
		if out, err := rootfstest.Cmd(root, nil, "dpkg", "--remove", "--force-depends", "socat").CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg --remove socat: %w\n%s", err, out)
		}
		return writeRootFile(root, "/usr/bin/crictl", "#!/bin/sh\necho 'crictl version v1.34.0'\n", 0o755)
	}
	sb := runSandboxBuild(t, nil, sandboxHooks{afterInstall: tamper})
	res, err, progress, run, cloud, spec, store := sb.res, sb.err, sb.progress, sb.run, sb.cloud, sb.spec, sb.store
	if run.status != "done" {
		t.Fatalf("the user-data failed before the tampering:\n%s", rootfstest.Tail(run.out))
	}
	want := spec.Manifest()
	for _, c := range []string{"socat", "cri-tools"} {
		if claimed.Components[c] != want.Components[c] {
			t.Errorf("bootstrap's manifest file says %s = %q, want the requested %q (the tamper comes after it)", c, claimed.Components[c], want.Components[c])
		}
	}
	var ve *imagecatalog.VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("build = %+v, %v; want a verification error\nprogress:\n%s", res, err, progress)
	}
	t.Logf("the build's error: %v", err)
	for _, w := range []string{
		"socat: want " + want.Components["socat"] + ", not installed",
		"version cri-tools: want v1.35.0, got sha256-",
		"nothing was published",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	if n := len(snapshots(t, cloud.p)); n != 0 {
		t.Errorf("%d snapshots after a failed build, want 0", n)
	}
	if live := cloud.fake.Live(); live != 0 {
		t.Errorf("%d servers left after a failed build, want the builder deleted", live)
	}
	c, _, err := store.Load(context.Background())
	if err != nil || len(c.Images) != 0 {
		t.Errorf("catalog after a failed build: %d images, %v; want none", len(c.Images), err)
	}
}

// TestBuildRejectsAVersionAptCannotGive: the recipe asks for a socat version the mirror does
// not have. bootstrap's install fails, the builder reports "failed" with what it observed
// (the apt transaction installed nothing), and the build names both and publishes nothing.
func TestBuildRejectsAVersionAptCannotGive(t *testing.T) {
	const bogus = "1.7.4.4-2+prebake1"
	sb := runSandboxBuild(t, func(comps []bootstrap.Component) {
		for i := range comps {
			if comps[i].Name == "socat" {
				comps[i].Version = bogus
			}
		}
	}, sandboxHooks{})
	if sb.run.status != "failed" {
		t.Errorf("the install step result is %q, want failed:\n%s", sb.run.status, rootfstest.Tail(sb.run.out))
	}
	var ve *imagecatalog.VerifyError
	if !errors.As(sb.err, &ve) {
		t.Fatalf("build = %+v, %v; want a verification error\nprogress:\n%s", sb.res, sb.err, sb.progress)
	}
	t.Logf("the build's error: %v", sb.err)
	for _, w := range []string{`reported "failed"`, "socat: want " + bogus + ", not installed", "nothing was published"} {
		if !strings.Contains(sb.err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, sb.err)
		}
	}
	if n := len(snapshots(t, sb.cloud.p)); n != 0 {
		t.Errorf("%d snapshots after a failed build, want 0", n)
	}
	c, _, err := sb.store.Load(context.Background())
	if err != nil || len(c.Images) != 0 {
		t.Errorf("catalog after a failed build: %d images, %v; want none", len(c.Images), err)
	}
}

// TestBuildRejectsAnUncleanImage: after the builder's cleanup, something makes a host key
// and a machine id again (an sshd or systemd started in the image would). The report sees
// them, and the build fails naming both checks and their fixes, and publishes nothing.
func TestBuildRejectsAnUncleanImage(t *testing.T) {
	sb := runSandboxBuild(t, nil, sandboxHooks{afterCleanup: func(root string) error {
		if err := writeRootFile(root, "etc/ssh/ssh_host_rsa_key", "regenerated\n", 0o600); err != nil {
			return err
		}
		return writeRootFile(root, "etc/machine-id", "fedcba9876543210fedcba9876543210\n", 0o444)
	}})
	var ve *imagecatalog.VerifyError
	if !errors.As(sb.err, &ve) {
		t.Fatalf("build = %+v, %v; want a verification error\nprogress:\n%s", sb.res, sb.err, sb.progress)
	}
	t.Logf("the build's error: %v", sb.err)
	if len(ve.Mismatches) != 0 {
		t.Errorf("version mismatches %v, want none: only the hygiene is broken", ve.Mismatches)
	}
	want := []string{
		"hygiene check machine-id failed: truncate /etc/machine-id, or every node shares one machine id",
		"hygiene check ssh-host-keys failed: remove /etc/ssh/ssh_host_* before the snapshot, or every node shares host keys",
	}
	if d := cmp.Diff(want, slices.Sorted(slices.Values(ve.Hygiene))); d != "" {
		t.Errorf("hygiene failures (-want +got):\n%s", d)
	}
	if n := len(snapshots(t, sb.cloud.p)); n != 0 {
		t.Errorf("%d snapshots after a failed build, want 0", n)
	}
	c, _, err := sb.store.Load(context.Background())
	if err != nil || len(c.Images) != 0 {
		t.Errorf("catalog after a failed build: %d images, %v; want none", len(c.Images), err)
	}
}
