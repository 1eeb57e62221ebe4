package imagecatalog_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/imagecatalog"
)

// scenarioCloud is a provider's fake cloud as the gc scenario needs
// it: publish an image into the catalog, boot a live instance from one.
type scenarioCloud struct {
	provider string
	api      imagecatalog.ImageAPI
	lister   imagecatalog.InstanceLister
	now      func() time.Time
	publish  func(t *testing.T, ctx context.Context, c imagecatalog.Catalog) (imagecatalog.Catalog, string)
	bootFrom func(t *testing.T, ctx context.Context, id string)
}

// gcScenario is what the scenario did, for the provider's own checks.
type gcScenario struct {
	catalog  imagecatalog.Catalog
	ids      map[string]string // letter → image id
	letter   map[string]string // image id → letter
	key      imagecatalog.Key
	wantKept []string
}

// runGCScenario is the scripted scenario against a cloud: publish
// A–E; promote A, B, C to stable; roll stable back; candidate → D; gc with
// --keep-history 1, with or without a live instance booted from C. It
// checks what gc deleted, what the cloud and the catalog keep, and that
// stable still resolves to B.
func runGCScenario(t *testing.T, cloud scenarioCloud, liveOnC bool) gcScenario {
	t.Helper()
	ctx := context.Background()
	s := gcScenario{ids: map[string]string{}, letter: map[string]string{},
		key: imagecatalog.Key{OS: "ubuntu-2404", K8sMinor: "1.34", Arch: "amd64", Provider: cloud.provider}}
	var c imagecatalog.Catalog
	for _, l := range []string{"A", "B", "C", "D", "E"} {
		var id string
		c, id = cloud.publish(t, ctx, c)
		s.ids[l], s.letter[id] = id, l
	}
	now := cloud.now()
	var err error
	for _, l := range []string{"A", "B", "C"} {
		if c, _, err = imagecatalog.Promote(c, imagecatalog.ChannelStable, s.ids[l], now); err != nil {
			t.Fatal(err)
		}
	}
	if c, err = imagecatalog.Rollback(c, imagecatalog.ChannelStable, s.key, "canary join failed", now); err != nil {
		t.Fatal(err)
	}
	if c, _, err = imagecatalog.Promote(c, imagecatalog.ChannelCandidate, s.ids["D"], now); err != nil {
		t.Fatal(err)
	}
	if liveOnC {
		cloud.bootFrom(t, ctx, s.ids["C"])
	}

	c, plan, err := imagecatalog.GC(ctx, cloud.api, cloud.lister, c, imagecatalog.GCOptions{KeepHistory: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.catalog = c
	s.wantKept = []string{"A", "B", "D"}
	wantGone := []string{"C", "E"}
	if liveOnC {
		s.wantKept, wantGone = []string{"A", "B", "C", "D"}, []string{"E"}
	}
	var deleted []string
	for _, id := range plan.Delete {
		deleted = append(deleted, s.letter[id])
	}
	if d := cmp.Diff(wantGone, deleted); d != "" {
		t.Errorf("deleted (-want +got):\n%s", d)
	}
	cloudImages, err := cloud.api.ListImages(ctx, map[string]string{imagecatalog.LabelOS: "ubuntu-2404"})
	if err != nil {
		t.Fatal(err)
	}
	var inCloud []string
	for _, im := range cloudImages {
		inCloud = append(inCloud, s.letter[im.ID])
	}
	slices.Sort(inCloud)
	if d := cmp.Diff(s.wantKept, inCloud); d != "" {
		t.Errorf("images left in the cloud (-want +got):\n%s", d)
	}
	var inCatalog []string
	for _, im := range c.Images {
		inCatalog = append(inCatalog, s.letter[im.ID])
	}
	if d := cmp.Diff(s.wantKept, inCatalog); d != "" {
		t.Errorf("images left in the catalog (-want +got):\n%s", d)
	}
	if got, err := imagecatalog.Resolve(c, imagecatalog.Query{Channel: imagecatalog.ChannelStable, Key: s.key}); err != nil || got != s.ids["B"] {
		t.Errorf("resolve stable after gc = %s, %v; want B (%s)", s.letter[got], err, s.ids["B"])
	}
	return s
}
