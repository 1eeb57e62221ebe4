//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/timeline"
	"github.com/prebake-dev/prebake/nodetimeline"
	"github.com/prebake-dev/prebake/providers"
)

// reportTolerance bounds how far the report's moments may lie from what the stand-in saw of
// the same events: both watch the same API server from this host, on one clock.
const reportTolerance = time.Second

// Scenario timeline: a scale-up of a prebaked and a runtime-install group on kwok, then
// `prebake timeline` (the built binary) on this scenario's nodes. Its phases must add up,
// label what kwok simulates, and agree with what the stand-in measured; after a restart of
// prebake serve the report is the same, read back from the Nodes.
func TestTimelineReport(t *testing.T) {
	e := newEnv(t, "tl", 4*time.Minute)
	const pre, rt = "tl-pre", "tl-rt"
	cfg := e.writeConfig(group{ID: pre, MaxSize: 5, Prebaked: true}, group{ID: rt, MaxSize: 5})
	e.startServe(cfg, nil)
	e.newStandIn(nil, true)
	keys := append(e.createPods("pre", 2, podSpec{CPU: "1500m", Selector: map[string]string{providers.LabelGroup: pre}}),
		e.createPods("rt", 1, podSpec{CPU: "1500m", Selector: map[string]string{providers.LabelGroup: rt}})...)
	e.waitFor("3 pods Running", 90*time.Second, func(ctx context.Context) (bool, error) {
		n, err := e.podsRunning(ctx, keys)
		return n == len(keys), err
	})
	// prebake writes the first pod Running once its pod watch saw it.
	e.waitFor("every Node's timeline up to its first pod Running", 30*time.Second, func(ctx context.Context) (bool, error) {
		nodes, err := e.ourNodes(ctx)
		if err != nil || len(nodes) != 3 {
			return false, err
		}
		for _, n := range nodes {
			m, err := nodetimeline.ParseMoments(n.Annotations[nodetimeline.Annotation])
			if err != nil || m.PodRunning.IsZero() {
				return false, err
			}
		}
		return true, nil
	})
	stdout, stderr := e.runTimeline("-o", "json")
	var r nodetimeline.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("prebake timeline -o json: %v\n%s", err, stdout)
	}
	if !strings.Contains(stderr, "prebake timeline: listing Nodes") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	if len(r.Nodes) != 3 || r.Simulated != 3 {
		t.Fatalf("report of %d nodes (%d simulated), want 3 kwok nodes, all simulated", len(r.Nodes), r.Simulated)
	}

	var facts []timeline.Fact
	for _, row := range r.Nodes {
		checkReportRow(t, row, e.standin)
		facts = append(facts, timeline.Fact{Name: "prebake timeline, " + row.Name + " (" + row.ImageKind + "), IncreaseSize received → Node Ready",
			Value: fmt.Sprintf("%.0f ms (SIMULATED boot included)", row.Total.Ms)})
	}
	table, _ := e.runTimeline("-o", "table")
	for _, want := range []string{"SIMULATED: 3 of the nodes are kwok's", " sim", "kwok runs no node script: the boot is SIMULATED (2s)", "kwok runs no node script: the boot is SIMULATED (5s)",
		"The CA Events of 3 of the nodes were written by " + standin.EventComponent + ", not cluster-autoscaler"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	t.Logf("prebake timeline --cluster %s:\n%s", e.name, table)

	// The moments live on the Nodes: a restarted prebake, which adopts these machines and
	// knows none of their timeline, leaves them as they were.
	e.runStop()
	<-e.runDone
	e.runStop = nil
	e.serve.Stop()
	if err := e.serve.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	again, _ := e.runTimeline("-o", "json")
	var r2 nodetimeline.Report
	if err := json.Unmarshal([]byte(again), &r2); err != nil {
		t.Fatal(err)
	}
	for i, row := range r2.Nodes {
		for j, m := range row.Moments {
			if was := r.Nodes[i].Moments[j]; !m.At.Equal(was.At) || m.Source != was.Source {
				t.Errorf("after the restart, %s %s = %s from %q; before it %s from %q", row.Name, m.Name, m.At, m.Source, was.At, was.Source)
			}
		}
	}
	e.record("timeline", "timeline: prebake timeline over a scale-up of a prebaked and a runtime-install group", facts,
		"The report's moments were checked against the stand-in's within "+reportTolerance.String()+" and read back unchanged after a restart of prebake serve.")
}

