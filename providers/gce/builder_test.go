package gce

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

const (
	baseImage   = "projects/" + gcefake.UbuntuProject + "/global/images/family/" + gcefake.UbuntuFamilyAMD64
	reportPath  = "/computeMetadata/v1/instance/guest-attributes/" + ReportNamespace + "/" + ReportKey
	builderHash = "0123456789abcdef0123456789abcdef"
)

func builderSpec(name string) imagecatalog.BuilderSpec {
	return imagecatalog.BuilderSpec{Name: name, BaseImage: baseImage, MachineType: "e2-standard-2", Location: testZone,
		UserData: []byte("#cloud-config\nruncmd: [install]\n"),
		// The cluster label must not reach the builder, whoever asks.
		Labels: map[string]string{imagecatalog.LabelBuilder: builderHash, providers.LabelCluster: "c"}}
}

// putGuest sends a request to the instance's metadata server, as its guest
// would, and returns the status.
func putGuest(t *testing.T, f *gcefake.Fake, instance, body string, header map[string]string) int {
	t.Helper()
	base, err := f.MetadataURL(instance)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, base+reportPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

var flavor = map[string]string{"Metadata-Flavor": "Google"}

func fakeInstance(t *testing.T, f *gcefake.Fake, name string) (gcefake.Instance, bool) {
	t.Helper()
	for _, in := range f.Instances() {
		if in.Name == name {
			return in, true
		}
	}
	return gcefake.Instance{}, false
}

// The whole life of a builder: boot (idempotent, outside the cluster), no
// report, the guest writes one, the report is read, the builder is imaged
// into a labelled image, deleted, and gone.
func TestBuilderLifecycle(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()

	b, err := p.BootBuilder(ctx, builderSpec("prebake-builder-amd64-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	wantID := "gce://" + f.Project() + "/" + testZone + "/prebake-builder-amd64-0123456789abcdef"
	if b.ID != wantID || b.Labels[imagecatalog.LabelBuilder] != builderHash {
		t.Errorf("BootBuilder = %+v, want id %s and the builder label", b, wantID)
	}
	in, ok := fakeInstance(t, f, "prebake-builder-amd64-0123456789abcdef")
	if !ok {
		t.Fatal("no builder instance in the fake")
	}
	got := map[string]any{"labels": in.Labels, "enable-guest-attributes": in.Metadata["enable-guest-attributes"],
		"user-data": in.UserData, "serviceAccounts": len(in.ServiceAccounts), "externalNAT": in.ExternalNAT, "image": in.SourceImage}
	want := map[string]any{"labels": map[string]string{"prebake-dev_builder": builderHash}, "enable-guest-attributes": "TRUE",
		"user-data": "#cloud-config\nruncmd: [install]\n", "serviceAccounts": 0, "externalNAT": true,
		"image": "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20261101"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("builder instance (-want +got):\n%s", d)
	}
	if l, err := p.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("List = %v, %v; the builder must not be a cluster instance", l, err)
	}
	inserts := f.Calls(http.MethodPost, "/instances")
	again, err := p.BootBuilder(ctx, builderSpec("prebake-builder-amd64-0123456789abcdef"))
	if err != nil || again.ID != b.ID || f.Calls(http.MethodPost, "/instances") != inserts {
		t.Errorf("second BootBuilder = %+v, %v, %d new inserts; want the same builder, none", again, err, f.Calls(http.MethodPost, "/instances")-inserts)
	}

	if r, ok, err := p.BuilderReport(ctx, b); err != nil || ok || r != nil {
		t.Fatalf("BuilderReport before the guest wrote = %q, %v, %v; want none, no error", r, ok, err)
	}
	report := `{"status":"done","observed":{"components":{"kubelet":"1.34.2-1.1"}},"hygiene":{"machine-id":true}}`
	if code := putGuest(t, f, in.Name, report, flavor); code != http.StatusOK {
		t.Fatalf("the guest's PUT = %d", code)
	}
	r, ok, err := p.BuilderReport(ctx, b)
	if err != nil || !ok || string(r) != report {
		t.Fatalf("BuilderReport = %q, %v, %v; want the report", r, ok, err)
	}

	name := "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504"
	labels := map[string]string{imagecatalog.LabelName: name, imagecatalog.LabelInputsHash: builderHash, imagecatalog.LabelVerified: "true"}
	im, err := p.Snapshot(ctx, b.ID, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	if im.ID != name || im.Description != name || !cmp.Equal(im.Labels, labels) || im.Created.IsZero() {
		t.Errorf("Snapshot = %+v, want image %s with the labels %v", im, name, labels)
	}
	images := f.Images()
	if len(images) != 1 || images[0].Status != "READY" || !strings.HasSuffix(images[0].SourceDisk, "/zones/"+testZone+"/disks/"+in.Name) ||
		images[0].Labels["prebake-dev_image-name"] != name {
		t.Errorf("images in the fake = %+v, want one READY image of the builder's disk, labels in GCE form", images)
	}
	if in, _ := fakeInstance(t, f, in.Name); in.Status != "TERMINATED" {
		t.Errorf("builder status after Snapshot = %s, want TERMINATED", in.Status)
	}
	if got, err := p.GetImage(ctx, name); err != nil || !cmp.Equal(got, im) {
		t.Errorf("GetImage = %+v, %v; want what Snapshot returned", got, err)
	}

	if err := p.DeleteBuilder(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := fakeInstance(t, f, in.Name); ok {
		t.Error("the builder exists after DeleteBuilder")
	}
	if err := p.DeleteBuilder(ctx, b.ID); err != nil {
		t.Errorf("deleting a deleted builder: %v", err)
	}
	if _, err := p.Builder(ctx, b.ID); !errors.Is(err, imagecatalog.ErrNotFound) {
		t.Errorf("Builder after delete: %v, want ErrNotFound", err)
	}
	if _, err := p.GetImage(ctx, "no-such-image"); !errors.Is(err, imagecatalog.ErrNotFound) {
		t.Errorf("GetImage of a missing image: %v, want ErrNotFound", err)
	}
}

// The metadata server refuses a guest that leaves out Metadata-Flavor, and
// guest attributes on an instance that did not turn them on (a node made by
// Create); the builder's report stays unread.
func TestBuilderMetadataServerRefuses(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	b, err := p.BootBuilder(ctx, builderSpec("builder-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, request("g-1", "g", "e2-standard-2", testZone)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, instance string
		header         map[string]string
		want           int
	}{
		{"builder without Metadata-Flavor", "builder-1", nil, http.StatusForbidden},
		{"node without enable-guest-attributes", "g-1", flavor, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := putGuest(t, f, tc.instance, `{"status":"done"}`, tc.header); code != tc.want {
				t.Errorf("PUT = %d, want %d", code, tc.want)
			}
		})
	}
	if r, ok, err := p.BuilderReport(ctx, b); err != nil || ok {
		t.Errorf("BuilderReport after refused writes = %q, %v, %v; want none", r, ok, err)
	}
}

// A failing getGuestAttributes is an error for the caller to retry, not
// "no report yet"; once the API answers again the report is read. (503 is
// retried inside the client library, so it never surfaces.)
func TestBuilderReportErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   gcefake.Fault
		wantErr bool
	}{
		{"500 backendError", gcefake.ErrBackend, true},
		{"429 rateLimitExceeded", gcefake.ErrRateLimited429, true},
		{"403 rateLimitExceeded", gcefake.ErrRateLimited403, true},
		{"503 retried by the client", gcefake.ErrUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, gcefake.Options{})
			p := newTestProvider(t, f)
			ctx := context.Background()
			b, err := p.BootBuilder(ctx, builderSpec("builder-1"))
			if err != nil {
				t.Fatal(err)
			}
			if code := putGuest(t, f, "builder-1", `{"status":"done"}`, flavor); code != http.StatusOK {
				t.Fatalf("PUT = %d", code)
			}
			f.Fail(http.MethodGet, "zones/"+testZone+"/instances/builder-1/getGuestAttributes", 1, tc.fault)
			r, ok, err := p.BuilderReport(ctx, b)
			if tc.wantErr {
				if err == nil || ok || !strings.Contains(err.Error(), "builder-1") || !strings.Contains(err.Error(), testZone) {
					t.Fatalf("BuilderReport with %s = %q, %v, %v; want an error naming the builder and zone", tc.name, r, ok, err)
				}
				if !p.Classify(err).Retryable {
					t.Errorf("%v is not classified retryable", err)
				}
				r, ok, err = p.BuilderReport(ctx, b)
			}
			if err != nil || !ok || string(r) != `{"status":"done"}` {
				t.Errorf("BuilderReport = %q, %v, %v; want the report", r, ok, err)
			}
		})
	}
}

