//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/prebake-dev/prebake/e2e/timeline"
	"github.com/prebake-dev/prebake/providers"
)

// Scenario f: 200 pending pods across 10 groups (20 each, 500m: 3 fit a kwok-small node, so
// 7 nodes a group). Reports the time until all run and the RPC latency percentiles.
func TestLoad(t *testing.T) {
	const groups, podsPerGroup, nodesPerGroup = 10, 20, 7
	e := newEnv(t, "f", 8*time.Minute)
	var gs []group
	for i := range groups {
		gs = append(gs, group{ID: fmt.Sprintf("f-g%d", i), MaxSize: 20, Prebaked: i%2 == 0})
	}
	e.startServe(e.writeConfig(gs...), nil)
	s := e.newStandIn(nil, true)

	var pods []*corev1.Pod
	for i, g := range gs {
		for j := range podsPerGroup {
			pods = append(pods, e.pod(fmt.Sprintf("g%d-%d", i, j), podSpec{CPU: "500m", Selector: map[string]string{providers.LabelGroup: g.ID}}))
		}
	}
	began := time.Now()
	keys := e.createPodSet(pods)
	created := time.Since(began)
	e.waitFor(fmt.Sprintf("%d pods Running", len(keys)), 5*time.Minute, func(ctx context.Context) (bool, error) {
		n, err := e.podsRunning(ctx, keys)
		return n == len(keys), err
	})
	allRunning := time.Since(began)

	nodes, err := e.ourNodes(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	perGroup := map[string]int{}
	for _, n := range nodes {
		perGroup[n.Labels[providers.LabelGroup]]++
	}
	for _, g := range gs {
		if got := perGroup[g.ID]; got != nodesPerGroup {
			t.Errorf("group %s has %d nodes, want %d (20 pods × 500m, 3 per 1900m node)", g.ID, got, nodesPerGroup)
		}
	}
	leases, err := e.leases(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != len(nodes) {
		t.Errorf("%d machine records for %d nodes", len(leases), len(nodes))
	}

	scaleUps, rpcs := 0, 0
	for m, ds := range s.RPCLatencies() {
		rpcs += len(ds)
		if m == "NodeGroupIncreaseSize" {
			scaleUps = len(ds)
		}
	}
	sc := e.record("f", fmt.Sprintf("f: load (%d pending pods across %d groups)", len(keys), groups), []timeline.Fact{
		{Name: "pods created (16 at a time) in", Value: created.Round(time.Millisecond).String()},
		{Name: "first pod created → all pods Running", Value: allRunning.Round(time.Millisecond).String()},
		{Name: "nodes", Value: fmt.Sprintf("%d (%d groups × %d)", len(nodes), groups, nodesPerGroup)},
		{Name: "IncreaseSize calls / stand-in loops / RPCs", Value: fmt.Sprintf("%d / %d / %d", scaleUps, s.Loops(), rpcs)},
	}, "Even groups boot prebaked, odd groups install at runtime (both SIMULATED, see Inputs). "+
		"prebake's workers create at most 20 machines a second (workers.qps 20, burst 40), which shows in the registration phases.")
	if text, err := e.serve.Metrics(e.ctx); err == nil {
		sc.ServerRPC = serverRPC(text)
		suite.report.Add(sc)
	}
	t.Logf("all %d pods Running %s after the first was created; RPC latency (client side):", len(keys), allRunning.Round(time.Millisecond))
	for _, r := range sc.RPC {
		t.Logf("  %-28s n=%-5d p50=%-10s p90=%-10s p99=%s", r.Method, r.N, timeline.FormatMS(r.P50MS), timeline.FormatMS(r.P90MS), timeline.FormatMS(r.P99MS))
	}
}

// serverRPC reads prebake_rpc_seconds from /metrics: per method, all codes together.
func serverRPC(text string) []timeline.Stat {
	hs, err := timeline.ParseHistograms(text, "prebake_rpc_seconds")
	if err != nil {
		return nil
	}
	var methods []string
	for _, h := range hs {
		if m := h.Labels["method"]; !slices.Contains(methods, m) {
			methods = append(methods, m)
		}
	}
	slices.Sort(methods)
	var out []timeline.Stat
	for _, m := range methods {
		if h, ok := timeline.Merge(hs, map[string]string{"method": m}); ok && h.Count > 0 {
			out = append(out, timeline.HistogramStat(m, "request in", "response out", "prebake_rpc_seconds (server side)", h))
		}
	}
	return out
}
