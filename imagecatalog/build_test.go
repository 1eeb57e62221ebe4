package imagecatalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake/builderssh"
)

// buildCloud is the Hetzner fake, the real provider in front of it, and a
// stand-in sshd (builderssh) that plays the builder VM behind the address the
// fake gave it.
type buildCloud struct {
	fake  *hcloudfake.Fake
	p     *hcloud.Provider
	sshd  *builderssh.Sshd
	clock *hcloudfake.Clock
}

// builderPlay is how the stand-in builder behaves: tamper changes its report
// first (a wrong version, a leftover host key); a silent builder never
// reports.
type builderPlay struct {
	tamper func(*imagecatalog.Report)
	silent bool
}

func newBuildCloud(t *testing.T, play builderPlay) buildCloud {
	t.Helper()
	notYet := 2
	if play.silent {
		notYet = math.MaxInt
	}
	return newBuildCloudExec(t, builderssh.Sealer(notYet, func(s hcloudfake.Server) ([]byte, error) {
		r := reportFor(s.UserData)
		if play.tamper != nil {
			play.tamper(&r)
		}
		return json.Marshal(r)
	}))
}

// newBuildCloudExec is a buildCloud whose builders' shell is exec.
func newBuildCloudExec(t *testing.T, exec builderssh.Exec) buildCloud {
	t.Helper()
	clk := hcloudfake.NewClock(time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC))
	f := hcloudfake.New(hcloudfake.Options{Now: clk.Now, Token: "test-token"})
	t.Cleanup(f.Close)
	sshd := builderssh.New(f, exec)
	t.Cleanup(sshd.Close)
	p, err := hcloud.New(hcloud.Options{Token: "test-token", Endpoint: f.URL(), Cluster: "test", MaxRetries: -1, BuilderDial: sshd.Dial})
	if err != nil {
		t.Fatal(err)
	}
	return buildCloud{f, p, sshd, clk}
}

// builderScript is the runtime-install user-data of the tests: an apt-get
// line the stand-in builder reads back from what the fake received.
func builderScript(versions map[string]string) []byte {
	var b strings.Builder
	b.WriteString("#cloud-config\nruncmd:\n  - [sh, -c, 'apt-get install -y")
	for _, c := range slices.Sorted(maps.Keys(versions)) {
		b.WriteString(" " + c + "=" + versions[c])
	}
	b.WriteString("']\n")
	return []byte(b.String())
}

var aptPin = regexp.MustCompile(`([a-z0-9.+-]+)=([0-9A-Za-z.+~:_-]+)`)

// reportFor is the report of a builder that installed exactly what its
// user-data pins and passed every hygiene check.
func reportFor(userData string) imagecatalog.Report {
	observed := imagecatalog.Manifest{Components: map[string]string{}, Sysctls: maps.Clone(imagecatalog.DefaultSysctls),
		Modules: slices.Clone(imagecatalog.DefaultModules), UnattendedUpgradesDisabled: true}
	for _, m := range aptPin.FindAllStringSubmatch(userData, -1) {
		observed.Components[m[1]] = m[2]
	}
	r := imagecatalog.Report{Status: "done", Observed: observed, Hygiene: map[string]bool{}}
	for _, c := range imagecatalog.HygieneChecks {
		r.Hygiene[c] = true
	}
	return r
}

func buildSpec(versions map[string]string) imagecatalog.BuildSpec {
	return imagecatalog.BuildSpec{
		OS: "ubuntu", OSVersion: "2404", K8s: imagecatalog.Version{Major: 1, Minor: 34, Patch: 2}, Arch: "amd64",
		Provider: "hcloud", BaseImage: "ubuntu-24.04", MachineType: "cx22", BuilderLocation: "fsn1",
		Components: versions, UserData: builderScript(versions),
	}
}

func fastBuild(clock *hcloudfake.Clock, progress *bytes.Buffer) imagecatalog.BuildOptions {
	return imagecatalog.BuildOptions{Poll: time.Millisecond, Timeout: 10 * time.Second, Progress: progress, Now: clock.Now}
}

