package autoscaling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

var catalogT0 = time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC)

// catalogImage is a verified image of the fake provider, built i hours after
// catalogT0, for k8s 1.35.4 on arch.
func catalogImage(id string, i int, arch string) imagecatalog.Image {
	built := catalogT0.Add(time.Duration(i) * time.Hour)
	n := imagecatalog.Name{OS: "ubuntu", OSVersion: "2404", K8s: imagecatalog.Version{Major: 1, Minor: 35, Patch: 4}, Arch: arch, Built: built}
	versions := map[string]string{}
	for _, c := range imagecatalog.DefaultComponents {
		versions[c] = "1.0-1"
	}
	return imagecatalog.Image{
		ID: id, Name: n.String(), Provider: "fake", InputsHash: strings.Repeat("b", imagecatalog.InputsHashLen-1) + string(rune('0'+i)),
		Created: built, Manifest: imagecatalog.DefaultManifest(versions), Verified: &imagecatalog.Event{At: built},
	}
}

// memCatalog is a CatalogSource the test edits between syncs.
type memCatalog struct {
	mu  sync.Mutex
	c   imagecatalog.Catalog
	err error
}

func (m *memCatalog) LoadCatalog(context.Context) (imagecatalog.Catalog, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c, m.err
}

func (m *memCatalog) set(c imagecatalog.Catalog, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.c, m.err = c, err
}

// recordedEvents is an EventSink that keeps what it is sent.
type recordedEvents struct {
	mu      sync.Mutex
	fb      []Fallback
	missing []MissingImages
}

func (r *recordedEvents) ImageMissingContainerImages(_ context.Context, m MissingImages) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.missing = append(r.missing, m)
}

func (r *recordedEvents) allMissing() []MissingImages {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]MissingImages(nil), r.missing...)
}

func (r *recordedEvents) ImageFallback(_ context.Context, f Fallback) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fb = append(r.fb, f)
}

func (r *recordedEvents) all() []Fallback {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Fallback(nil), r.fb...)
}

