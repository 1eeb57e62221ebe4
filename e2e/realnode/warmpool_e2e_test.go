//go:build e2e

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/wait"
	"github.com/prebake-dev/prebake/nodetimeline"
	"github.com/prebake-dev/prebake/providers/docker"
)

const (
	groupPool  = "pool"
	groupFresh = "fresh"
)

// TestWarmPoolResumeAgainstFreshCreate runs two prebaked groups on the same image side by
// side: pool keeps one standby (booted, bootstrapped up to just before the join, then its
// container stopped), fresh keeps none. Once the standby is parked, one Pending pod per group
// is created at the same moment: pool's scale-up resumes the standby (a new NoCloud seed
// with the join, the container started again), fresh's creates a machine. Both must run
// their pod; the pool's node must be the standby (same container, no second one, its node
// script's second run skipped the install and joined), and the table compares the two.
func TestWarmPoolResumeAgainstFreshCreate(t *testing.T) {
	w := needWorld(t)
	img := needPrebaked(t, w)
	s := newScenario(t, w, "wp", 30*time.Minute, ConfigOptions{Catalog: img.Catalog, Groups: []Group{
		{ID: groupPool, MaxSize: 1, Prebaked: true, WarmPool: 1},
		{ID: groupFresh, MaxSize: 1, Prebaked: true},
	}})

	// The standby: created by prebake's pool tending, prepared, then parked (stopped, with
	// its standby record).
	var standbyName string
	parkedAt := time.Now()
	if err := wait.Poll(s.ctx, 15*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		cs, err := s.groupContainers(ctx, groupPool)
		if err != nil || len(cs) != 1 {
			return false, err
		}
		standbyName = strings.TrimPrefix(cs[0].Names[0], "/")
		if cs[0].State != container.StateExited {
			return false, nil
		}
		_, err = w.Engine.VolumeInspect(ctx, standbyName+"-standby")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no parked standby of %s: %v", groupPool, err)
	}
	t.Logf("standby %s parked %s after the scenario started", standbyName, time.Since(parkedAt).Round(time.Second))
	if n := s.targetSize(groupPool); n != 0 {
		t.Errorf("target size of %s with a parked standby = %d: CA must see no standby", groupPool, n)
	}
	if l := s.listed(groupPool); len(l) != 0 {
		t.Errorf("NodeGroupNodes %s lists %v while the standby is parked: CA must see no standby", groupPool, l)
	}
	// The container is stopped: read its status file out of it (no exec).
	raw, err := readFile(s.ctx, w.Engine, standbyName, bootstrap.DefaultStatusPath)
	if err != nil {
		t.Fatal(err)
	}
	firstStatus, err := bootstrap.ParseStatus(raw)
	if err != nil {
		t.Fatal(err)
	}
	if firstStatus.Result != "prepared" {
		t.Errorf("the standby's node script ended %q, want prepared (stopped before the join)", firstStatus.Result)
	}

	poolPod := s.createPod("on-standby", groupPool, nil)
	freshPod := s.createPod("on-fresh", groupFresh, nil)
	errs := make(chan error, 2)
	for _, p := range []struct{ key, group string }{{poolPod, groupPool}, {freshPod, groupFresh}} {
		go func() { errs <- s.waitPodRunning(p.key, p.group, 15*time.Minute) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	var runs [][]Measured
	var cols []string
	for _, p := range []struct{ key, group, col string }{{poolPod, groupPool, "resumed standby"}, {freshPod, groupFresh, "fresh create"}} {
		in := s.waitInstance(p.key, func(in standin.Instance) bool { return !in.PodRunning.IsZero() && !in.Ready.IsZero() })
		node := s.nodeByProviderID(in.ID)
		ct, err := s.containerOf(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		boot, err := ReadBoot(s.ctx, w.Engine, ct.ID)
		if err != nil {
			t.Fatal(err)
		}
		if inst, _ := boot.Status.Phase("install"); inst.Result != "skipped" || boot.Status.Result != "ok" {
			t.Errorf("%s node %s: install %q, result %q; want the install skipped and a join", p.group, node.Name, inst.Result, boot.Status.Result)
		}
		if p.group == groupPool {
			if want := "docker://" + standbyName; in.ID != want {
				t.Errorf("%s's node is %s, not the standby %s", groupPool, in.ID, want)
			}
			meta, err := readFile(s.ctx, w.Engine, ct.ID, docker.SeedDir+"/meta-data")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(meta), "instance-id: "+node.Name+"\n") {
				t.Errorf("the resumed standby's NoCloud meta-data still names its first instance-id:\n%s", meta)
			}
			if _, err := w.Engine.VolumeInspect(s.ctx, standbyName+"-standby"); !cerrdefs.IsNotFound(err) {
				t.Errorf("the standby record of %s outlived its resume (%v)", standbyName, err)
			}
		}
		run := Measure(in, boot)
		for _, m := range run {
			if m.Unmeasured() {
				t.Errorf("%s node %s: phase %q was not measured", p.group, node.Name, m.Phase)
			}
		}
		runs = append(runs, run)
		cols = append(cols, fmt.Sprintf("%s (%s)", p.col, node.Name))
	}
	// What a user sees: `prebake timeline` says which node came from the pool (the Node's
	// timeline annotation, written by prebake serve once the Node registered).
	var from map[string]bool
	if err := wait.Poll(s.ctx, time.Minute, time.Second, func(context.Context) (bool, error) {
		var rep nodetimeline.Report
		if err := json.Unmarshal([]byte(s.runTimeline("-o", "json")), &rep); err != nil {
			return false, err
		}
		from = map[string]bool{}
		for _, n := range rep.Nodes {
			from[n.Group] = n.FromWarmPool
		}
		return len(from) == 2 && from[groupPool], nil
	}); err != nil || from[groupFresh] {
		t.Errorf("prebake timeline's fromWarmPool by group: %v (%v); want %s only", from, err, groupPool)
	}
	if cs, err := s.groupContainers(s.ctx, groupPool); err != nil || len(cs) != 1 {
		t.Errorf("containers of %s after the scale-up: %d (%v), want the one standby it resumed", groupPool, len(cs), err)
	}
	c := Compare(fmt.Sprintf("Pending pod → pod Running, warm-pool standby resumed vs a fresh create, both prebaked (docker provider, %s), measured:", w.HostDescription(s.ctx)), cols, runs...)
	c.Notes = append(c.Notes, "The standby was booted, bootstrapped up to just before the join and stopped before the pods were created; its row starts at the container's second start. \"to container start\" of the standby is its resume: a new NoCloud seed, then the start.")
	t.Logf("\n%s", c.Markdown())
	addReport(c)
}