func snapshots(t *testing.T, p *hcloud.Provider) []imagecatalog.CloudImage {
	t.Helper()
	ims, err := p.ListImages(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ims
}

func TestBuildPublishesVerifiedCandidateAndRebuildIsNoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cloud := newBuildCloud(t, builderPlay{})
	api := cloud.p
	store := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "images.yaml")}
	spec := buildSpec(exactVersions())
	var progress bytes.Buffer

	res, err := imagecatalog.Build(ctx, api, store, spec, fastBuild(cloud.clock, &progress))
	if err != nil {
		t.Fatalf("build: %v\nprogress:\n%s", err, progress.String())
	}
	if !res.Built || res.Image.ID == "" {
		t.Fatalf("build result %+v, want a built image", res)
	}
	for _, want := range []string{"booting from ubuntu-24.04", "verified: 15 components", "snapshotting", "deleted", "published"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}

	// The cloud has one labelled snapshot; the builder is gone.
	ims := snapshots(t, cloud.p)
	if len(ims) != 1 {
		t.Fatalf("%d snapshots, want 1", len(ims))
	}
	got := ims[0]
	l := got.Labels
	wantName := "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504"
	for k, v := range map[string]string{
		imagecatalog.LabelName: wantName, imagecatalog.LabelVerified: "true",
		imagecatalog.LabelInputsHash: imagecatalog.InputsHash(spec.Inputs()), "prebake.dev/channel-candidate": "current",
		"prebake.dev/pkg-kubelet": "1_d34_d2-1_d1", imagecatalog.LabelUnattendedUpgrades: "disabled",
	} {
		if l[k] != v {
			t.Errorf("snapshot label %s = %q, want %q", k, l[k], v)
		}
	}
	if got.Description != wantName {
		t.Errorf("snapshot description %q, want the name %q", got.Description, wantName)
	}
	if live := cloud.fake.Live(); live != 0 {
		t.Errorf("%d servers left after the build, want the builder deleted", live)
	}

	// The catalog: candidate points to it, and its manifest is the one
	// requested (as observed by the builder).
	c, _, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := imagecatalog.Resolve(c, imagecatalog.Query{Channel: imagecatalog.ChannelCandidate, Key: spec.Key()})
	if err != nil || id != got.ID {
		t.Fatalf("resolve candidate = %q, %v; want %s", id, err, got.ID)
	}
	im, _ := c.Image(id)
	if d := cmp.Diff(spec.Manifest(), im.Manifest); d != "" {
		t.Errorf("catalog manifest (-requested +published):\n%s", d)
	}
	// The labels alone carry the same manifest.
	fromLabels, _, err := imagecatalog.ManifestFromLabels(l)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(spec.Manifest(), fromLabels); d != "" {
		t.Errorf("manifest from labels (-requested +labels):\n%s", d)
	}

	// The same inputs again: nothing is booted or snapshotted.
	posts := cloud.fake.Calls("POST", "/servers")
	progress.Reset()
	again, err := imagecatalog.Build(ctx, api, store, spec, fastBuild(cloud.clock, &progress))
	if err != nil {
		t.Fatal(err)
	}
	if again.Built || again.Image.ID != got.ID {
		t.Errorf("second build = %+v, want the existing image %s and nothing built", again, got.ID)
	}
	if n := cloud.fake.Calls("POST", "/servers"); n != posts {
		t.Errorf("second build created %d servers", n-posts)
	}
	if n := len(snapshots(t, cloud.p)); n != 1 {
		t.Errorf("%d snapshots after the second build, want 1", n)
	}

	// With the catalog lost, the cloud's inputs-hash label still stops the
	// build, and the image is published again.
	lost := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "new.yaml")}
	third, err := imagecatalog.Build(ctx, api, lost, spec, fastBuild(cloud.clock, &progress))
	if err != nil || third.Built || third.Image.ID != got.ID {
		t.Fatalf("build with an empty catalog = %+v, %v; want the existing image", third, err)
	}
	c2, _, _ := lost.Load(ctx)
	if _, ok := c2.Image(got.ID); !ok {
		t.Errorf("the existing image was not published into the empty catalog")
	}
	if n := cloud.fake.Calls("POST", "/servers"); n != posts {
		t.Errorf("build with an empty catalog created %d servers", n-posts)
	}
}

func TestBuildFailsVerification(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		tamper func(*imagecatalog.Report)
		want   []string
	}{
		"wrong version": {
			tamper: func(r *imagecatalog.Report) { r.Observed.Components["kubelet"] = "1.34.1-1.1" },
			want:   []string{"version kubelet: want 1.34.2-1.1, got 1.34.1-1.1"},
		},
		"missing component": {
			tamper: func(r *imagecatalog.Report) { delete(r.Observed.Components, "cri-tools") },
			want:   []string{"cri-tools: want 1.0.0-1, not installed"},
		},
		"leftover ssh host key": {
			tamper: func(r *imagecatalog.Report) { r.Hygiene["ssh-host-keys"] = false },
			want:   []string{"hygiene check ssh-host-keys failed", "remove /etc/ssh/ssh_host_*"},
		},
		"machine-id and apt cache": {
			tamper: func(r *imagecatalog.Report) { r.Hygiene["machine-id"] = false; delete(r.Hygiene, "apt-cache") },
			want:   []string{"machine-id failed", "apt-cache was not reported"},
		},
		"unattended-upgrades enabled": {
			tamper: func(r *imagecatalog.Report) { r.Observed.UnattendedUpgradesDisabled = false },
			want:   []string{"unattended-upgrades is enabled"},
		},
		"install failed": {
			tamper: func(r *imagecatalog.Report) { r.Status = "failed" },
			want:   []string{`reported "failed"`},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cloud := newBuildCloud(t, builderPlay{tamper: tt.tamper})
			api := cloud.p
			store := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "images.yaml")}
			var progress bytes.Buffer
			_, err := imagecatalog.Build(ctx, api, store, buildSpec(exactVersions()), fastBuild(cloud.clock, &progress))
			var ve *imagecatalog.VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("build error %v, want a verification error", err)
			}
			for _, w := range append(tt.want, "nothing was published") {
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
			c, _, err := store.Load(ctx)
			if err != nil || len(c.Images) != 0 {
				t.Errorf("catalog after a failed build: %d images, %v; want none", len(c.Images), err)
			}
		})
	}
}