// catalogWith publishes ims and points channel stable at each id in
// promote, in order.
func catalogWith(t *testing.T, ims []imagecatalog.Image, promote ...string) imagecatalog.Catalog {
	t.Helper()
	var c imagecatalog.Catalog
	var err error
	for _, im := range ims {
		if c, err = imagecatalog.Publish(c, im); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range promote {
		if c, _, err = imagecatalog.Promote(c, imagecatalog.ChannelStable, id, catalogT0); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func stableGroup() GroupSpec {
	return GroupSpec{ID: "g1", Provider: "fake", MinSize: 0, MaxSize: 10, MachineType: "m1", Zone: "z1", ImageChannel: "stable"}
}

// nthRequest waits for the fake's n-th Create and returns it.
func nthRequest(t *testing.T, p *fake.Provider, n int) providers.CreateRequest {
	t.Helper()
	eventually(t, "create request", func() bool { return len(p.CreateRequests()) >= n })
	return p.CreateRequests()[n-1]
}

func TestChannelResolvesAtCreateTime(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.BootsImages = true
	src := &memCatalog{}
	src.set(catalogWith(t, []imagecatalog.Image{catalogImage("img-a", 1, "amd64"), catalogImage("img-b", 2, "amd64")}, "img-a"), nil)
	ev := &recordedEvents{}
	m := NewMetrics(nil)
	c := newCoreWith(t, p, func(o *Options) { o.Catalog, o.Events, o.Metrics = src, ev, m }, stableGroup())

	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	req := nthRequest(t, p, 1)
	if req.Image != "img-a" || req.ImageKind != providers.ImagePrebaked {
		t.Errorf("first machine: image %q kind %q, want img-a prebaked", req.Image, req.ImageKind)
	}
	if got := req.NodeLabels[providers.LabelImage]; got != "img-a" {
		t.Errorf("node label %s = %q, want img-a", providers.LabelImage, got)
	}

	// Promote B; the next sync reloads the catalog and the next machine
	// boots B, without a restart.
	src.set(catalogWith(t, []imagecatalog.Image{catalogImage("img-a", 1, "amd64"), catalogImage("img-b", 2, "amd64")}, "img-a", "img-b"), nil)
	c.Sync(t.Context(), true)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	if req := nthRequest(t, p, 2); req.Image != "img-b" {
		t.Errorf("after promote: image %q, want img-b", req.Image)
	}
	// A load that fails keeps the last good catalog.
	src.set(imagecatalog.Catalog{}, errors.New("configmap read: connection refused"))
	c.Sync(t.Context(), true)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	if req := nthRequest(t, p, 3); req.Image != "img-b" {
		t.Errorf("after a failed load: image %q, want img-b (the last good catalog)", req.Image)
	}
	if got := testutil.ToFloat64(m.catalogErrors); got != 1 {
		t.Errorf("catalog load errors = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.imageFallbacks); got != 0 || len(ev.all()) != 0 {
		t.Errorf("fallbacks: %d series, %d events; want none", got, len(ev.all()))
	}
	// A restarted core reads each machine's image back from List.
	c2 := newCoreWith(t, p, func(o *Options) { o.Catalog = src }, stableGroup())
	c2.mu.RLock()
	got := map[string]int{}
	for _, inst := range c2.groups["g1"].instances {
		got[inst.image]++
	}
	c2.mu.RUnlock()
	if got["img-a"] != 1 || got["img-b"] != 2 || len(got) != 2 {
		t.Errorf("images after restart = %v, want img-a once and img-b twice", got)
	}
}

func TestFallbackToRuntimeInstall(t *testing.T) {
	t.Parallel()
	deprecated := catalogWith(t, []imagecatalog.Image{catalogImage("img-a", 1, "amd64")}, "img-a")
	deprecated, _, err := imagecatalog.Deprecate(deprecated, "img-a", "CVE-2026-0001", catalogT0)
	if err != nil {
		t.Fatal(err)
	}
	// Two channels match a group that pins neither OS nor k8s minor.
	ambiguous := catalogWith(t, []imagecatalog.Image{catalogImage("img-a", 1, "amd64")}, "img-a")
	other := catalogImage("img-c", 3, "amd64")
	other.Name = imagecatalog.Name{OS: "debian", OSVersion: "12", K8s: imagecatalog.Version{Major: 1, Minor: 35, Patch: 4}, Arch: "amd64", Built: other.Created}.String()
	if ambiguous, err = imagecatalog.Publish(ambiguous, other); err != nil {
		t.Fatal(err)
	}
	if ambiguous, _, err = imagecatalog.Promote(ambiguous, imagecatalog.ChannelStable, "img-c", catalogT0); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name        string
		bootsImages bool
		catalog     *imagecatalog.Catalog // nil: no catalog configured
		wantReason  string
		wantMessage string
	}{
		{name: "provider without images", bootsImages: false, catalog: &imagecatalog.Catalog{}, wantReason: FallbackNoImageAPI, wantMessage: `provider "fake" can't boot custom images`},
		{name: "no catalog configured", bootsImages: true, wantReason: FallbackNoCatalog, wantMessage: "no image catalog is configured"},
		{name: "channel has no image", bootsImages: true, catalog: &imagecatalog.Catalog{}, wantReason: FallbackNotFound, wantMessage: "no channel with an image matches"},
		{name: "arm64 image only", bootsImages: true, catalog: ptr(catalogWith(t, []imagecatalog.Image{catalogImage("img-arm", 1, "arm64")}, "img-arm")), wantReason: FallbackNotFound, wantMessage: "arch=amd64"},
		{name: "deprecated", bootsImages: true, catalog: &deprecated, wantReason: FallbackDeprecated, wantMessage: "CVE-2026-0001"},
		{name: "ambiguous", bootsImages: true, catalog: &ambiguous, wantReason: FallbackAmbiguous, wantMessage: "img-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := fake.New()
			p.BootsImages = tc.bootsImages
			ev := &recordedEvents{}
			m := NewMetrics(nil)
			c := newCoreWith(t, p, func(o *Options) {
				o.Events, o.Metrics = ev, m
				if tc.catalog != nil {
					src := &memCatalog{}
					src.set(*tc.catalog, nil)
					o.Catalog = src
				}
			}, stableGroup())
			if err := c.IncreaseSize("g1", 2); err != nil {
				t.Fatal(err)
			}
			// It still scales: both machines are created, at runtime install.
			for i := 1; i <= 2; i++ {
				req := nthRequest(t, p, i)
				if req.Image != "" || req.ImageKind != providers.ImageRuntimeInstall {
					t.Errorf("machine %d: image %q kind %q, want runtime-install", i, req.Image, req.ImageKind)
				}
				if _, ok := req.NodeLabels[providers.LabelImage]; ok {
					t.Errorf("machine %d carries %s without an image", i, providers.LabelImage)
				}
			}
			if got := testutil.ToFloat64(m.imageFallbacks.WithLabelValues("g1", tc.wantReason)); got != 2 {
				t.Errorf("prebake_image_fallback_total{reason=%q} = %v, want 2", tc.wantReason, got)
			}
			eventually(t, "two fallback events", func() bool { return len(ev.all()) == 2 })
			for _, f := range ev.all() {
				if f.Reason != tc.wantReason || !strings.Contains(f.Message, tc.wantMessage) || f.Group != "g1" || f.Channel != "stable" || !strings.HasPrefix(f.Machine, "g1-") {
					t.Errorf("event %+v, want reason %q and a message with %q", f, tc.wantReason, tc.wantMessage)
				}
			}
		})
	}
}

func TestNoChannelIsNotAFallback(t *testing.T) {
	t.Parallel()
	p := fake.New()
	ev := &recordedEvents{}
	m := NewMetrics(nil)
	g := stableGroup()
	g.ImageChannel = ""
	c := newCoreWith(t, p, func(o *Options) { o.Events, o.Metrics = ev, m }, g)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	if req := nthRequest(t, p, 1); req.ImageKind != providers.ImageRuntimeInstall {
		t.Errorf("kind %q, want runtime-install", req.ImageKind)
	}
	if got := testutil.CollectAndCount(m.imageFallbacks); got != 0 {
		t.Errorf("%d fallback series for a group without a channel, want 0", got)
	}
}

func ptr[T any](v T) *T { return &v }

// TestGroupContainerImagesChooseAndReport: a group's image.containerImages
// break a tie between the channel's images in favour of the one that holds
// them all; a group whose channel resolves to one image that lacks some
// boots it (prebaked) and reports what it lacks, in the metric and an Event
// per machine, off the request path.
func TestGroupContainerImagesChooseAndReport(t *testing.T) {
	t.Parallel()
	pause, app := "registry.k8s.io/pause:3.10", "registry.example/team/app:1.2"
	digest := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	ubuntu := catalogImage("img-u", 1, "amd64")
	ubuntu.Manifest.ContainerImages = map[string]string{pause: digest("a")}
	debian := catalogImage("img-d", 2, "amd64")
	debian.Name = imagecatalog.Name{OS: "debian", OSVersion: "12", K8s: imagecatalog.Version{Major: 1, Minor: 35, Patch: 4}, Arch: "amd64", Built: debian.Created}.String()
	debian.Manifest.ContainerImages = map[string]string{pause: digest("a"), app: digest("b")}
	cat := catalogWith(t, []imagecatalog.Image{ubuntu, debian}, "img-u", "img-d")

	for _, tc := range []struct {
		name        string
		os          string
		images      []string
		wantImage   string
		wantMissing []string
		wantReason  string // a fallback
	}{
		{name: "the image that holds them all", images: []string{pause, app}, wantImage: "img-d"},
		{name: "pinned OS: its image, reporting what it lacks", os: "ubuntu-2404", images: []string{pause, app}, wantImage: "img-u", wantMissing: []string{app}},
		{name: "pinned OS holding them", os: "ubuntu-2404", images: []string{pause}, wantImage: "img-u"},
		{name: "both hold them: still ambiguous", images: []string{pause}, wantReason: FallbackAmbiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := fake.New()
			p.BootsImages = true
			src := &memCatalog{}
			src.set(cat, nil)
			ev := &recordedEvents{}
			m := NewMetrics(nil)
			g := stableGroup()
			g.ImageOS, g.ImageContainerImages = tc.os, tc.images
			c := newCoreWith(t, p, func(o *Options) { o.Catalog, o.Events, o.Metrics = src, ev, m }, g)
			if err := c.IncreaseSize("g1", 2); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 2; i++ {
				req := nthRequest(t, p, i)
				if tc.wantReason != "" {
					if req.ImageKind != providers.ImageRuntimeInstall {
						t.Errorf("machine %d: kind %q, want runtime-install", i, req.ImageKind)
					}
					continue
				}
				if req.Image != tc.wantImage || req.ImageKind != providers.ImagePrebaked {
					t.Errorf("machine %d: image %q kind %q, want %s prebaked", i, req.Image, req.ImageKind, tc.wantImage)
				}
			}
			if tc.wantReason != "" {
				if got := testutil.ToFloat64(m.imageFallbacks.WithLabelValues("g1", tc.wantReason)); got != 2 {
					t.Errorf("prebake_image_fallback_total{reason=%q} = %v, want 2", tc.wantReason, got)
				}
				eventually(t, "two fallback events", func() bool { return len(ev.all()) == 2 })
				if msg := ev.all()[0].Message; !strings.Contains(msg, "2 of them hold every image of the group's containerImages") {
					t.Errorf("fallback message %q does not say the list did not tell the images apart", msg)
				}
				return
			}
			wantCount := 0.0
			if len(tc.wantMissing) > 0 {
				wantCount = 2
			}
			if got := testutil.ToFloat64(m.missingContainerImages.WithLabelValues("g1")); got != wantCount {
				t.Errorf("prebake_image_missing_container_images_total = %v, want %v", got, wantCount)
			}
			if len(tc.wantMissing) == 0 {
				// No report was made: it is counted before IncreaseSize returns.
				if n := len(ev.allMissing()); n != 0 {
					t.Errorf("%d missing-image events, want none", n)
				}
				return
			}
			eventually(t, "two missing-image events", func() bool { return len(ev.allMissing()) == 2 })
			machines := map[string]bool{}
			for _, e := range ev.allMissing() {
				if e.Group != "g1" || e.Channel != "stable" || e.Image != tc.wantImage || !slices.Equal(e.Missing, tc.wantMissing) || !strings.HasPrefix(e.Machine, "g1-") {
					t.Errorf("event %+v, want image %s missing %v", e, tc.wantImage, tc.wantMissing)
				}
				machines[e.Machine] = true
			}
			if len(machines) != 2 {
				t.Errorf("events name machines %v, want one per machine", machines)
			}
			if got := testutil.CollectAndCount(m.imageFallbacks); got != 0 {
				t.Errorf("%d fallback series: an image that lacks container images is no fallback", got)
			}
		})
	}
}

// flatcarImage is catalogImage as Flatcar 4230, whose manifest records the sysext at sysext.
func flatcarImage(id string, i int, sysext string) imagecatalog.Image {
	im := catalogImage(id, i, "amd64")
	n := imagecatalog.Name{OS: "flatcar", OSVersion: "4230", K8s: imagecatalog.Version{Major: 1, Minor: 35, Patch: 4}, Arch: "amd64", Built: im.Created}
	im.Name = n.String()
	im.Manifest = imagecatalog.ManifestFor(imagecatalog.FamilyFlatcar, map[string]string{imagecatalog.SysextComponent: sysext})
	return im
}

// machineRecorder is a UserDataSource that keeps the Machines it renders for.
type machineRecorder struct {
	mu sync.Mutex
	ms []Machine
}

func (r *machineRecorder) UserData(_ context.Context, m Machine) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ms = append(r.ms, m)
	return []byte("#cloud-config\n"), nil
}