// runTimeline runs the built `prebake timeline` on this scenario's nodes.
func (e *env) runTimeline(args ...string) (stdout, stderr string) {
	e.t.Helper()
	cmd := exec.CommandContext(e.ctx, suite.prebake, append([]string{"timeline", "--kubeconfig", suite.backend.Kubeconfig(), "--cluster", e.name, "--since", "10m"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("prebake timeline %v: %v\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String()
}

// checkReportRow holds one node's row to the arithmetic and to what the stand-in saw.
func checkReportRow(t *testing.T, row nodetimeline.Node, s *standin.StandIn) {
	t.Helper()
	if got := row.Inconsistencies(10 * time.Millisecond); len(got) != 0 {
		t.Errorf("%s: %q", row.Name, got)
	}
	for _, p := range row.Phases {
		if !p.Known {
			t.Errorf("%s: phase %s unknown (%s): every moment is known on kwok with the stand-in's Events", row.Name, p.Name, p.Unknown)
		}
	}
	for _, name := range []string{nodetimeline.Accepted + " → " + nodetimeline.Running, nodetimeline.Registered + " → " + nodetimeline.Ready,
		nodetimeline.Ready + " → " + nodetimeline.PodRunning, nodetimeline.PhaseTotal} {
		if !row.Phase(name).Simulated {
			t.Errorf("%s: %s is kwok's but not marked simulated", row.Name, name)
		}
	}
	if p := row.Phase(nodetimeline.Requested + " → " + nodetimeline.Accepted); p.Simulated {
		t.Errorf("%s: %s is prebake's own work, marked simulated", row.Name, p.Name)
	}
	if row.Trigger.Component != standin.EventComponent || row.Trigger.Pod == "" || !strings.Contains(row.Trigger.Decision, "setting group "+row.Group) {
		t.Errorf("%s: trigger %+v, want the stand-in's decision and pod", row.Name, row.Trigger)
	}
	in, ok := s.Instance(row.ProviderID)
	if !ok {
		t.Fatalf("%s: the stand-in has no instance %s", row.Name, row.ProviderID)
	}
	near := func(what string, got, want time.Time) {
		if d := got.Sub(want); d < -reportTolerance || d > reportTolerance {
			t.Errorf("%s: %s at %s in the report, %s by the stand-in (%s apart)", row.Name, what, got.Format(time.StampMilli), want.Format(time.StampMilli), d)
		}
	}
	req := row.Moment(nodetimeline.Requested).At
	// IncreaseSize was received while the stand-in's call was in flight (the report keeps ms).
	if req.Before(in.IncreaseSent.Truncate(time.Millisecond)) || req.After(in.IncreaseReturned) {
		t.Errorf("%s: IncreaseSize received at %s, outside the stand-in's call %s – %s", row.Name, req.Format(time.StampMilli),
			in.IncreaseSent.Format(time.StampMilli), in.IncreaseReturned.Format(time.StampMilli))
	}
	near(nodetimeline.Registered, row.Moment(nodetimeline.Registered).At, in.Registered)
	near(nodetimeline.Ready, row.Moment(nodetimeline.Ready).At, in.Ready)
	near(nodetimeline.PodRunning, row.Moment(nodetimeline.PodRunning).At, in.PodRunning)
	if got, want := time.Duration(row.Total.Ms*float64(time.Millisecond)), in.Ready.Sub(in.IncreaseSent); (got - want).Abs() > reportTolerance {
		t.Errorf("%s: IncreaseSize → Node Ready %s in the report, %s by the stand-in", row.Name, got, want)
	}
	// CA's Events and the pod's creation keep whole seconds: they can only be earlier.
	if d := row.Moment(nodetimeline.CADecision).At; d.After(in.IncreaseSent) {
		t.Errorf("%s: CA decision %s after the stand-in sent IncreaseSize %s", row.Name, d, in.IncreaseSent)
	}
	if p := row.Moment(nodetimeline.PodPending).At; p.After(in.PodPendingSeen) {
		t.Errorf("%s: pod Pending %s after the stand-in saw it Pending %s", row.Name, p, in.PodPendingSeen)
	}
}
