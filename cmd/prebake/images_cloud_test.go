package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	hc "github.com/hetznercloud/hcloud-go/v2/hcloud"
	"go.yaml.in/yaml/v3"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake/builderssh"
)

// cliCloud is the Hetzner fake and a ProviderConfig pointing at it, as
// `prebake images --config` reads it.
type cliCloud struct {
	fake    *hcloudfake.Fake
	client  *hc.Client
	config  string
	dir     string
	builder *cliBuilder
}

// cliBuilder plays the builder VMs of one cliCloud behind a stand-in sshd: seal says "not
// yet" once, then reports what the user-data the fake received pins, "installed", with
// every hygiene check passed; tamper edits the report first.
type cliBuilder struct {
	mu       sync.Mutex // guards tamper and userData
	tamper   func(*imagecatalog.Report)
	userData []string // each builder's, in the order they reported
}

func (b *cliBuilder) setTamper(tamper func(*imagecatalog.Report)) {
	b.mu.Lock()
	b.tamper = tamper
	b.mu.Unlock()
}

func (b *cliBuilder) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.userData)
}

func (b *cliBuilder) report(s hcloudfake.Server) ([]byte, error) {
	r := imagecatalog.Report{Status: "done", Hygiene: map[string]bool{}, Observed: imagecatalog.Manifest{
		Components: map[string]string{}, Sysctls: maps.Clone(imagecatalog.DefaultSysctls),
		Modules: slices.Clone(imagecatalog.DefaultModules), UnattendedUpgradesDisabled: true}}
	re := aptPinRE
	if strings.Contains(s.UserData, bootstrap.BuilderScriptPath) {
		re = builderComponentRE
	}
	for _, m := range re.FindAllStringSubmatch(s.UserData, -1) {
		r.Observed.Components[m[1]] = m[2]
	}
	for _, c := range imagecatalog.HygieneChecks {
		r.Hygiene[c] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.userData = append(b.userData, s.UserData)
	if b.tamper != nil {
		b.tamper(&r)
	}
	return json.Marshal(r)
}

// cliBuilderDials maps each test fake's endpoint to its stand-in sshd: cloudOf asks
// builderDialFor, and parallel tests each have their own fake.
var cliBuilderDials sync.Map // endpoint → func(ctx, network, addr) (net.Conn, error)

func init() {
	builderDialFor = func(endpoint string) func(context.Context, string, string) (net.Conn, error) {
		if d, ok := cliBuilderDials.Load(endpoint); ok {
			return d.(func(context.Context, string, string) (net.Conn, error))
		}
		// Never the default dialer in tests: the fake's addresses are TEST-NET-1.
		return func(_ context.Context, _, addr string) (net.Conn, error) {
			return nil, fmt.Errorf("test: no stand-in sshd for %s at %s", endpoint, addr)
		}
	}
}

func newCLICloud(t *testing.T) cliCloud {
	t.Helper()
	f := hcloudfake.New(hcloudfake.Options{Token: "cli-token"})
	t.Cleanup(f.Close)
	builder := &cliBuilder{}
	sshd := builderssh.New(f, builderssh.Sealer(1, builder.report))
	t.Cleanup(sshd.Close)
	cliBuilderDials.Store(f.URL(), sshd.Dial)
	t.Cleanup(func() { cliBuilderDials.Delete(f.URL()) })
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("cli-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: test
providers:
  hcloud:
    token: {file: %s}
    endpoint: %s
nodeGroups:
  - {id: g, provider: hcloud, minSize: 0, maxSize: 3, machineType: cx22, location: fsn1}
`, token, f.URL())
	path := filepath.Join(dir, "prebake.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	client := hc.NewClient(hc.WithEndpoint(f.URL()), hc.WithToken("cli-token"))
	return cliCloud{f, client, path, dir, builder}
}

// runImagesSplit runs `prebake images` with stdout and stderr apart, so -o
// json output stays parseable next to progress lines.
func runImagesSplit(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newImagesCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// snapshot makes an unlabelled snapshot, as Packer would, and returns its id.
func (c cliCloud) snapshot(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	res, _, err := c.client.Server.Create(ctx, hc.ServerCreateOpts{Name: name, ServerType: &hc.ServerType{Name: "cx22"},
		Image: &hc.Image{Name: "ubuntu-24.04"}, Location: &hc.Location{Name: "fsn1"}})
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := c.client.Server.CreateImage(ctx, res.Server, &hc.ServerCreateImageOpts{Type: hc.ImageTypeSnapshot, Description: hc.Ptr(name)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.client.Server.DeleteWithResult(ctx, res.Server); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(img.Image.ID, 10)
}

func (c cliCloud) snapshotIDs(t *testing.T) []string {
	t.Helper()
	ims, err := c.client.Image.AllWithOpts(context.Background(), hc.ImageListOpts{Type: []hc.ImageType{hc.ImageTypeSnapshot}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, im := range ims {
		ids = append(ids, strconv.FormatInt(im.ID, 10))
	}
	slices.Sort(ids)
	return ids
}

func cliVersions() map[string]string {
	vs := map[string]string{}
	for _, c := range imagecatalog.DefaultComponents {
		vs[c] = "1.0.0-1"
	}
	vs["kubelet"], vs["kubeadm"], vs["kubectl"] = "1.34.2-1.1", "1.34.2-1.1", "1.34.2-1.1"
	return vs
}

// scenarioCloud is what the CLI acceptance scenario needs of a provider's fake: images
// made outside prebake (as Packer would), an instance of the cluster booted from one, and
// the images the cloud has left.
type scenarioCloud interface {
	configFile() string
	workDir() string
	// makeImage makes an unlabelled image and returns its id.
	makeImage(t *testing.T, letter string) string
	// bootFrom starts a live instance of the cluster from image id.
	bootFrom(t *testing.T, id string)
	// imageIDs are the cloud's images, sorted.
	imageIDs(t *testing.T) []string
	// checkStable checks what the cloud says of the image stable points to.
	checkStable(t *testing.T, id string)
}

// runCLIScenario is the acceptance scenario through the CLI and the provider's real image
// API: publish A-E, promote A, B, C to stable, roll back, candidate -> D, gc --keep-history 1
// deletes C and E in the cloud (only E while an instance of the cluster runs from C); then
// sync rebuilds the catalog from the labels alone.
func runCLIScenario(t *testing.T, newCloud func(t *testing.T) scenarioCloud) {
	t.Parallel()
	for _, liveOnC := range []bool{false, true} {
		t.Run(map[bool]string{false: "no live instance", true: "live instance on C"}[liveOnC], func(t *testing.T) {
			t.Parallel()
			cloud := newCloud(t)
			config, dir := cloud.configFile(), cloud.workDir()
			cat := filepath.Join(dir, "images.yaml")
			manifest := filepath.Join(dir, "manifest.yaml")
			mdata, _ := yaml.Marshal(imagecatalog.DefaultManifest(cliVersions()))
			if err := os.WriteFile(manifest, mdata, 0o600); err != nil {
				t.Fatal(err)
			}
			ids, letter := map[string]string{}, map[string]string{}
			for i, l := range []string{"A", "B", "C", "D", "E"} {
				id := cloud.makeImage(t, l)
				ids[l], letter[id] = id, l
				name := fmt.Sprintf("prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t%02d04", 10+i)
				if out, _, err := runImagesSplit(t, "publish", id, "--config", config, "--catalog", cat, "--name", name,
					"--inputs-hash", fmt.Sprintf("%032x", i), "--manifest", manifest, "--verified", "goss in CI"); err != nil {
					t.Fatalf("publish %s: %v\n%s", l, err, out)
				}
			}
			for _, s := range [][]string{
				{"promote", ids["A"]}, {"promote", ids["B"]}, {"promote", ids["C"]},
				{"rollback", "--reason", "C fails canary join"},
				{"promote", ids["D"], "--channel", "candidate"},
			} {
				if out, _, err := runImagesSplit(t, append(s, "--catalog", cat, "--config", config)...); err != nil {
					t.Fatalf("%v: %v\n%s", s, err, out)
				}
			}
			if liveOnC {
				cloud.bootFrom(t, ids["C"])
			}
			// The dry run deletes nothing but already sees the live instance.
			out, _, err := runImagesSplit(t, "gc", "--keep-history", "1", "--dry-run", "--catalog", cat, "--config", config, "-o", "json")
			var plan imagecatalog.GCPlan
			if err != nil || json.Unmarshal([]byte(out), &plan) != nil {
				t.Fatalf("gc --dry-run: %v\n%s", err, out)
			}
			if n := len(cloud.imageIDs(t)); n != 5 {
				t.Errorf("gc --dry-run left %d of 5 images", n)
			}
			var planned []string
			for _, id := range plan.Delete {
				planned = append(planned, letter[id])
			}
			wantPlanned := []string{"C", "E"}
			if liveOnC {
				wantPlanned = []string{"E"}
			}
			if d := cmp.Diff(wantPlanned, planned); d != "" {
				t.Errorf("dry-run plan deletes (-want +got):\n%s", d)
			}
			if out, _, err = runImagesSplit(t, "gc", "--keep-history", "1", "--catalog", cat, "--config", config); err != nil {
				t.Fatalf("gc: %v\n%s", err, out)
			}
			want := []string{ids["A"], ids["B"], ids["D"]}
			if liveOnC {
				want = append(want, ids["C"])
			}
			slices.Sort(want)
			if d := cmp.Diff(want, cloud.imageIDs(t)); d != "" {
				t.Errorf("images after gc (-want +got):\n%s", d)
			}
			cloud.checkStable(t, ids["B"])

			// Sync into an empty catalog: the channels come back from the labels alone.
			fresh := filepath.Join(dir, "synced.yaml")
			if out, _, err := runImagesSplit(t, "sync", "--catalog", fresh, "--config", config); err != nil {
				t.Fatalf("sync: %v\n%s", err, out)
			}
			for ch, l := range map[string]string{"stable": "B", "candidate": "D"} {
				out, _, err = runImagesSplit(t, "resolve", "--catalog", fresh, "--channel", ch)
				if err != nil || out != ids[l]+"\n" {
					t.Errorf("resolve %s after sync = %q, %v; want %s (%s)", ch, out, err, l, ids[l])
				}
			}
		})
	}
}

func (c cliCloud) configFile() string { return c.config }
func (c cliCloud) workDir() string    { return c.dir }

func (c cliCloud) makeImage(t *testing.T, letter string) string {
	return c.snapshot(t, "packer-"+letter)
}

func (c cliCloud) imageIDs(t *testing.T) []string { return c.snapshotIDs(t) }

func (c cliCloud) bootFrom(t *testing.T, id string) {
	t.Helper()
	if _, _, err := c.client.Server.Create(context.Background(), hc.ServerCreateOpts{Name: "node-1",
		ServerType: &hc.ServerType{Name: "cx22"}, Image: &hc.Image{ID: mustInt(t, id)},
		Location: &hc.Location{Name: "fsn1"}, Labels: map[string]string{"prebake.dev/cluster": "test"}}); err != nil {
		t.Fatal(err)
	}
}

// checkStable: on Hetzner the stable image is delete-protected, and labelled.
func (c cliCloud) checkStable(t *testing.T, id string) {
	t.Helper()
	im, _, err := c.client.Image.GetByID(context.Background(), mustInt(t, id))
	if err != nil || !im.Protection.Delete || im.Labels["prebake.dev/channel-stable"] != "current" {
		t.Errorf("stable image %s: protected %v, labels %v, %v", id, im != nil && im.Protection.Delete, im.Labels, err)
	}
}

func TestImagesCLIScenarioAgainstHcloudFake(t *testing.T) {
	runCLIScenario(t, func(t *testing.T) scenarioCloud { return newCLICloud(t) })
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var aptPinRE = regexp.MustCompile(`([a-z0-9.+-]+)=([0-9A-Za-z.+~:_-]+)`)

// builderComponentRE finds the components in bootstrap's builder script (its generated
// prebake_components function), which the CLI renders when the recipe names no userDataFile.
var builderComponentRE = regexp.MustCompile(`component apt '([a-z0-9.+-]+)' '([0-9A-Za-z.+~:_-]+)'`)

// writeRecipe writes a one-image hcloud recipe whose userDataFile, a cloud-config, pins the
// versions for the stand-in builder to read back.
func writeRecipe(t *testing.T, dir string, versions map[string]string) string {
	t.Helper()
	var script strings.Builder
	script.WriteString("#cloud-config\nruncmd:\n  - [sh, -c, 'apt-get install -y")
	for _, c := range slices.Sorted(maps.Keys(versions)) {
		script.WriteString(" " + c + "=" + versions[c])
	}
	if err := os.WriteFile(filepath.Join(dir, "builder.yaml"), []byte(script.String()+"']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return writeCLIRecipe(t, dir, versions, map[string]string{"provider": "hcloud", "baseImage": "ubuntu-24.04",
		"machineType": "cx22", "builderLocation": "fsn1", "userDataFile": "builder.yaml"})
}

// writeCLIRecipe writes recipe.yaml in dir: one ubuntu 24.04, Kubernetes 1.34.2 amd64 image
// of the versions, with the provider's fields (provider, baseImage, machineType, …).
func writeCLIRecipe(t *testing.T, dir string, versions, fields map[string]string) string {
	t.Helper()
	comps, _ := yaml.Marshal(versions)
	var b strings.Builder
	b.WriteString("apiVersion: prebake.dev/v1alpha1\nkind: ImageRecipe\nimages:\n  - os: ubuntu\n    osVersion: \"2404\"\n    kubernetes: 1.34.2\n    arch: amd64\n")
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		fmt.Fprintf(&b, "    %s: %s\n", k, fields[k])
	}
	b.WriteString("    components:\n" + indent(string(comps), "      "))
	path := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pre + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// A build through the CLI produces a labelled candidate whose manifest is
// the requested one; building the same inputs again creates nothing; a
// report with a wrong version publishes nothing.
func TestImagesCLIBuild(t *testing.T) {
	t.Parallel()
	cloud := newCLICloud(t)
	cat := filepath.Join(cloud.dir, "images.yaml")
	recipe := writeRecipe(t, cloud.dir, cliVersions())
	build := func(extra ...string) ([]imagecatalog.BuildResult, string) {
		t.Helper()
		out, progress, err := runImagesSplit(t, append([]string{"build", "--recipe", recipe, "--catalog", cat, "--config", cloud.config,
			"--poll", "5ms", "-o", "json"}, extra...)...)
		if err != nil {
			t.Fatalf("build: %v\nprogress:\n%s", err, progress)
		}
		var res []imagecatalog.BuildResult
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 {
			t.Fatalf("build -o json: %v\n%s", err, out)
		}
		return res, progress
	}
	res, progress := build()
	if !res[0].Built || !strings.Contains(progress, "waiting for its report") && !strings.Contains(progress, "verified") {
		t.Fatalf("first build = %+v\nprogress:\n%s", res[0], progress)
	}
	if d := cmp.Diff(imagecatalog.DefaultManifest(cliVersions()), res[0].Image.Manifest); d != "" {
		t.Errorf("built manifest (-requested +got):\n%s", d)
	}
	out, _, err := runImagesSplit(t, "resolve", "--catalog", cat, "--channel", "candidate")
	if err != nil || out != res[0].Image.ID+"\n" {
		t.Errorf("resolve candidate = %q, %v; want %s", out, err, res[0].Image.ID)
	}
	posts := cloud.fake.Calls("POST", "/servers")
	again, _ := build()
	if again[0].Built || again[0].Image.ID != res[0].Image.ID || cloud.fake.Calls("POST", "/servers") != posts {
		t.Errorf("second build = %+v (%d new servers), want nothing built", again[0], cloud.fake.Calls("POST", "/servers")-posts)
	}
	if n := len(cloud.snapshotIDs(t)); n != 1 {
		t.Errorf("%d snapshots, want 1", n)
	}

	// New inputs, --dry-run: nothing is booted.
	v2 := cliVersions()
	v2["containerd"] = "1.0.1-1"
	recipe = writeRecipe(t, cloud.dir, v2)
	dry, _ := build("--dry-run")
	if !dry[0].DryRun || cloud.fake.Calls("POST", "/servers") != posts {
		t.Errorf("dry-run build = %+v, %d servers created", dry[0], cloud.fake.Calls("POST", "/servers")-posts)
	}
}

// A recipe without userDataFile builds with bootstrap's builder user-data: the builder
// boots with a cloud-config that runs the builder's install, cleanup and report steps for
// the recipe's components, and the build publishes what the (stand-in) report observed.
func TestImagesCLIBuildRendersTheBuilder(t *testing.T) {
	t.Parallel()
	cloud := newCLICloud(t)
	recipe := writeRecipe(t, cloud.dir, cliVersions())
	data, err := os.ReadFile(recipe)
	if err != nil {
		t.Fatal(err)
	}
	noFile := strings.Replace(string(data), "    userDataFile: builder.yaml\n", "", 1)
	if noFile == string(data) {
		t.Fatal("writeRecipe wrote no userDataFile line to remove")
	}
	if err := os.WriteFile(recipe, []byte(noFile), 0o600); err != nil {
		t.Fatal(err)
	}
	cat := filepath.Join(cloud.dir, "images.yaml")
	out, progress, err := runImagesSplit(t, "build", "--recipe", recipe, "--catalog", cat, "--config", cloud.config, "--poll", "5ms", "-o", "json")
	if err != nil {
		t.Fatalf("build: %v\nprogress:\n%s", err, progress)
	}
	var res []imagecatalog.BuildResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 || !res[0].Built {
		t.Fatalf("build -o json: %v\n%s", err, out)
	}
	if d := cmp.Diff(imagecatalog.DefaultManifest(cliVersions()), res[0].Image.Manifest); d != "" {
		t.Errorf("built manifest (-requested +got):\n%s", d)
	}
	seen := cloud.builder.seen()
	if len(seen) != 1 {
		t.Fatalf("%d builders reported, want 1", len(seen))
	}
	want, err := builderUserData(imagecatalog.BuildSpec{Provider: "hcloud", Components: cliVersions()}, builderSources{})
	if err != nil {
		t.Fatal(err)
	}
	// What the builder booted with is bootstrap.RenderBuilder's for the recipe, with
	// prebake's SSH access (keys made for this builder) merged in: its files and commands
	// are the rendered ones, and its runcmd only installs (prebake seals over SSH).
	type builderConfig struct {
		WriteFiles []map[string]string `yaml:"write_files"`
		RunCmd     [][]string          `yaml:"runcmd"`
		Authorized []string            `yaml:"ssh_authorized_keys"`
	}
	var got, rendered builderConfig
	if err := yaml.Unmarshal([]byte(seen[0]), &got); err != nil {
		t.Fatalf("builder user-data is not YAML: %v", err)
	}
	if err := yaml.Unmarshal(want, &rendered); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(rendered.WriteFiles, got.WriteFiles); d != "" {
		t.Errorf("builder files (-bootstrap.RenderBuilder +booted):\n%s", d)
	}
	if d := cmp.Diff(bootstrap.BuilderRunCmd(bootstrap.ReportOverSSH), got.RunCmd); d != "" {
		t.Errorf("builder runcmd (-want +got):\n%s", d)
	}
	if len(got.Authorized) != 1 || len(rendered.Authorized) != 0 {
		t.Errorf("authorized keys: booted %q, rendered %q; want prebake's one key added at boot", got.Authorized, rendered.Authorized)
	}
}

func TestImagesCLIBuildRejectsBadReport(t *testing.T) {
	t.Parallel()
	cloud := newCLICloud(t)
	cloud.builder.setTamper(func(r *imagecatalog.Report) {
		r.Observed.Components["kubelet"] = "1.34.3-1.1"
		r.Hygiene["ssh-host-keys"] = false
	})
	cat := filepath.Join(cloud.dir, "images.yaml")
	_, _, err := runImagesSplit(t, "build", "--recipe", writeRecipe(t, cloud.dir, cliVersions()), "--catalog", cat,
		"--config", cloud.config, "--poll", "5ms")
	if err == nil || !strings.Contains(err.Error(), "kubelet: want 1.34.2-1.1, got 1.34.3-1.1") || !strings.Contains(err.Error(), "ssh-host-keys failed") {
		t.Fatalf("build with a bad report: %v, want the version and host key named", err)
	}
	if n := len(cloud.snapshotIDs(t)); n != 0 {
		t.Errorf("%d snapshots after a failed build, want 0", n)
	}
	if _, err := os.Stat(cat); !os.IsNotExist(err) {
		t.Errorf("the catalog was written by a failed build (%v)", err)
	}
}

func TestImagesCLIRefreshPromotesOnlyWithCanary(t *testing.T) {
	t.Parallel()
	cloud := newCLICloud(t)
	cat := filepath.Join(cloud.dir, "images.yaml")
	recipe := writeRecipe(t, cloud.dir, cliVersions())
	args := []string{"refresh", "--recipe", recipe, "--catalog", cat, "--config", cloud.config, "--poll", "5ms", "--max-age", "168h"}
	out, _, err := runImagesSplit(t, args...)
	if err != nil || !strings.Contains(out, "no canary configured") {
		t.Fatalf("refresh without canary: %v\n%s", err, out)
	}
	if _, _, err := runImagesSplit(t, "resolve", "--catalog", cat); err == nil {
		t.Error("stable resolves after a refresh without canary")
	}
	marker := filepath.Join(cloud.dir, "canary-saw")
	if _, _, err := runImagesSplit(t, append(args, "--canary-command", "exit 3")...); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("refresh with a failing canary: %v, want its exit status", err)
	}
	out, _, err = runImagesSplit(t, append(args, "--canary-command", `echo "$PREBAKE_IMAGE_ID" > `+marker, "-o", "json")...)
	var res []imagecatalog.RefreshResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res) != 1 || !res[0].Promoted || res[0].Built {
		t.Fatalf("refresh with a passing canary: %v\n%s", err, out)
	}
	saw, _ := os.ReadFile(marker)
	stable, _, err := runImagesSplit(t, "resolve", "--catalog", cat)
	if err != nil || stable != string(saw) || stable != res[0].Image+"\n" {
		t.Errorf("stable = %q, %v; the canary saw %q; want %s", stable, err, saw, res[0].Image)
	}
}

func TestImagesCatalogFlag(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"configmap://ns", "configmap:///name", "configmap://ns/a/b", "s3://bucket/x"} {
		if _, _, err := runImagesSplit(t, "list", "--catalog", bad); err == nil || !strings.Contains(err.Error(), "--catalog") {
			t.Errorf("--catalog %s: %v, want an error naming the flag", bad, err)
		}
	}
	cat := "file://" + imagesCatalog(t)
	if out, _, err := runImagesSplit(t, "list", "--catalog", cat); err != nil || !strings.Contains(out, "\nA ") {
		t.Errorf("list --catalog %s: %v\n%s", cat, err, out)
	}
	if _, _, err := runImagesSplit(t, "publish", "1", "--catalog", cat); err == nil || !strings.Contains(err.Error(), "give --config") {
		t.Errorf("publish without --config: %v", err)
	}
}

// deprecate, publish and sync under --dry-run change neither the catalog nor
// the cloud; without it, deprecate labels the image.
func TestImagesCLIDryRunsAndDeprecate(t *testing.T) {
	t.Parallel()
	cloud := newCLICloud(t)
	cat := filepath.Join(cloud.dir, "images.yaml")
	manifest := filepath.Join(cloud.dir, "manifest.yaml")
	mdata, _ := yaml.Marshal(imagecatalog.DefaultManifest(cliVersions()))
	if err := os.WriteFile(manifest, mdata, 0o600); err != nil {
		t.Fatal(err)
	}
	id := cloud.snapshot(t, "packer")
	publish := []string{"publish", id, "--config", cloud.config, "--catalog", cat, "--name", "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504",
		"--inputs-hash", strings.Repeat("a", 32), "--manifest", manifest, "--verified", "ci", "--channel", "candidate"}
	labels := func() map[string]string {
		im, _, err := cloud.client.Image.GetByID(context.Background(), mustInt(t, id))
		if err != nil {
			t.Fatal(err)
		}
		return im.Labels
	}
	if out, _, err := runImagesSplit(t, append(publish, "--dry-run")...); err != nil || !strings.Contains(out, "would publish") {
		t.Fatalf("publish --dry-run: %v\n%s", err, out)
	}
	if _, err := os.Stat(cat); !os.IsNotExist(err) || len(labels()) != 0 {
		t.Fatalf("publish --dry-run wrote the catalog (%v) or labels %v", err, labels())
	}
	if out, _, err := runImagesSplit(t, publish...); err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	if l := labels(); l["prebake.dev/channel-candidate"] != "current" || l["prebake.dev/verified"] != "true" {
		t.Errorf("labels after publish: %v", l)
	}
	before, _ := os.ReadFile(cat)
	if out, _, err := runImagesSplit(t, "deprecate", id, "--reason", "CVE", "--dry-run", "--config", cloud.config, "--catalog", cat); err != nil || !strings.Contains(out, "would be deprecated") {
		t.Errorf("deprecate --dry-run: %v\n%s", err, out)
	}
	if out, _, err := runImagesSplit(t, "sync", "--dry-run", "--config", cloud.config, "--catalog", cat); err != nil || !strings.Contains(out, "would sync 1 images and 1 channels") {
		t.Errorf("sync --dry-run: %v\n%s", err, out)
	}
	after, _ := os.ReadFile(cat)
	if !bytes.Equal(before, after) || labels()[imagecatalog.LabelDeprecated] != "" {
		t.Fatal("a --dry-run changed the catalog or the labels")
	}
	out, _, err := runImagesSplit(t, "deprecate", id, "--reason", "CVE", "--config", cloud.config, "--catalog", cat)
	if err != nil || !strings.Contains(out, "channels still naming it: candidate") {
		t.Errorf("deprecate: %v\n%s", err, out)
	}
	if labels()[imagecatalog.LabelDeprecated] != "true" {
		t.Errorf("labels after deprecate: %v", labels())
	}
	if _, _, err := runImagesSplit(t, "resolve", "--catalog", cat, "--channel", "candidate"); err == nil || !strings.Contains(err.Error(), "deprecated") {
		t.Errorf("resolve of a deprecated candidate: %v, want deprecated", err)
	}
}