// A builder's zone: the spec's, else Options.BuilderZone, else an error
// saying what to set.
func TestBootBuilderZone(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	spec := builderSpec("builder-1")
	spec.Location = ""
	if _, err := p.BootBuilder(ctx, spec); err == nil || !strings.Contains(err.Error(), "builderLocation") {
		t.Errorf("BootBuilder without a zone: %v, want an error naming builderLocation", err)
	}
	p.o.BuilderZone = "us-central1-f"
	b, err := p.BootBuilder(ctx, spec)
	if err != nil || !strings.Contains(b.ID, "/us-central1-f/") {
		t.Errorf("BootBuilder with BuilderZone = %+v, %v; want it in us-central1-f", b, err)
	}
	spec.MachineType = "no-such-type"
	spec.Name = "builder-2"
	if _, err := p.BootBuilder(ctx, spec); err == nil || !strings.Contains(err.Error(), "machineType") {
		t.Errorf("BootBuilder of a type not sold: %v, want an error naming machineType", err)
	}
}

// A builder name that names a cluster node is refused, by boot and by
// delete: the node stays.
func TestBuilderRefusesClusterInstances(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	node, err := p.Create(ctx, request("g-1", "g", "e2-standard-2", testZone))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.BootBuilder(ctx, builderSpec("g-1")); err == nil || !strings.Contains(err.Error(), "not a builder") {
		t.Errorf("BootBuilder over a node: %v", err)
	}
	if err := p.DeleteBuilder(ctx, node.ProviderID); err == nil || !strings.Contains(err.Error(), "not a builder") {
		t.Errorf("DeleteBuilder of a node: %v", err)
	}
	if _, ok := fakeInstance(t, f, "g-1"); !ok {
		t.Error("the node is gone")
	}
	if _, err := p.Builder(ctx, "gce://another-project/"+testZone+"/b"); err == nil || !strings.Contains(err.Error(), "another-project") {
		t.Errorf("Builder in another project: %v", err)
	}
}