func TestBuildTimesOutWithoutReport(t *testing.T) {
	t.Parallel()
	cloud := newBuildCloud(t, builderPlay{silent: true})
	api := cloud.p
	store := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "images.yaml")}
	var progress bytes.Buffer
	opts := fastBuild(cloud.clock, &progress)
	opts.Timeout = 10 * time.Minute
	// The timeout is measured on the fakes' clock: it passes once the build
	// said it waits for the report, never before (the wall clock plays no
	// part, so a loaded machine can't reorder the two).
	opts.Progress = onLine(&progress, "waiting for its report", func() { cloud.clock.Advance(opts.Timeout) })
	_, err := imagecatalog.Build(context.Background(), api, store, buildSpec(exactVersions()), opts)
	if err == nil || !strings.Contains(err.Error(), "gave no report within 10m0s") {
		t.Fatalf("build of a silent builder: %v, want a timeout saying so", err)
	}
	if !strings.Contains(progress.String(), "waiting for its report") {
		t.Errorf("no progress while waiting:\n%s", progress.String())
	}
	if live := cloud.fake.Live(); live != 0 {
		t.Errorf("%d servers left after a timed-out build", live)
	}
}

// onLine is a progress writer into buf that calls fn once, the first time a
// line containing s is written.
func onLine(buf *bytes.Buffer, s string, fn func()) io.Writer {
	var once sync.Once
	return writerFunc(func(p []byte) (int, error) {
		n, err := buf.Write(p)
		if bytes.Contains(p, []byte(s)) {
			once.Do(fn)
		}
		return n, err
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestBuildDryRunBootsNothing(t *testing.T) {
	t.Parallel()
	cloud := newBuildCloud(t, builderPlay{})
	api := cloud.p
	store := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "images.yaml")}
	var progress bytes.Buffer
	opts := fastBuild(cloud.clock, &progress)
	opts.DryRun = true
	res, err := imagecatalog.Build(context.Background(), api, store, buildSpec(exactVersions()), opts)
	if err != nil || !res.DryRun || res.Built {
		t.Fatalf("dry run = %+v, %v", res, err)
	}
	if n := cloud.fake.Calls("POST", "/servers"); n != 0 {
		t.Errorf("dry run created %d servers", n)
	}
}

// countingCanary records the images it checked and fails when told to.
type countingCanary struct {
	checked []string
	fail    bool
}

func (c *countingCanary) Check(_ context.Context, im imagecatalog.Image) error {
	c.checked = append(c.checked, im.ID)
	if c.fail {
		return errors.New("join timed out")
	}
	return nil
}
func (c *countingCanary) String() string { return "test canary" }

func TestRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cloud := newBuildCloud(t, builderPlay{})
	api := cloud.p
	store := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "images.yaml")}
	var progress bytes.Buffer
	v1 := exactVersions()
	spec := buildSpec(v1)
	stable := func() string {
		c, _, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ch, _ := c.Channel(imagecatalog.ChannelStable, spec.Key())
		return ch.Image
	}
	opts := imagecatalog.RefreshOptions{Build: fastBuild(cloud.clock, &progress), MaxAge: 7 * 24 * time.Hour}

	// 1. No canary: builds to candidate, refuses to promote.
	res, err := imagecatalog.Refresh(ctx, api, store, []imagecatalog.BuildSpec{spec}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Built || res[0].Promoted || !strings.Contains(res[0].Why, "no canary configured") || stable() != "" {
		t.Fatalf("refresh without canary = %+v, stable %q; want built, not promoted", res[0], stable())
	}
	first := res[0].Image

	// 2. A failing canary: nothing promoted, the error says so.
	canary := &countingCanary{fail: true}
	opts.Canary = canary
	res, err = imagecatalog.Refresh(ctx, api, store, []imagecatalog.BuildSpec{spec}, opts)
	if err == nil || res[0].Promoted || res[0].Built || stable() != "" {
		t.Fatalf("refresh with a failing canary = %+v, %v, stable %q", res[0], err, stable())
	}

	// 3. A passing canary promotes the candidate; nothing is rebuilt.
	canary.fail = false
	res, err = imagecatalog.Refresh(ctx, api, store, []imagecatalog.BuildSpec{spec}, opts)
	if err != nil || !res[0].Promoted || res[0].Built || stable() != first {
		t.Fatalf("refresh with a passing canary = %+v, %v, stable %q want %s", res[0], err, stable(), first)
	}
	if n := cloud.fake.Calls("POST", "/servers"); n != 1 {
		t.Errorf("%d builders booted so far, want 1", n)
	}

	// 4. Nothing changed: no build, no canary run.
	canary.checked = nil
	if res, err = imagecatalog.Refresh(ctx, api, store, []imagecatalog.BuildSpec{spec}, opts); err != nil || res[0].Built || res[0].Promoted || len(canary.checked) != 0 {
		t.Fatalf("idle refresh = %+v, %v, canary ran on %v", res[0], err, canary.checked)
	}

	// 5. Older than --max-age: rebuilt with the same inputs, then promoted.
	cloud.clock.Advance(8 * 24 * time.Hour)
	res, err = imagecatalog.Refresh(ctx, api, store, []imagecatalog.BuildSpec{spec}, opts)
	if err != nil || !res[0].Built || !res[0].Promoted || res[0].Image == first || stable() != res[0].Image {
		t.Fatalf("refresh past max age = %+v, %v, stable %q", res[0], err, stable())
	}
	second := res[0].Image

	// 6. New inputs (a kubelet patch in the same minor): rebuilt at once.
	v2 := maps.Clone(v1)
	v2["containerd"] = "1.0.1-1"
	spec2 := buildSpec(v2)
	cloud.clock.Advance(time.Hour)
	res, err = imagecatalog.Refresh(ctx, api, store, []imagecatalog.BuildSpec{spec2}, opts)
	if err != nil || !res[0].Built || !res[0].Promoted || res[0].Image == second {
		t.Fatalf("refresh with new inputs = %+v, %v", res[0], err)
	}
	c, _, _ := store.Load(ctx)
	ch, _ := c.Channel(imagecatalog.ChannelStable, spec.Key())
	var hist []string
	for _, e := range ch.History {
		hist = append(hist, e.Image)
	}
	if d := cmp.Diff([]string{second, first}, hist); d != "" {
		t.Errorf("stable history (-want +got):\n%s", d)
	}
}

