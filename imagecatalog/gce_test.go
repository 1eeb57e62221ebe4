package imagecatalog_test

// The acceptance scenario against the Compute Engine fake, through the
// provider's image API (providers/gce), which drives the real compute REST
// clients: real images made from disks, real label filters, real deletes.

import (
	"context"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers/gce"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

type gceCloud struct {
	fake      *gcefake.Fake
	clock     *gcefake.Clock
	provider  *gce.Provider
	instances *compute.InstancesClient
	images    *compute.ImagesClient
}

func newGceCloud(t *testing.T) gceCloud {
	t.Helper()
	ctx := t.Context()
	clk := gcefake.NewClock(time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC))
	f := gcefake.New(gcefake.Options{Now: clk.Now})
	t.Cleanup(f.Close)
	p, err := gce.New(ctx, gce.Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "test", Rate: 1000, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
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
	return gceCloud{fake: f, clock: clk, provider: p, instances: ic, images: imc}
}

// insert creates an instance and waits for its operation (DONE at once: the
// fake's clock only moves when the test moves it, and its operations take 0s).
func (gc gceCloud) insert(t *testing.T, ctx context.Context, name, image string, labels map[string]string) {
	t.Helper()
	op, err := gc.instances.Insert(ctx, &computepb.InsertInstanceRequest{Project: gc.fake.Project(), Zone: "europe-west4-a",
		InstanceResource: &computepb.Instance{
			Name: proto.String(name), MachineType: proto.String("zones/europe-west4-a/machineTypes/e2-standard-2"), Labels: labels,
			Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
				InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(image)}}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !op.Done() || op.Proto().GetError() != nil {
		t.Fatalf("insert %s: operation %v", name, op.Proto())
	}
}

// publish images a builder's disk and publishes the image, labelled, to
// the catalog. (The real build also boots, verifies and cleans the builder;
// that is a later increment.) A GCE image's id is its name.
func (gc gceCloud) publish(t *testing.T, ctx context.Context, c imagecatalog.Catalog) (imagecatalog.Catalog, string) {
	t.Helper()
	gc.clock.Advance(time.Hour)
	now := gc.clock.Now()
	im := imagecatalog.Image{
		Name:     imagecatalog.Name{OS: "ubuntu", OSVersion: "2404", K8s: imagecatalog.Version{Major: 1, Minor: 34, Patch: 2}, Arch: "amd64", Built: now}.String(),
		Provider: "gce", Created: now, Manifest: imagecatalog.DefaultManifest(exactVersions()),
		Verified: &imagecatalog.Event{At: now, Reason: "test"},
	}
	im.InputsHash = imagecatalog.InputsHash(imagecatalog.Inputs{BaseImage: gcefake.UbuntuFamilyAMD64, Manifest: im.Manifest, ScriptVersion: now.String()})
	labels, err := imagecatalog.Labels(im)
	if err != nil {
		t.Fatal(err)
	}
	gc.insert(t, ctx, "builder", "projects/"+gcefake.UbuntuProject+"/global/images/family/"+gcefake.UbuntuFamilyAMD64, nil)
	op, err := gc.images.Insert(ctx, &computepb.InsertImageRequest{Project: gc.fake.Project(), ForceCreate: proto.Bool(true),
		ImageResource: &computepb.Image{Name: proto.String(im.Name), SourceDisk: proto.String("zones/europe-west4-a/disks/builder"),
			Family: proto.String("prebake-candidate-amd64"), Labels: gce.ToGCE(labels)}})
	if err != nil {
		t.Fatal(err)
	}
	if !op.Done() || op.Proto().GetError() != nil {
		t.Fatalf("image insert: operation %v", op.Proto())
	}
	if _, err := gc.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: gc.fake.Project(), Zone: "europe-west4-a", Instance: "builder"}); err != nil {
		t.Fatal(err)
	}
	im.ID = im.Name
	c, err = imagecatalog.Publish(c, im)
	if err != nil {
		t.Fatal(err)
	}
	return c, im.ID
}

func TestAcceptanceScenarioGceFake(t *testing.T) {
	t.Parallel()
	for _, liveOnC := range []bool{false, true} {
		name := map[bool]string{false: "no live instance", true: "live instance on C"}[liveOnC]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gc := newGceCloud(t)
			api := gc.provider.ImageCatalog()
			s := runGCScenario(t, scenarioCloud{provider: "gce", api: api, lister: api, now: gc.clock.Now, publish: gc.publish,
				bootFrom: func(t *testing.T, ctx context.Context, id string) {
					gc.insert(t, ctx, "node-1", "projects/"+gc.fake.Project()+"/global/images/"+id,
						gce.ToGCE(map[string]string{"prebake.dev/cluster": "test", "prebake.dev/image": id}))
				}}, liveOnC)

			// The labels went to GCE keys and back; GCE images have no
			// delete protection, so none is reported protected; the fake
			// holds exactly what gc kept.
			ctx := context.Background()
			cloud, err := api.ListImages(ctx, map[string]string{imagecatalog.LabelOS: "ubuntu-2404"})
			if err != nil {
				t.Fatal(err)
			}
			for _, im := range cloud {
				if im.Protected || im.Labels[imagecatalog.LabelName] != im.ID {
					t.Errorf("image %s: protected %v, labels %v", im.ID, im.Protected, im.Labels)
				}
			}
			var inFake []string
			for _, im := range gc.fake.Images() {
				inFake = append(inFake, s.letter[im.Name])
			}
			if d := cmp.Diff(s.wantKept, inFake); d != "" {
				t.Errorf("images in the fake (-want +got):\n%s", d)
			}
			// Deleting what gc deleted again is not an error.
			if err := api.DeleteImage(ctx, s.ids["E"]); err != nil {
				t.Errorf("deleting a deleted image: %v", err)
			}
		})
	}
}

// SetLabels goes through the label fingerprint (the fake refuses a stale
// one with 412) and maps the keys to GCE form and back.
func TestGceSetLabels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gc := newGceCloud(t)
	_, id := gc.publish(t, ctx, imagecatalog.Catalog{})
	api := gc.provider.ImageCatalog()
	want := map[string]string{imagecatalog.LabelName: id, imagecatalog.LabelVerified: "true", "team": "infra"}
	if err := api.SetLabels(ctx, id, want); err != nil {
		t.Fatal(err)
	}
	got, err := api.ListImages(ctx, map[string]string{"team": "infra"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("images labelled team=infra: %+v", got)
	}
	if d := cmp.Diff(want, got[0].Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"prebake-dev_image-name": id, "prebake-dev_verified": "true", "team": "infra"}, gc.fake.Images()[0].Labels); d != "" {
		t.Errorf("labels in GCE form (-want +got):\n%s", d)
	}
}
