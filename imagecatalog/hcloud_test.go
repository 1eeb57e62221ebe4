package imagecatalog_test

// The acceptance scenario against the Hetzner fake, through the real
// provider (providers/hcloud) and hcloud-go client: real snapshots, real
// deletes, real delete protection.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/imagecatalog"
	hcloudprovider "github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

func exactVersions() map[string]string {
	vs := map[string]string{}
	for _, c := range imagecatalog.DefaultComponents {
		vs[c] = "1.0.0-1"
	}
	vs["kubelet"], vs["kubeadm"], vs["kubectl"] = "1.34.2-1.1", "1.34.2-1.1", "1.34.2-1.1"
	return vs
}

type fakeCloud struct {
	fake   *hcloudfake.Fake
	client *hcloud.Client
	clock  *hcloudfake.Clock
	// p is the provider under test: the image API and the instance lister
	// (cluster "test").
	p *hcloudprovider.Provider
}

func newFakeCloud(t *testing.T) fakeCloud {
	t.Helper()
	clk := hcloudfake.NewClock(time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC))
	f := hcloudfake.New(hcloudfake.Options{Now: clk.Now, Token: "test-token"})
	t.Cleanup(f.Close)
	client := hcloud.NewClient(hcloud.WithEndpoint(f.URL()), hcloud.WithToken("test-token"),
		hcloud.WithRetryOpts(hcloud.RetryOpts{BackoffFunc: hcloud.ConstantBackoff(0), MaxRetries: 0}),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond)}))
	p, err := hcloudprovider.New(hcloudprovider.Options{Token: "test-token", Endpoint: f.URL(), Cluster: "test", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return fakeCloud{f, client, clk, p}
}

// publish snapshots a builder server and publishes the snapshot, labelled,
// to the catalog. (The real build also boots, verifies and cleans the
// builder; that is a later increment.)
func (fc fakeCloud) publish(t *testing.T, ctx context.Context, c imagecatalog.Catalog) (imagecatalog.Catalog, string) {
	t.Helper()
	fc.clock.Advance(time.Hour)
	now := fc.clock.Now()
	im := imagecatalog.Image{
		Name:     imagecatalog.Name{OS: "ubuntu", OSVersion: "2404", K8s: imagecatalog.Version{Major: 1, Minor: 34, Patch: 2}, Arch: "amd64", Built: now}.String(),
		Provider: "hcloud", Created: now, Manifest: imagecatalog.DefaultManifest(exactVersions()),
		Verified: &imagecatalog.Event{At: now, Reason: "test"},
	}
	im.InputsHash = imagecatalog.InputsHash(imagecatalog.Inputs{BaseImage: "ubuntu-24.04", Manifest: im.Manifest, ScriptVersion: now.String()})
	labels, err := imagecatalog.Labels(im)
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := fc.client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "builder", ServerType: &hcloud.ServerType{Name: "cx22"},
		Image: &hcloud.Image{Name: "ubuntu-24.04"}, Location: &hcloud.Location{Name: "fsn1"}})
	if err != nil {
		t.Fatal(err)
	}
	snap, _, err := fc.client.Server.CreateImage(ctx, res.Server, &hcloud.ServerCreateImageOpts{
		Type: hcloud.ImageTypeSnapshot, Description: hcloud.Ptr(im.Name), Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.client.Action.WaitFor(ctx, snap.Action); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fc.client.Server.DeleteWithResult(ctx, res.Server); err != nil {
		t.Fatal(err)
	}
	im.ID = strconv.FormatInt(snap.Image.ID, 10)
	c, err = imagecatalog.Publish(c, im)
	if err != nil {
		t.Fatal(err)
	}
	return c, im.ID
}

func TestAcceptanceScenarioHcloudFake(t *testing.T) {
	t.Parallel()
	for _, liveOnC := range []bool{false, true} {
		name := map[bool]string{false: "no live instance", true: "live instance on C"}[liveOnC]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fc := newFakeCloud(t)
			s := runGCScenario(t, scenarioCloud{provider: "hcloud", api: fc.p, lister: fc.p, now: fc.clock.Now, publish: fc.publish,
				bootFrom: func(t *testing.T, ctx context.Context, id string) {
					if _, _, err := fc.client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "node-1", ServerType: &hcloud.ServerType{Name: "cx22"},
						Image: &hcloud.Image{ID: mustID(t, id)}, Location: &hcloud.Location{Name: "fsn1"},
						Labels: map[string]string{"prebake.dev/cluster": "test"}}); err != nil {
						t.Fatal(err)
					}
				}}, liveOnC)

			// Hetzner has delete protection: on for the channel images, off
			// for the rest, and real: the stable image survives a delete.
			ctx := context.Background()
			cloud, err := fc.p.ListImages(ctx, map[string]string{imagecatalog.LabelOS: "ubuntu-2404"})
			if err != nil {
				t.Fatal(err)
			}
			protected := map[string]bool{}
			for _, im := range cloud {
				protected[s.letter[im.ID]] = im.Protected
			}
			wantProtected := map[string]bool{"A": true, "B": true, "D": true}
			if liveOnC {
				wantProtected["C"] = false
			}
			if d := cmp.Diff(wantProtected, protected); d != "" {
				t.Errorf("delete protection (-want +got):\n%s", d)
			}
			if err := fc.p.DeleteImage(ctx, s.ids["B"]); !hcloud.IsError(err, hcloud.ErrorCodeProtected) {
				t.Errorf("deleting the protected stable image: %v, want protected", err)
			}
		})
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A failing delete stops gc part way; the catalog keeps what is still there.
func TestGCStopsAtAFailedDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fc := newFakeCloud(t)
	var c imagecatalog.Catalog
	var ids []string
	for range 3 {
		var id string
		c, id = fc.publish(t, ctx, c)
		ids = append(ids, id)
	}
	fc.fake.Fail("DELETE", "/images/"+ids[1], 1, hcloudfake.APIError{Status: 500, Code: "server_error", Message: "boom"})
	out, _, err := imagecatalog.GC(ctx, fc.p, fc.p, c, imagecatalog.GCOptions{KeepHistory: 2})
	if err == nil {
		t.Fatal("gc succeeded despite a failed delete")
	}
	var left []string
	for _, im := range out.Images {
		left = append(left, im.ID)
	}
	if d := cmp.Diff(ids[1:], left); d != "" {
		t.Errorf("catalog after a failed gc (-want +got):\n%s", d)
	}
}