// TestBuildRecordsContainerImageDigests: the digests the builder reports
// become the catalog image's manifest (through the catalog document); a
// pinned image the builder pulled at another digest, or one it did not
// report, publishes nothing and the error names the image.
func TestBuildRecordsContainerImageDigests(t *testing.T) {
	t.Parallel()
	digest := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	pause := "registry.k8s.io/pause:3.10"
	app := "registry.example/team/app:1.2@" + digest("c")
	for name, tt := range map[string]struct {
		reported map[string]string
		wantErr  string // "" means published
	}{
		"recorded":                 {reported: map[string]string{pause: digest("a"), app: digest("c")}},
		"pinned at another digest": {reported: map[string]string{pause: digest("a"), app: digest("d")}, wantErr: "container image " + app + ": pinned to " + digest("c") + ", but the builder pulled " + digest("d")},
		"not pulled":               {reported: map[string]string{app: digest("c")}, wantErr: "container image " + pause + " is not in the report"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cloud := newBuildCloud(t, builderPlay{tamper: func(r *imagecatalog.Report) { r.Observed.ContainerImages = tt.reported }})
			store := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "images.yaml")}
			spec := buildSpec(exactVersions())
			spec.ContainerImages = []string{pause, app}
			var progress bytes.Buffer
			res, err := imagecatalog.Build(ctx, cloud.p, store, spec, fastBuild(cloud.clock, &progress))
			c, _, lerr := store.Load(ctx)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "nothing was published") {
					t.Fatalf("build error %v, want one containing %q", err, tt.wantErr)
				}
				if len(c.Images) != 0 || len(snapshots(t, cloud.p)) != 0 {
					t.Errorf("a failed build left %d catalog images, %d snapshots", len(c.Images), len(snapshots(t, cloud.p)))
				}
				return
			}
			if err != nil {
				t.Fatalf("build: %v\n%s", err, progress.String())
			}
			im, ok := c.Image(res.Image.ID)
			if !ok {
				t.Fatalf("image %s not in the catalog", res.Image.ID)
			}
			if d := cmp.Diff(tt.reported, im.Manifest.ContainerImages); d != "" {
				t.Errorf("catalog image's container images (-reported +catalog):\n%s", d)
			}
			if !strings.Contains(progress.String(), "2 container images") {
				t.Errorf("progress does not count the container images:\n%s", progress.String())
			}
		})
	}
}