func TestImageName(t *testing.T) {
	t.Parallel()
	valid := "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504"
	if got := imageName(valid); got != valid {
		t.Errorf("imageName(%q) = %q, want it unchanged", valid, got)
	}
	long := strings.Repeat("Very Long Description ", 10)
	for _, tc := range []struct{ in, want string }{
		{"Ubuntu 24.04 / k8s 1.34", `^prebake-ubuntu-24-04-k8s-1-34-[0-9a-f]{8}$`},
		{"", `^prebake-[0-9a-f]{8}$`},
		{"-9lives-", `^prebake-9lives-[0-9a-f]{8}$`},
		{long, `^prebake-very-long-description-very-long-description-[-a-z]*[0-9a-f]{8}$`},
	} {
		got := imageName(tc.in)
		if !regexp.MustCompile(tc.want).MatchString(got) || !gceNameRE.MatchString(got) || len(got) > 63 {
			t.Errorf("imageName(%q) = %q, want a valid GCE name matching %s", tc.in, got, tc.want)
		}
	}
	if imageName(long) == imageName(long+"x") {
		t.Error("two long descriptions with the same first 54 characters give the same name")
	}
}

// TestReportAttributeIsBootstrapsOwn: the guest attribute BuilderReport reads is the one
// bootstrap's GCE builder puts its report to (bootstrap's seal-wait test proves the PUT, with
// the metadata server's header, against a server on loopback).
func TestReportAttributeIsBootstrapsOwn(t *testing.T) {
	if got := ReportNamespace + "/" + ReportKey; got != bootstrap.GCEReportAttribute {
		t.Fatalf("gce reads guest attribute %s, bootstrap's builder writes %s", got, bootstrap.GCEReportAttribute)
	}
	ud, err := bootstrap.RenderBuilder(bootstrap.BuilderInput{Provider: "gce", Components: []bootstrap.Component{{Name: "socat", Version: "1.7.4.4-2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ud.Script), "computeMetadata/v1/instance/guest-attributes/"+ReportNamespace+"/"+ReportKey) ||
		!strings.Contains(string(ud.CloudConfig), "seal-later") {
		t.Error("the rendered GCE builder neither starts seal-later nor puts to the report attribute")
	}
}