// The catalog's labels in the cloud are enough to rebuild it: push them,
// forget the document, sync, and get the same images and channels back.
func TestSyncRebuildsTheCatalogFromLabels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fc := newFakeCloud(t)
	var c imagecatalog.Catalog
	ids := map[string]string{}
	for _, l := range []string{"A", "B", "C", "D", "E"} {
		c, ids[l] = fc.publish(t, ctx, c)
	}
	now := fc.clock.Now()
	var err error
	for _, l := range []string{"A", "B", "C"} {
		if c, _, err = imagecatalog.Promote(c, imagecatalog.ChannelStable, ids[l], now); err != nil {
			t.Fatal(err)
		}
	}
	key := imagecatalog.Key{OS: "ubuntu-2404", K8sMinor: "1.34", Arch: "amd64", Provider: "hcloud"}
	if c, err = imagecatalog.Rollback(c, imagecatalog.ChannelStable, key, "canary join failed", now); err != nil {
		t.Fatal(err)
	}
	if c, _, err = imagecatalog.Promote(c, imagecatalog.ChannelCandidate, ids["D"], now); err != nil {
		t.Fatal(err)
	}
	if c, _, err = imagecatalog.Deprecate(c, ids["E"], "bad kernel", now); err != nil {
		t.Fatal(err)
	}
	// A label of the user's survives the push.
	if err := fc.p.SetLabels(ctx, ids["A"], map[string]string{"team": "infra", imagecatalog.LabelName: "stale"}); err != nil {
		t.Fatal(err)
	}
	changed, err := imagecatalog.PushLabels(ctx, fc.p, c, "hcloud", "")
	if err != nil || len(changed) != 5 {
		t.Fatalf("push labels changed %v, %v; want all 5", changed, err)
	}
	if again, err := imagecatalog.PushLabels(ctx, fc.p, c, "hcloud", ""); err != nil || len(again) != 0 {
		t.Errorf("second push changed %v, %v; want nothing", again, err)
	}
	for l, want := range map[string]bool{"A": false, "B": true, "C": false, "D": true, "E": false} {
		if im, err := fc.p.GetImage(ctx, ids[l]); err != nil || im.Protected != want {
			t.Errorf("image %s: protected %v, %v; want %v (channel images are protected on push)", l, im.Protected, err, want)
		}
	}
	a, err := fc.p.GetImage(ctx, ids["A"])
	if err != nil || a.Labels["team"] != "infra" || a.Labels["prebake.dev/channel-stable"] != "history-1" {
		t.Errorf("image A labels %v, %v; want team=infra kept and stable history-1", a.Labels, err)
	}

	got, errs := imagecatalog.Sync(ctx, fc.p, "hcloud", "", now)
	if len(errs) > 0 {
		t.Fatalf("sync: %v", errs)
	}
	// Labels can't carry times, reasons or rollback records; compare the rest.
	type chView struct {
		Name, Image string
		History     []string
	}
	view := func(c imagecatalog.Catalog) (ims map[string]bool, chs []chView, deprecated []string) {
		ims = map[string]bool{}
		for _, im := range c.Images {
			ims[im.ID+" "+im.Name+" "+im.InputsHash] = im.Verified != nil
			if im.Deprecated != nil {
				deprecated = append(deprecated, im.ID)
			}
		}
		for _, ch := range c.Channels {
			v := chView{Name: ch.Name + " " + ch.Key.String(), Image: ch.Image}
			for _, h := range ch.History {
				v.History = append(v.History, h.Image)
			}
			chs = append(chs, v)
		}
		return ims, chs, deprecated
	}
	wi, wc, wd := view(c)
	gi, gc, gd := view(got)
	if d := cmp.Diff(wi, gi); d != "" {
		t.Errorf("synced images (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wc, gc); d != "" {
		t.Errorf("synced channels (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wd, gd); d != "" {
		t.Errorf("synced deprecations (-want +got):\n%s", d)
	}
	for _, im := range c.Images {
		g, _ := got.Image(im.ID)
		if d := cmp.Diff(im.Manifest, g.Manifest); d != "" {
			t.Errorf("image %s manifest after sync (-want +got):\n%s", im.ID, d)
		}
	}
}
