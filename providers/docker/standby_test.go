package docker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// preparedUserData makes the sleeper write a standby's "prepared" status,
// as the node script does at the end of a standby's run.
const preparedUserData = "#prebake-test-status\n" + `{"version":1,"provider":"docker","node":"x","result":"prepared","phases":[],"error":""}`

// listedAs waits up to 30 s until List shows id as ok says, and returns it.
func listedAs(t *testing.T, p *Provider, id, what string, ok func(providers.Instance) bool) providers.Instance {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ins, err := p.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			if in.ProviderID == id && ok(in) {
				return in
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("List never showed %s as %s: %+v", id, what, ins)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStandbyParkAndResume: a standby's marker is a record volume made
// with it; List tells warming from prepared by its status file and shows
// it parked once stopped, also to a restarted provider; Resume removes the
// record first, then boots the container with the new user-data under a
// new NoCloud instance-id; Delete and Cleanup leave no record behind.
func TestStandbyParkAndResume(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	p := newTestProvider(t, o)
	ctx := context.Background()
	if got := p.Capabilities().Standby; !slices.Equal(got, []providers.StandbyState{providers.StandbyStopped}) {
		t.Fatalf("Capabilities.Standby = %v, want [stopped]", got)
	}
	req := request("workers-sb1")
	req.Standby, req.UserData = providers.StandbyStopped, []byte(preparedUserData)
	in, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	name := o.NamePrefix + req.Name
	rec, err := c.VolumeInspect(ctx, name+"-standby")
	if err != nil || rec.Labels[providers.LabelStandby] != "stopped" || rec.Labels[providers.LabelCluster] != o.Cluster {
		t.Fatalf("standby record: %+v, %v", rec.Labels, err)
	}
	listedAs(t, p, in.ProviderID, "prepared", func(l providers.Instance) bool {
		return l.Standby == providers.Standby{State: providers.StandbyStopped, Phase: providers.StandbyPrepared}
	})
	if err := p.Park(ctx, in.ProviderID, providers.StandbySuspended); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Park suspended = %v, want unsupported", err)
	}
	if err := p.Park(ctx, in.ProviderID, providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	if ci, err := c.ContainerInspect(ctx, name); err != nil || ci.State.Running {
		t.Fatalf("container after Park: running %v, %v", ci.State != nil && ci.State.Running, err)
	}
	// A restarted provider finds the parked standby from the engine alone.
	q, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	parked := listedAs(t, q, in.ProviderID, "parked", func(l providers.Instance) bool {
		return l.Standby.Phase == providers.StandbyParked
	})
	if parked.Error != nil || parked.Group != "workers" || parked.Name != req.Name {
		t.Errorf("parked standby listed as %+v", parked)
	}

	const joinUD = "#cloud-config\n# join with a fresh token\n"
	got, err := q.Resume(ctx, in.ProviderID, []byte(joinUD))
	if err != nil {
		t.Fatal(err)
	}
	if got.Standby.Phase != providers.StandbyNone || got.State != providers.StateRunning {
		t.Errorf("Resume returned %+v", got)
	}
	if _, err := c.VolumeInspect(ctx, name+"-standby"); !cerrdefs.IsNotFound(err) {
		t.Errorf("standby record after Resume: %v, want gone", err)
	}
	if _, ud := readFile(t, c, name, seedUserDataPath); string(ud) != joinUD {
		t.Errorf("seed user-data after Resume = %q, want the resume's", ud)
	}
	_, meta := readFile(t, c, name, seedMetaDataPath)
	if strings.Contains(string(meta), "instance-id: "+req.Name+"\n") || !strings.Contains(string(meta), "local-hostname: "+req.Name+"\n") {
		t.Errorf("meta-data after Resume = %q, want a new instance-id and the same hostname", meta)
	}
	listedAs(t, p, in.ProviderID, "a node", func(l providers.Instance) bool {
		return l.Standby.Phase == providers.StandbyNone && l.Error == nil && l.State == providers.StateRunning
	})
	if _, err := q.Resume(ctx, in.ProviderID, []byte(joinUD)); err != nil {
		t.Errorf("Resume of a running machine: %v", err)
	}
	if err := p.Park(ctx, in.ProviderID, providers.StandbyStopped); err == nil {
		t.Error("Park of a taken machine succeeded")
	}
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
}

// TestStandbyRecordCleanup: Delete takes a standby's record with it,
// Cleanup keeps a live standby's and removes an orphan's.
func TestStandbyRecordCleanup(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	p := newTestProvider(t, o)
	ctx := context.Background()
	var ids []string
	for _, n := range []string{"workers-sb2", "workers-sb3", "workers-sb4"} {
		req := request(n)
		req.Standby = providers.StandbyStopped
		in, err := p.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ProviderID)
	}
	if err := p.Delete(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if !volumeGone(t, c, o.NamePrefix+"workers-sb2-standby") {
		t.Error("Delete left the standby record")
	}
	// A container removed behind the provider's back leaves an orphan.
	if err := c.ContainerRemove(ctx, o.NamePrefix+"workers-sb3", container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if !volumeGone(t, c, o.NamePrefix+"workers-sb3-standby") {
		t.Error("Cleanup left an orphan standby record")
	}
	if volumeGone(t, c, o.NamePrefix+"workers-sb4-standby") {
		t.Error("Cleanup removed a live standby's record")
	}
	if err := p.Delete(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
}

// TestGCKeepsAStandbysImage: gc lists live instances through the
// provider; a parked standby is one, so the image it boots is kept, and
// deleted once the standby is gone.
func TestGCKeepsAStandbysImage(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	base := sleeperImage(t, c)
	o := testOptions(t, base)
	p := newTestProvider(t, o)
	ctx := context.Background()
	const id = "prebake-debian-12-k8s-1-35-4-amd64-20261202t0900"
	if err := c.ImageTag(ctx, base, o.ImageRepository+":"+id); err != nil {
		t.Fatal(err)
	}
	req := request("workers-sbgc")
	req.Standby, req.Image, req.ImageKind = providers.StandbyStopped, id, providers.ImagePrebaked
	in, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Park(ctx, in.ProviderID, providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	cat := imagecatalog.Catalog{Images: []imagecatalog.Image{{ID: id}}}
	_, plan, err := imagecatalog.GC(ctx, p, p, cat, imagecatalog.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Delete) != 0 || len(plan.Keep) != 1 || plan.Keep[0].ID != id || !slices.Contains(plan.Keep[0].Reasons, "a live instance uses it") {
		t.Fatalf("gc plan with a parked standby on %s: %+v", id, plan)
	}
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	_, plan, err = imagecatalog.GC(ctx, p, p, cat, imagecatalog.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Delete, []string{id}) {
		t.Errorf("gc plan once the standby is gone: %+v, want %s deleted", plan, id)
	}
}
