package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

// testReport is a report that passes imagecatalog.Verify for spec.
func testReport(t *testing.T, spec imagecatalog.BuildSpec) []byte {
	t.Helper()
	r := imagecatalog.Report{Status: "done", Observed: spec.Manifest(), Hygiene: map[string]bool{}}
	for _, h := range imagecatalog.HygieneChecks {
		r.Hygiene[h] = true
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func testVersions() map[string]string {
	vs := map[string]string{}
	for _, c := range imagecatalog.DefaultComponents {
		vs[c] = "1.0.0-1"
	}
	vs["kubelet"], vs["kubeadm"], vs["kubectl"] = "1.35.4-1.1", "1.35.4-1.1", "1.35.4-1.1"
	return vs
}

// TestBuildPromoteRollbackGC is `prebake images build`, promote, rollback
// and gc against the engine: the builder is a container booted from the
// base image with the builder's user-data (the sleeper plays cloud-init
// and the seal step: it writes the report where bootstrap's seal does),
// its report is read out of it, it is committed as an image named and
// labelled by the catalog, and removed. A second build of the same inputs
// builds nothing. Channel labels move with promote and rollback, and gc
// deletes only what no channel keeps and no machine runs.
func TestBuildPromoteRollbackGC(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	base := sleeperImage(t, c)
	o := testOptions(t, base)
	p := newTestProvider(t, o)
	ctx := context.Background()
	store := imagecatalog.FileStore{Path: filepath.Join(t.TempDir(), "catalog.yaml")}
	clock := time.Date(2026, 12, 1, 15, 4, 0, 0, time.UTC)
	// variant changes the user-data (so the inputs) without changing the
	// report: trailing blanks after its JSON.
	build := func(variant int) imagecatalog.BuildResult {
		t.Helper()
		spec := imagecatalog.BuildSpec{
			OS: "debian", OSVersion: "12", K8s: imagecatalog.Version{Major: 1, Minor: 35, Patch: 4}, Arch: hostArch(),
			Provider: "docker", BaseImage: base, MachineType: testMachineType.Name, Components: testVersions(),
		}
		spec.UserData = append([]byte("#prebake-test-report\n"), testReport(t, spec)...)
		spec.UserData = append(spec.UserData, strings.Repeat(" ", variant)...)
		clock = clock.Add(time.Hour)
		now := clock
		var progress bytes.Buffer
		res, err := imagecatalog.Build(ctx, p, store, spec, imagecatalog.BuildOptions{
			Poll: 100 * time.Millisecond, Timeout: time.Minute, Progress: &progress, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatalf("build: %v\nprogress:\n%s", err, progress.String())
		}
		return res
	}
	first := build(0)
	if !first.Built || first.Image.ID != first.Image.Name {
		t.Fatalf("first build %+v: want an image whose id is its name", first)
	}
	// The builder is gone; the image is a tag of the repository, labelled.
	if cs, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", imagecatalog.LabelBuilder))}); containsPrefix(cs, o.NamePrefix) {
		t.Errorf("a builder container is left: %+v", cs)
	}
	ci, err := p.GetImage(ctx, first.Image.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := imagecatalog.Labels(first.Image)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if ci.Labels[k] != v {
			t.Errorf("image label %s = %q, want %q", k, ci.Labels[k], v)
		}
	}
	if ci.Labels["prebake.dev/channel-candidate"] != "current" {
		t.Errorf("image labels %v: want it current in candidate", ci.Labels)
	}
	if _, ok := ci.Labels[imagecatalog.LabelBuilder]; ok {
		t.Errorf("the builder's label stayed on the image: %v", ci.Labels)
	}
	inspect, err := c.ImageInspect(ctx, o.ImageRepository+":"+first.Image.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inspect.Config.Labels[imagecatalog.LabelInputsHash] != first.Image.InputsHash || len(inspect.Config.Entrypoint) != 1 || inspect.Config.Entrypoint[0] != baseimage.InitPath {
		t.Errorf("committed image config: labels %v entrypoint %v", inspect.Config.Labels, inspect.Config.Entrypoint)
	}

	// The builder's volume is gone, and its content (containerd's root) is in the image:
	// a machine booted from it finds it on its own new volume.
	if vols, err := c.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", imagecatalog.LabelBuilder))}); err != nil {
		t.Fatal(err)
	} else {
		for _, v := range vols.Volumes {
			if strings.HasPrefix(v.Name, o.NamePrefix) {
				t.Errorf("the builder's volume %s is left", v.Name)
			}
		}
	}
	baked, err := p.Create(ctx, providers.CreateRequest{Name: "workers-baked", Group: "workers", MachineType: testMachineType.Name,
		Location: "zone-a", Image: first.Image.ID, ImageKind: providers.ImagePrebaked, UserData: []byte("#cloud-config\n")})
	if err != nil {
		t.Fatal(err)
	}
	if _, body := readFile(t, c, o.NamePrefix+"workers-baked", baseimage.ContainerdDir+"/prebake-test-content"); string(body) != "baked\n" {
		t.Errorf("containerd content of a machine of the image = %q, want the builder's", body)
	}
	if err := p.Delete(ctx, baked.ProviderID); err != nil {
		t.Fatal(err)
	}

	again := build(0)
	if again.Built || again.Image.ID != first.Image.ID {
		t.Fatalf("second build of the same inputs: %+v, want image %s and nothing built", again, first.Image.ID)
	}

	second := build(1)
	if !second.Built || second.Image.ID == first.Image.ID {
		t.Fatalf("build of new inputs: %+v", second)
	}
	cat, rev, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := second.Image.Key()
	promote := func(id string) {
		t.Helper()
		next, _, err := imagecatalog.Promote(cat, "stable", id, clock)
		if err != nil {
			t.Fatal(err)
		}
		if rev, err = store.Save(ctx, next, rev); err != nil {
			t.Fatal(err)
		}
		cat = next
		if _, err := imagecatalog.PushLabels(ctx, p, cat, "docker", ""); err != nil {
			t.Fatal(err)
		}
	}
	promote(first.Image.ID)
	promote(second.Image.ID)
	labelsOf := func(id string) map[string]string {
		t.Helper()
		ci, err := p.GetImage(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return ci.Labels
	}
	if l := labelsOf(second.Image.ID); l["prebake.dev/channel-stable"] != "current" {
		t.Errorf("after promote, the new image's stable label is %q", l["prebake.dev/channel-stable"])
	}
	if l := labelsOf(first.Image.ID); l["prebake.dev/channel-stable"] != "history-1" || l["prebake.dev/channel-candidate"] != "history-1" {
		t.Errorf("after promote, the old image's labels %v", l)
	}
	next, err := imagecatalog.Rollback(cat, "stable", key, "test", clock)
	if err != nil {
		t.Fatal(err)
	}
	if rev, err = store.Save(ctx, next, rev); err != nil {
		t.Fatal(err)
	}
	cat = next
	if _, err := imagecatalog.PushLabels(ctx, p, cat, "docker", ""); err != nil {
		t.Fatal(err)
	}
	if l := labelsOf(first.Image.ID); l["prebake.dev/channel-stable"] != "current" {
		t.Errorf("after rollback, the old image's stable label is %q", l["prebake.dev/channel-stable"])
	}
	// Sync rebuilds the channels from the labels alone.
	synced, errs := imagecatalog.Sync(ctx, p, "docker", "", clock)
	if len(errs) > 0 {
		t.Fatalf("sync: %v", errs)
	}
	if ch, ok := synced.Channel("stable", key); !ok || ch.Image != first.Image.ID {
		t.Errorf("synced stable = %+v, %v; want %s", ch, ok, first.Image.ID)
	}
	// No label record is left behind by the relabelling.
	if dangling, _ := c.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("dangling", "true"), filters.Arg("label", LabelLabelsOf+"="+first.Image.ID))}); len(dangling) > 0 {
		t.Errorf("%d replaced label records left", len(dangling))
	}

	// gc: a machine runs the second image and stable keeps the first; a
	// third image that candidate moved past (history is not kept) goes.
	third := build(2)
	cat, rev, err = store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cat, _, err = imagecatalog.Promote(cat, "candidate", second.Image.ID, clock); err != nil {
		t.Fatal(err)
	}
	req := request("workers-gc001")
	req.Image, req.ImageKind = second.Image.ID, providers.ImagePrebaked
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, plan, err := imagecatalog.GC(ctx, p, p, cat, imagecatalog.GCOptions{KeepHistory: 0}); err != nil || !cmp.Equal(plan.Delete, []string{third.Image.ID}) {
		t.Fatalf("gc deleted %v (%v), want only %s", plan.Delete, err, third.Image.ID)
	}
	for _, id := range []string{first.Image.ID, second.Image.ID} {
		if _, err := p.GetImage(ctx, id); err != nil {
			t.Errorf("gc deleted %s, which a channel or a machine keeps: %v", id, err)
		}
	}
	if _, err := p.GetImage(ctx, third.Image.ID); !errors.Is(err, imagecatalog.ErrNotFound) {
		t.Errorf("gc's deleted image %s is still there (%v)", third.Image.ID, err)
	}
	if _, err := c.ImageInspect(ctx, p.recordRef(third.Image.ID)); !cerrdefs.IsNotFound(err) {
		t.Errorf("the label record of deleted %s is left (%v)", third.Image.ID, err)
	}
	_ = rev
}