func (r *machineRecorder) all() []Machine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Machine(nil), r.ms...)
}

// TestMachineCarriesTheImagesFamilyAndManifest: a machine booting a catalog image is
// rendered with the image's family and the manifest the catalog records for it (the sysext
// version a Flatcar node must find); a machine of a group without image.os whose
// Flatcar-only channel gives no image falls back as Flatcar, not as a Debian node.
func TestMachineCarriesTheImagesFamilyAndManifest(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.BootsImages = true
	src := &memCatalog{}
	src.set(catalogWith(t, []imagecatalog.Image{flatcarImage("fc-1", 1, "v1.35.2")}, "fc-1"), nil)
	rec := &machineRecorder{}
	c := newCoreWith(t, p, func(o *Options) { o.Catalog, o.UserData = src, rec }, stableGroup())
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	nthRequest(t, p, 1)
	m := rec.all()[0]
	if m.Request.Image != "fc-1" || m.Family != imagecatalog.FamilyFlatcar || m.Manifest.Components[imagecatalog.SysextComponent] != "v1.35.2" {
		t.Errorf("prebaked Flatcar machine: image %q family %q manifest %v; want fc-1, flatcar, the sysext at v1.35.2", m.Request.Image, m.Family, m.Manifest.Components)
	}

	// The channel's only image is deprecated: runtime install, and the machine is still
	// Flatcar (the channel's key), so the renderer refuses it instead of configuring a
	// Debian node with cloud-init.
	deprecated, _, err := imagecatalog.Deprecate(catalogWith(t, []imagecatalog.Image{flatcarImage("fc-1", 1, "v1.35.2")}, "fc-1"), "fc-1", "CVE-2026-0002", catalogT0)
	if err != nil {
		t.Fatal(err)
	}
	src.set(deprecated, nil)
	c.Sync(t.Context(), true)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	nthRequest(t, p, 2)
	m = rec.all()[1]
	if m.Request.Image != "" || m.Family != imagecatalog.FamilyFlatcar || len(m.Manifest.Components) != 0 {
		t.Errorf("fallback on a Flatcar-only channel: image %q family %q manifest %v; want runtime install as flatcar, no manifest", m.Request.Image, m.Family, m.Manifest.Components)
	}

	// With no catalog channel at all (another provider's key), the base image's family.
	g := stableGroup()
	g.ID = "g2"
	c2 := newCoreWith(t, p, func(o *Options) { o.Catalog, o.UserData = src, rec }, g)
	src.set(imagecatalog.Catalog{}, nil)
	c2.Sync(t.Context(), true)
	if err := c2.IncreaseSize("g2", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a third machine", func() bool { return len(rec.all()) == 3 })
	if m := rec.all()[2]; m.Family != imagecatalog.FamilyDebian {
		t.Errorf("no matching channel: family %q, want debian", m.Family)
	}
}

// TestCheckCatalogRefusesOnEveryLoad: the catalog check runs on each catalog that loads,
// the first one included when it loads only after start. A refused group's new machines fail
// with CodeMixedRenderers and the check's words, without a Create call; a load that clears
// it lets them through again.
func TestCheckCatalogRefusesOnEveryLoad(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.BootsImages = true
	src := &memCatalog{}
	src.set(imagecatalog.Catalog{}, errors.New("configmap read: connection refused"))
	ubuntu := catalogImage("u-1", 1, "amd64")
	good := catalogWith(t, []imagecatalog.Image{ubuntu}, "u-1")
	mixed := catalogWith(t, []imagecatalog.Image{ubuntu, flatcarImage("fc-1", 2, "v1.35.4")}, "u-1", "fc-1")
	var checks sync.Map // catalogs checked, by their image count
	check := func(cat imagecatalog.Catalog) map[string]error {
		checks.Store(len(cat.Images), true)
		q := imagecatalog.Query{Channel: "stable", Key: imagecatalog.Key{OS: imagecatalog.Any, K8sMinor: imagecatalog.Any, Arch: imagecatalog.Any, Provider: "fake", Location: imagecatalog.Any}}
		if err := imagecatalog.CheckRenderers(cat, q); err != nil {
			return map[string]error{"g1": fmt.Errorf(`node group "g1": set image.os: %w`, err)}
		}
		return nil
	}
	m := NewMetrics(nil)
	c := newCoreWith(t, p, func(o *Options) { o.Catalog, o.CheckCatalog, o.Metrics = src, check, m }, stableGroup())

	// The catalog did not load at start: nothing to check, the group falls back.
	src.set(mixed, nil)
	c.Sync(t.Context(), true)
	if _, ok := checks.Load(2); !ok {
		t.Fatal("the first catalog that loaded after start was not checked")
	}
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	var failed InstanceView
	eventually(t, "the refused machine's creation error", func() bool {
		nodes, _ := c.Nodes("g1")
		for _, n := range nodes {
			if n.Error != nil {
				failed = n
				return true
			}
		}
		return false
	})
	if e := failed.Error; e.Code != CodeMixedRenderers || e.Class != providers.ErrorOther ||
		!strings.Contains(e.Message, `"g1"`) || !strings.Contains(e.Message, "image.os") || !strings.Contains(e.Message, "images of two renderers") {
		t.Errorf("creation error %+v: want %s naming the group, image.os and the renderers", e, CodeMixedRenderers)
	}
	if n := len(p.CreateRequests()); n != 0 {
		t.Errorf("%d Create calls for a refused group, want 0", n)
	}
	if got := testutil.ToFloat64(m.createErrors.WithLabelValues("g1", "Other", CodeMixedRenderers)); got != 1 {
		t.Errorf("create errors{code=%s} = %v, want 1", CodeMixedRenderers, got)
	}

	// A failed load keeps the last check's answer with the catalog it was made for.
	src.set(imagecatalog.Catalog{}, errors.New("configmap read: timeout"))
	c.Sync(t.Context(), true)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a second refused machine", func() bool {
		nodes, _ := c.Nodes("g1")
		n := 0
		for _, v := range nodes {
			if v.Error != nil && v.Error.Code == CodeMixedRenderers {
				n++
			}
		}
		return n == 2
	})

	// The channel is fixed: the next load clears the refusal.
	src.set(good, nil)
	c.Sync(t.Context(), true)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	if req := nthRequest(t, p, 1); req.Image != "u-1" {
		t.Errorf("after the fix: image %q, want u-1", req.Image)
	}
}
