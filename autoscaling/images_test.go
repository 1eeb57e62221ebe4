package autoscaling

import (
	"context"
	"errors"
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