func containsPrefix(cs []container.Summary, prefix string) bool {
	for _, ct := range cs {
		for _, n := range ct.Names {
			if strings.HasPrefix(strings.TrimPrefix(n, "/"), prefix) {
				return true
			}
		}
	}
	return false
}

// TestBuilderReport: no report while the builder runs without one; a
// report older than the builder's start (the base image's) is not this
// build's; the seal step's report is read as written; a builder that
// stopped without one is unusable.
func TestBuilderReport(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	p := newTestProvider(t, o)
	ctx := context.Background()
	spec := imagecatalog.BuilderSpec{Name: "prebake-builder-test", MachineType: testMachineType.Name,
		UserData: []byte("#cloud-config\n"), Labels: map[string]string{imagecatalog.LabelBuilder: "abc"}}
	b, err := p.BootBuilder(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.DeleteBuilder(context.Background(), b.ID) })
	if b.Status != "running" || b.Labels[imagecatalog.LabelBuilder] != "abc" || b.Labels[providers.LabelCluster] != "" {
		t.Fatalf("builder %+v: want it running, labelled as a builder and by no cluster", b)
	}
	if again, err := p.BootBuilder(ctx, spec); err != nil || again.ID != b.ID {
		t.Fatalf("BootBuilder again = %+v, %v; want the same builder", again, err)
	}
	if listed, err := p.List(ctx); err != nil || len(listed) != 0 {
		t.Fatalf("List shows the builder: %+v, %v", listed, err)
	}
	if _, ok, err := p.BuilderReport(ctx, b); ok || err != nil {
		t.Fatalf("report before any: ok %v, err %v", ok, err)
	}
	write := func(body string, mod time.Time) {
		t.Helper()
		tarball, err := seedArchive([]seedFile{{bootstrap.BuildReportPath, 0o644, []byte(body)}}, mod)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CopyToContainer(ctx, b.ID, "/", bytes.NewReader(tarball), container.CopyToContainerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"status":"done"}`, time.Now().Add(-24*time.Hour))
	if _, ok, err := p.BuilderReport(ctx, b); ok || err != nil {
		t.Fatalf("a report older than the builder was taken: ok %v, err %v", ok, err)
	}
	const body = `{"status":"done","observed":{},"hygiene":{}}` + "\n"
	write(body, time.Now())
	got, ok, err := p.BuilderReport(ctx, b)
	if err != nil || !ok || string(got) != body {
		t.Fatalf("report = %q, %v, %v; want %q", got, ok, err, body)
	}
	timeout := 10
	if err := c.ContainerStop(ctx, b.ID, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.BuilderReport(ctx, b); !errors.Is(err, imagecatalog.ErrBuilderUnusable) {
		t.Fatalf("report of a stopped builder: %v, want ErrBuilderUnusable", err)
	}
	if err := p.DeleteBuilder(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteBuilder(ctx, b.ID); err != nil {
		t.Errorf("DeleteBuilder of a gone builder: %v", err)
	}
	if _, err := p.Builder(ctx, b.ID); !errors.Is(err, imagecatalog.ErrNotFound) {
		t.Errorf("Builder of a deleted one: %v, want ErrNotFound", err)
	}
}

// untaggedRecord leaves an untagged label record in p's repository, as a relabel whose
// removal of the old record failed does, and returns its image ID.
func untaggedRecord(t *testing.T, p *Provider, c *client.Client) string {
	t.Helper()
	ctx := context.Background()
	const id = "prebake-replaced"
	if err := p.importRecord(ctx, id, map[string]string{"gen": "old"}); err != nil {
		t.Fatal(err)
	}
	old, err := c.ImageInspect(ctx, p.recordRef(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.importRecord(ctx, id, map[string]string{"gen": "new"}); err != nil { // takes the tag
		t.Fatal(err)
	}
	if _, err := c.ImageRemove(ctx, p.recordRef(id), image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	return old.ID
}

// TestLabelRecords: labels with characters Dockerfile syntax cares about
// survive a record; a record replaces the image's own labels; an image
// that is gone leaves its record to Cleanup.
func TestLabelRecords(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	base := sleeperImage(t, c)
	o := testOptions(t, base)
	p := newTestProvider(t, o)
	ctx := context.Background()
	const id = "prebake-debian-12-k8s-1-35-4-amd64-20261201t0000"
	if err := c.ImageTag(ctx, base, o.ImageRepository+":"+id); err != nil {
		t.Fatal(err)
	}
	ci, err := p.GetImage(ctx, id)
	if err != nil || ci.Labels[labelTest] != "providers-docker" {
		t.Fatalf("GetImage before any record = %+v, %v; want the image's own labels", ci, err)
	}
	odd := map[string]string{"prebake.dev/name": "x", "user/quote": `say "hi" \ $HOME ${X}`, "spaces": "a b  c", "empty": ""}
	if err := p.SetLabels(ctx, id, odd); err != nil {
		t.Fatal(err)
	}
	ci, err = p.GetImage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(odd, ci.Labels); d != "" {
		t.Errorf("labels after SetLabels (-want +got):\n%s", d)
	}
	listed, err := p.ListImages(ctx, map[string]string{"spaces": "a b  c"})
	if err != nil || len(listed) != 1 || listed[0].ID != id {
		t.Fatalf("ListImages by a record label = %+v, %v", listed, err)
	}
	if listed, _ := p.ListImages(ctx, map[string]string{labelTest: "providers-docker"}); len(listed) != 0 {
		t.Errorf("ListImages matched the image's replaced label: %+v", listed)
	}
	fewer := maps.Clone(odd)
	delete(fewer, "spaces")
	if err := p.SetLabels(ctx, id, fewer); err != nil {
		t.Fatal(err)
	}
	if ci, _ := p.GetImage(ctx, id); !cmp.Equal(fewer, ci.Labels) {
		t.Errorf("a label removed by SetLabels is still there: %v", ci.Labels)
	}
	if err := p.SetLabels(ctx, "prebake-no-such-image", nil); !errors.Is(err, imagecatalog.ErrNotFound) {
		t.Errorf("SetLabels of a missing image: %v, want ErrNotFound", err)
	}
	if err := p.SetLabels(ctx, id, map[string]string{"x": "a\nb"}); err == nil {
		t.Error("SetLabels took a value with a line break")
	}
	// A replaced record left untagged (its removal failed) is this repository's garbage;
	// another repository's, such as another cluster's, is not.
	ours := untaggedRecord(t, p, c)
	theirs := untaggedRecord(t, newTestProvider(t, testOptions(t, base)), c)
	// The image goes behind the catalog's back: Cleanup removes its record.
	if _, err := c.ImageRemove(ctx, o.ImageRepository+":"+id, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	removed, err := p.Cleanup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"label record " + ours, "label record " + p.recordRef(id)}; !cmp.Equal(want, removed) {
		t.Errorf("Cleanup removed %v, want %v", removed, want)
	}
	if _, err := c.ImageInspect(ctx, theirs); err != nil {
		t.Errorf("Cleanup removed another repository's replaced record: %v", err)
	}
	if err := p.DeleteImage(ctx, id); err != nil {
		t.Errorf("DeleteImage of a gone image: %v", err)
	}
	if err := p.DeleteImage(ctx, "not a tag"); err == nil {
		t.Error("DeleteImage took an id that is no tag")
	}
}
