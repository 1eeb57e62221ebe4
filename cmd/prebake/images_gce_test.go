package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers/gce"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

// The `prebake images` commands against the Compute Engine fake, through
// --config naming a gce ProviderConfig whose endpoint is the fake: the
// provider drives the real compute REST clients.

const gceZone = "europe-west4-a"

// gceCLICloud is the GCE fake, a ProviderConfig pointing at it, and the
// compute clients the test acts through (as Packer or a node would).
type gceCLICloud struct {
	fake      *gcefake.Fake
	config    string
	dir       string
	instances *compute.InstancesClient
	images    *compute.ImagesClient
}

func newGCECLICloud(t *testing.T) gceCLICloud {
	t.Helper()
	f := gcefake.New(gcefake.Options{})
	t.Cleanup(f.Close)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: test
providers:
  gce:
    project: %s
    endpoint: %s
nodeGroups:
  - {id: g, provider: gce, minSize: 0, maxSize: 3, machineType: e2-standard-2, location: %s}
`, f.Project(), f.URL(), gceZone)
	path := filepath.Join(dir, "prebake.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := []option.ClientOption{option.WithEndpoint(f.URL()), option.WithoutAuthentication()}
	ic, err := compute.NewInstancesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ic.Close() })
	imc, err := compute.NewImagesRESTClient(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = imc.Close() })
	return gceCLICloud{fake: f, config: path, dir: dir, instances: ic, images: imc}
}

// insert creates an instance booted from image and waits for it.
func (c gceCLICloud) insert(t *testing.T, name, image string, labels map[string]string) {
	t.Helper()
	op, err := c.instances.Insert(context.Background(), &computepb.InsertInstanceRequest{Project: c.fake.Project(), Zone: gceZone,
		InstanceResource: &computepb.Instance{
			Name: proto.String(name), MachineType: proto.String("zones/" + gceZone + "/machineTypes/e2-standard-2"), Labels: labels,
			Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
				InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(image)}}},
		}})
	if err == nil {
		err = op.Wait(context.Background())
	}
	if err != nil {
		t.Fatalf("insert %s: %v", name, err)
	}
}

// image makes an unlabelled image from a scratch instance's disk, as Packer
// would, and returns its id (on GCE, its name).
func (c gceCLICloud) image(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	vm := "packer-" + name
	c.insert(t, vm, "projects/"+gcefake.UbuntuProject+"/global/images/family/"+gcefake.UbuntuFamilyAMD64, nil)
	op, err := c.images.Insert(ctx, &computepb.InsertImageRequest{Project: c.fake.Project(), ForceCreate: proto.Bool(true),
		ImageResource: &computepb.Image{Name: proto.String(name), SourceDisk: proto.String("zones/" + gceZone + "/disks/" + vm)}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("image %s: %v", name, err)
	}
	if _, err := c.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: c.fake.Project(), Zone: gceZone, Instance: vm}); err != nil {
		t.Fatal(err)
	}
	return name
}

func (c gceCLICloud) imageNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, im := range c.fake.Images() {
		names = append(names, im.Name)
	}
	slices.Sort(names)
	return names
}

func (c gceCLICloud) imageLabels(t *testing.T, name string) map[string]string {
	t.Helper()
	for _, im := range c.fake.Images() {
		if im.Name == name {
			return gce.FromGCE(im.Labels)
		}
	}
	t.Fatalf("no image %s in the fake", name)
	return nil
}

func (c gceCLICloud) configFile() string { return c.config }
func (c gceCLICloud) workDir() string    { return c.dir }

func (c gceCLICloud) makeImage(t *testing.T, letter string) string {
	return c.image(t, "packer-image-"+strings.ToLower(letter))
}

func (c gceCLICloud) imageIDs(t *testing.T) []string { return c.imageNames(t) }

func (c gceCLICloud) bootFrom(t *testing.T, id string) {
	t.Helper()
	c.insert(t, "node-1", "projects/"+c.fake.Project()+"/global/images/"+id,
		gce.ToGCE(map[string]string{"prebake.dev/cluster": "test", "prebake.dev/image": id}))
}

// checkStable: GCE has no delete protection; the stable image carries its labels.
func (c gceCLICloud) checkStable(t *testing.T, id string) {
	t.Helper()
	if l := c.imageLabels(t, id); l["prebake.dev/channel-stable"] != "current" || l[imagecatalog.LabelName] != "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1104" {
		t.Errorf("stable image %s's labels: %v", id, l)
	}
}

// The acceptance scenario through the CLI against the Compute Engine fake: provider gce,
// the global location.
func TestImagesCLIScenarioAgainstGCEFake(t *testing.T) {
	runCLIScenario(t, func(t *testing.T) scenarioCloud { return newGCECLICloud(t) })
}

// A ProviderConfig with both clouds is refused: one config per provider.
func TestImagesCLIRefusesTwoProvidersGCE(t *testing.T) {
	t.Parallel()
	cloud := newGCECLICloud(t)
	data, err := os.ReadFile(cloud.config)
	if err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(cloud.dir, "token")
	if err := os.WriteFile(token, []byte("t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	both := strings.Replace(string(data), "providers:\n", "providers:\n  hcloud:\n    token: {file: "+token+"}\n", 1)
	if both == string(data) {
		t.Fatal("no providers block to extend")
	}
	path := filepath.Join(cloud.dir, "both.yaml")
	if err := os.WriteFile(path, []byte(both), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = runImagesSplit(t, "sync", "--dry-run", "--catalog", filepath.Join(cloud.dir, "images.yaml"), "--config", path)
	if err == nil || !strings.Contains(err.Error(), "one config per provider") {
		t.Errorf("images sync with hcloud and gce in one config: %v, want a refusal saying one config per provider", err)
	}
}

// runGCEBuilderAgent plays the builder VMs until ctx ends: for each builder
// instance (it carries the builder label) that is RUNNING and has written no
// report, it reads its user-data, "installs" the components it names and
// PUTs the report to the instance's metadata server, as the builder
// script's report step does on GCE.
func runGCEBuilderAgent(ctx context.Context, t *testing.T, cloud gceCLICloud, tamper func(*imagecatalog.Report)) {
	builderKey := gce.LabelKey(imagecatalog.LabelBuilder)
	reportKey := gce.ReportNamespace + "/" + gce.ReportKey
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		for _, in := range cloud.fake.Instances() {
			if in.Labels[builderKey] == "" || in.Status != "RUNNING" || in.GuestAttributes[reportKey] != "" {
				continue
			}
			r := imagecatalog.Report{Status: "done", Hygiene: map[string]bool{}, Observed: imagecatalog.Manifest{
				Components: map[string]string{}, Sysctls: maps.Clone(imagecatalog.DefaultSysctls),
				Modules: slices.Clone(imagecatalog.DefaultModules), UnattendedUpgradesDisabled: true}}
			re := aptPinRE
			if strings.Contains(in.UserData, bootstrap.BuilderScriptPath) {
				re = builderComponentRE
			}
			for _, m := range re.FindAllStringSubmatch(in.UserData, -1) {
				r.Observed.Components[m[1]] = m[2]
			}
			for _, c := range imagecatalog.HygieneChecks {
				r.Hygiene[c] = true
			}
			if tamper != nil {
				tamper(&r)
			}
			body, err := json.Marshal(r)
			if err != nil {
				t.Error(err)
				return
			}
			if err := putReport(ctx, cloud.fake, in.Name, body); err != nil && ctx.Err() == nil {
				t.Errorf("builder agent: %v", err)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// putReport is the builder's report step on GCE: PUT the report to its
// metadata server's guest attribute, with Metadata-Flavor: Google.
func putReport(ctx context.Context, f *gcefake.Fake, instance string, report []byte) error {
	base, err := f.MetadataURL(instance)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		base+"/computeMetadata/v1/instance/guest-attributes/"+gce.ReportNamespace+"/"+gce.ReportKey, strings.NewReader(string(report)))
	if err != nil {
		return err
	}
	req.Header.Set("Metadata-Flavor", "Google")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT report to %s: %s", instance, res.Status)
	}
	return nil
}

// writeGCERecipe writes a one-image GCE recipe; without userDataFile the
// CLI renders bootstrap's builder user-data.
func writeGCERecipe(t *testing.T, dir string, versions map[string]string) string {
	t.Helper()
	return writeCLIRecipe(t, dir, versions, map[string]string{"provider": "gce",
		"baseImage":   "projects/" + gcefake.UbuntuProject + "/global/images/family/" + gcefake.UbuntuFamilyAMD64,
		"machineType": "e2-standard-2", "builderLocation": gceZone})
}

// A build through the CLI on GCE: the builder boots with bootstrap's builder
// user-data and guest attributes on, the test (as the builder) PUTs a report
// matching the recipe through the metadata server, and the build publishes
// a labelled candidate image and deletes the builder. Building the same
// inputs again creates nothing.
func TestImagesCLIBuildGCE(t *testing.T) {
	t.Parallel()
	cloud := newGCECLICloud(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runGCEBuilderAgent(ctx, t, cloud, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	cat := filepath.Join(cloud.dir, "images.yaml")
	recipe := writeGCERecipe(t, cloud.dir, cliVersions())
	build := func() imagecatalog.BuildResult {
		t.Helper()
		out, progress, err := runImagesSplit(t, "build", "--recipe", recipe, "--catalog", cat, "--config", cloud.config,
			"--poll", "5ms", "--timeout", "20s", "-o", "json")
		if err != nil {
			t.Fatalf("build: %v\nprogress:\n%s", err, progress)
		}
		var res []imagecatalog.BuildResult
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 {
			t.Fatalf("build -o json: %v\n%s", err, out)
		}
		return res[0]
	}
	res := build()
	if !res.Built || res.Image.Provider != "gce" || res.Image.Location != "" || res.Image.ID != res.Image.Name {
		t.Fatalf("first build = %+v, want a gce image, global, whose id is its name", res)
	}
	if d := cmp.Diff(imagecatalog.DefaultManifest(cliVersions()), res.Image.Manifest); d != "" {
		t.Errorf("built manifest (-requested +got):\n%s", d)
	}
	if d := cmp.Diff([]string{res.Image.ID}, cloud.imageNames(t)); d != "" {
		t.Errorf("images in the fake (-want +got):\n%s", d)
	}
	l := cloud.imageLabels(t, res.Image.ID)
	for k, v := range map[string]string{"prebake.dev/channel-candidate": "current", imagecatalog.LabelVerified: "true",
		imagecatalog.LabelInputsHash: res.Image.InputsHash, imagecatalog.LabelName: res.Image.Name, "prebake.dev/pkg-kubelet": "1_d34_d2-1_d1"} {
		if l[k] != v {
			t.Errorf("image label %s = %q, want %q (labels %v)", k, l[k], v, l)
		}
	}
	if in := cloud.fake.Instances(); len(in) != 0 {
		t.Errorf("instances after the build: %+v, want the builder deleted", in)
	}
	out, _, err := runImagesSplit(t, "resolve", "--catalog", cat, "--channel", "candidate", "--provider", "gce")
	if err != nil || out != res.Image.ID+"\n" {
		t.Errorf("resolve candidate = %q, %v; want %s", out, err, res.Image.ID)
	}

	inserts := cloud.fake.Calls(http.MethodPost, "/instances")
	again := build()
	if again.Built || again.Image.ID != res.Image.ID || cloud.fake.Calls(http.MethodPost, "/instances") != inserts {
		t.Errorf("second build = %+v (%d new instances), want nothing built", again, cloud.fake.Calls(http.MethodPost, "/instances")-inserts)
	}
	if n := len(cloud.imageNames(t)); n != 1 {
		t.Errorf("%d images, want 1", n)
	}
}
