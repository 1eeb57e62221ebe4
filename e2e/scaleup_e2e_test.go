//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/timeline"
	"github.com/prebake-dev/prebake/e2e/wait"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok/providerid"
)

// Scenario a: a Pending pod that selects a group with 0 nodes gets a node; the node
// registers through kwok with the providerID the instance was listed with, turns Ready, and
// the pod runs.
func TestScaleFromZero(t *testing.T) {
	e := newEnv(t, "a", 3*time.Minute)
	const g = "a-small"
	e.startServe(e.writeConfig(group{ID: g, MaxSize: 5, Prebaked: true}), nil)
	e.newStandIn(nil, true)
	if err := e.scaleFromZero(g); err != nil {
		t.Fatal(err)
	}
	checkExpanderCalls(t, e.standin, shippedExpander(t))
	e.record("a", "a: scale from zero (1 pending pod, prebaked group with 0 nodes)", nil)
}

// checkExpanderCalls: the scale-up went through the expander chain
// deploy/base runs CA with. With price in it (what ships), the price
// expander's RPCs were made, as CA makes them, and every one answered OK;
// a failed one would have made CA skip the group. Without price, none
// were made.
func checkExpanderCalls(t *testing.T, s *standin.StandIn, expander string) {
	t.Helper()
	chain, err := standin.ParseExpanders(expander)
	if err != nil {
		t.Fatal(err)
	}
	calls, failed := s.RPCLatencies(), s.RPCErrors()
	node, pod := len(calls["PricingNodePrice"]), len(calls["PricingPodPrice"])
	if !slices.Contains(chain, "price") {
		if node+pod != 0 {
			t.Errorf("--expander=%s has no price, yet the stand-in made %d PricingNodePrice and %d PricingPodPrice calls", expander, node, pod)
		}
		return
	}
	// At least one loop with the option: the stabilisation pod's price,
	// then the option's template node and its one pod.
	ok := node >= 1 && pod >= 2
	if !ok {
		t.Errorf("--expander=%s: %d PricingNodePrice and %d PricingPodPrice calls, want at least 1 and 2 (the price expander never priced the option)", expander, node, pod)
	}
	for _, m := range []string{"PricingNodePrice", "PricingPodPrice"} {
		if len(failed[m]) > 0 {
			ok = false
			t.Errorf("%s failed %v (gRPC code: count): CA's price expander skips a group whose price it can't get", m, failed[m])
		}
	}
	if ok {
		t.Logf("price expander: %d PricingNodePrice, %d PricingPodPrice calls, all OK", node, pod)
	}
}

// TestScaleFromZeroCatchesWrongProviderID proves that scenario a checks identity: the same
// run, with every instance id on the wire rewritten between prebake and the stand-in (as a
// plugin reporting a wrong providerID would send it), must fail on the providerID check.
func TestScaleFromZeroCatchesWrongProviderID(t *testing.T) {
	e := newEnv(t, "a-wrongid", 3*time.Minute)
	const g = "aw-small"
	e.startServe(e.writeConfig(group{ID: g, MaxSize: 5, Prebaked: true}), nil)
	e.conn = e.dial(nil)
	e.newStandIn(wrongProviderIDs{e.conn}, true)
	err := e.scaleFromZero(g)
	switch {
	case err == nil:
		t.Fatal("scenario a passed although NodeGroupNodes reported ids no Node carries: its providerID check is broken")
	case !strings.Contains(err.Error(), "spec.providerID"):
		t.Fatalf("scenario a failed, but not on the providerID check: %v", err)
	}
	t.Logf("scenario a refused the mismatch as it must: %v", err)
}

// wrongProviderIDs rewrites the instance ids of NodeGroupNodes answers.
type wrongProviderIDs struct{ grpc.ClientConnInterface }

func (w wrongProviderIDs) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	err := w.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	if r, ok := reply.(*protos.NodeGroupNodesResponse); ok && err == nil {
		for _, in := range r.GetInstances() {
			in.Id = strings.Replace(in.GetId(), providerid.Prefix, providerid.Prefix+"wrong-", 1)
		}
	}
	return err
}

// scaleFromZero runs scenario a against group and returns why it failed.
// kwokStableImage is what stable points to in examples/kwok-catalog.yaml.
const kwokStableImage = "prebake-ubuntu-2404-k8s-1-35-4-amd64-20261201t1000"

func (e *env) scaleFromZero(group string) error {
	keys := e.createPods("p", 1, podSpec{CPU: "500m", Selector: map[string]string{providers.LabelGroup: group}})
	if err := wait.Poll(e.ctx, 60*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := e.podsRunning(ctx, keys)
		return n == 1, err
	}); err != nil {
		return fmt.Errorf("pod %s Running: %w", keys[0], err)
	}
	pod, err := e.kube.CoreV1().Pods(e.name).Get(e.ctx, "p-0", metav1.GetOptions{})
	if err != nil {
		return err
	}
	node, err := e.kube.CoreV1().Nodes().Get(e.ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if node.Labels[providers.LabelGroup] != group {
		return fmt.Errorf("pod runs on node %s of group %q, want %q", node.Name, node.Labels[providers.LabelGroup], group)
	}
	// The group's channel resolved through examples/kwok-catalog.yaml at
	// IncreaseSize, and the Node records the image it booted.
	if got := node.Labels[providers.LabelImage]; got != kwokStableImage {
		return fmt.Errorf("node %s has %s=%q, want %q (the catalog's stable image)", node.Name, providers.LabelImage, got, kwokStableImage)
	}
	insts, err := e.listInstances(e.ctx, group)
	if err != nil {
		return err
	}
	if len(insts) != 1 {
		return fmt.Errorf("NodeGroupNodes(%s) lists %d instances, want 1: %v", group, len(insts), insts)
	}
	id := insts[0].GetId()
	// CA matches instances to Nodes by this string equality only.
	if node.Spec.ProviderID != id {
		return fmt.Errorf("the pod runs on node %s whose spec.providerID is %q, but NodeGroupNodes lists its instance as %q: "+
			"CA would count the instance as never registered and delete it after max-node-provision-time", node.Name, node.Spec.ProviderID, id)
	}
	if err := wait.Poll(e.ctx, 15*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		insts, err := e.listInstances(ctx, group)
		return err == nil && len(insts) == 1 && insts[0].GetStatus().GetInstanceState() == protos.InstanceStatus_instanceRunning, err
	}); err != nil {
		return fmt.Errorf("instance %s never listed as running: %w", id, err)
	}
	if err := wait.Poll(e.ctx, 15*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		in, ok := e.standin.Instance(id)
		return ok && in.Requested && !in.PodPendingSeen.IsZero() && !in.Ready.IsZero() && !in.PodRunning.IsZero(), nil
	}); err != nil {
		in, _ := e.standin.Instance(id)
		return fmt.Errorf("the stand-in did not see the whole timeline of %s (%+v): %w", id, in, err)
	}
	if got := e.targetSize(group); got != 1 {
		return fmt.Errorf("TargetSize(%s) = %d after the scale-up, want 1", group, got)
	}
	return nil
}

// Scenario b: DeleteNodes removes exactly the named machines and their Node objects; target
// sizes follow at once and stay consistent with NodeGroupNodes; refusals change nothing.
func TestScaleDown(t *testing.T) {
	e := newEnv(t, "b", 3*time.Minute)
	const g, gmin = "b-small", "b-min"
	e.startServe(e.writeConfig(
		group{ID: g, MaxSize: 5, Prebaked: true},
		group{ID: gmin, MinSize: 1, MaxSize: 2, Prebaked: true},
	), nil)
	s := e.newStandIn(nil, false) // no loop: this scenario makes every call itself

	if err := s.IncreaseSize(e.ctx, g, 3); err != nil {
		t.Fatal(err)
	}
	if got := e.targetSize(g); got != 3 {
		t.Fatalf("TargetSize right after IncreaseSize(3) = %d, want 3", got)
	}
	nodes := e.waitGroupNodes(g, 3)

	victim := nodes[0]
	began := time.Now()
	if err := s.DeleteNodes(e.ctx, g, &victim); err != nil {
		t.Fatal(err)
	}
	returned := time.Since(began)
	if got := e.targetSize(g); got != 2 {
		t.Errorf("TargetSize right after DeleteNodes of 1 of 3 = %d, want 2", got)
	}
	e.waitFor("node "+victim.Name+" and its machine record gone", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := e.kube.CoreV1().Nodes().Get(ctx, victim.Name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		leases, err := e.leases(ctx)
		_, left := leases[victim.Name]
		return !left, err
	})
	gone := time.Since(began)
	rest := e.waitGroupNodes(g, 2)
	for _, n := range rest {
		if n.Name == victim.Name {
			t.Errorf("deleted node %s is back", victim.Name)
		}
	}

	// Refusals delete nothing and leave the target alone.
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "not-ours"}, Spec: corev1.NodeSpec{ProviderID: providerid.Format("not-ours")}}
	if err := s.DeleteNodes(e.ctx, g, foreign); status.Code(err) != codes.InvalidArgument {
		t.Errorf("DeleteNodes of a node of no group: %v; want InvalidArgument", err)
	}
	if got := e.targetSize(g); got != 2 {
		t.Errorf("TargetSize after a refused DeleteNodes = %d, want 2", got)
	}
	if e.targetSize(gmin) == 0 {
		if err := s.IncreaseSize(e.ctx, gmin, 1); err != nil {
			t.Fatal(err)
		}
	}
	minInsts, err := e.listInstances(e.ctx, gmin)
	if err != nil || len(minInsts) != 1 {
		t.Fatalf("NodeGroupNodes(%s) = %v, %v; want 1 instance", gmin, minInsts, err)
	}
	fake := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: minInsts[0].GetId()}, Spec: corev1.NodeSpec{ProviderID: minInsts[0].GetId()}}
	if err := s.DeleteNodes(e.ctx, gmin, fake); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteNodes below minSize: %v; want FailedPrecondition", err)
	}
	if got := e.targetSize(gmin); got != 1 {
		t.Errorf("TargetSize(%s) after a refused DeleteNodes = %d, want 1", gmin, got)
	}

	// The rest at once.
	if err := s.DeleteNodes(e.ctx, g, &rest[0], &rest[1]); err != nil {
		t.Fatal(err)
	}
	if got := e.targetSize(g); got != 0 {
		t.Errorf("TargetSize after deleting every node = %d, want 0", got)
	}
	e.waitFor("every node, machine record and instance of "+g+" gone", 30*time.Second, func(ctx context.Context) (bool, error) {
		nodes, err := e.groupNodes(ctx, g)
		if err != nil || len(nodes) > 0 {
			return false, err
		}
		leases, err := e.leases(ctx)
		if err != nil {
			return false, err
		}
		for name := range leases {
			if strings.HasPrefix(name, g+"-") {
				return false, nil
			}
		}
		insts, err := e.listInstances(ctx, g)
		return len(insts) == 0, err
	})
	e.record("b", "b: scale down (IncreaseSize 3 by hand, DeleteNodes 1, then 2)", []timeline.Fact{
		{Name: "DeleteNodes of 1 node returned after", Value: returned.Round(time.Microsecond).String()},
		{Name: "its Node object and machine record gone after", Value: gone.Round(time.Millisecond).String()},
	})
}

// groupNodes lists the Nodes of one group of this scenario.
func (e *env) groupNodes(ctx context.Context, group string) ([]corev1.Node, error) {
	all, err := e.ourNodes(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(n corev1.Node) bool { return n.Labels[providers.LabelGroup] != group }), nil
}

// waitGroupNodes waits until group has exactly n Ready Nodes and NodeGroupNodes lists
// exactly their providerIDs, all running, and returns the Nodes sorted by name.
func (e *env) waitGroupNodes(group string, n int) []corev1.Node {
	e.t.Helper()
	var nodes []corev1.Node
	e.waitFor(fmt.Sprintf("%d Ready nodes of %s matching its listed instances", n, group), 60*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		if nodes, err = e.groupNodes(ctx, group); err != nil || len(nodes) != n {
			return false, err
		}
		insts, err := e.listInstances(ctx, group)
		if err != nil || len(insts) != n {
			return false, err
		}
		ids := map[string]bool{}
		for _, in := range insts {
			if in.GetStatus().GetInstanceState() != protos.InstanceStatus_instanceRunning {
				return false, nil
			}
			ids[in.GetId()] = true
		}
		for _, node := range nodes {
			if !ids[node.Spec.ProviderID] || !nodeReady(&node) {
				return false, nil
			}
		}
		return true, nil
	})
	slices.SortFunc(nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return nodes
}

func nodeReady(n *corev1.Node) bool { return standin.IsReady(n) }

// Scenario c: the first group's zone is stocked out (capacity 0). Its instance shows
// errorInfo class 1 (OutOfResources) within a loop; the stand-in backs the group off, deletes
// the instance as a fake node and scales the next group, where the pod runs.
func TestFastFailover(t *testing.T) {
	// maxFailoverLoops separates "listed when the worker has it" (a few loops) from "listed
	// at the next refresh" (refreshInterval / standin.DefaultInterval, 50 loops).
	const maxFailoverLoops = 10
	e := newEnv(t, "c", 3*time.Minute)
	const stockout, fallback = "c-stockout", "c-fallback"
	pool := map[string]string{"e2e.prebake.dev/pool": "c"}
	e.startServe(e.writeConfig(
		group{ID: stockout, Zone: "zone-b", MaxSize: 5, Prebaked: true, Labels: pool},
		group{ID: fallback, MaxSize: 5, Prebaked: true, Labels: pool},
	), nil)
	s := e.newStandIn(nil, true)
	keys := e.createPods("p", 1, podSpec{CPU: "500m", Selector: pool})
	e.waitFor("pod Running after failover", 60*time.Second, func(ctx context.Context) (bool, error) {
		n, err := e.podsRunning(ctx, keys)
		return n == 1, err
	})

	var failed, served *standin.Instance
	for _, in := range s.Instances() {
		switch {
		case in.Group == stockout && in.Error != nil:
			failed = &in
		case in.Group == fallback && in.Error == nil:
			served = &in
		}
	}
	if failed == nil {
		t.Fatalf("no instance of %s with a creation error; instances: %+v", stockout, s.Instances())
	}
	if !failed.Requested || failed.Error.Class != 1 || failed.Error.Code == "" {
		t.Errorf("failed instance %s: requested %v, error %+v; want class 1 (OutOfResources) with a code", failed.ID, failed.Requested, failed.Error)
	}
	// prebake lists the failure as soon as its worker has it, not at its next refresh
	// (refreshInterval 10 s here: 50 of the stand-in's 200 ms loops). The loops in between are
	// the worker's create, however long the machine's load makes it (the loop after
	// IncreaseSize starts at once, and a trigger left from the pod's event can start one
	// more): one CI run saw 3 under load, against 1–2 usually. A failure that waited for a
	// refresh would be about 50.
	if gap := failed.Error.Loop - failed.IncreaseLoop; gap >= maxFailoverLoops {
		t.Errorf("creation error first seen %d loops after IncreaseSize; want fewer than %d: prebake lists a failed create when its worker has it, not at its next refresh (about 50 loops later)", gap, maxFailoverLoops)
	}
	if served == nil {
		t.Fatalf("no instance of %s; instances: %+v", fallback, s.Instances())
	}
	pod, err := e.kube.CoreV1().Pods(e.name).Get(e.ctx, "p-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := e.kube.CoreV1().Nodes().Get(e.ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[providers.LabelGroup] != fallback || node.Spec.ProviderID != served.ID {
		t.Errorf("pod runs on %s (group %q, providerID %q); want the %s instance %s",
			node.Name, node.Labels[providers.LabelGroup], node.Spec.ProviderID, fallback, served.ID)
	}
	e.waitFor("the failed instance deleted (fake node) and "+stockout+" back to target 0", 30*time.Second, func(ctx context.Context) (bool, error) {
		insts, err := e.listInstances(ctx, stockout)
		return err == nil && len(insts) == 0 && e.targetSize(stockout) == 0, err
	})
	if nodes, _ := e.groupNodes(e.ctx, stockout); len(nodes) > 0 {
		t.Errorf("%d nodes exist in the stocked-out group", len(nodes))
	}
	e.record("c", "c: fast failover (first group stocked out: capacity 0 in its zone)", []timeline.Fact{
		{Name: "creation error visible after IncreaseSize returned", Value: failed.Error.SeenAt.Sub(failed.IncreaseReturned).Round(time.Microsecond).String()},
		{Name: "loops from IncreaseSize to the error being seen", Value: fmt.Sprint(failed.Error.Loop - failed.IncreaseLoop)},
		{Name: "error reported", Value: fmt.Sprintf("class %d, code %s", failed.Error.Class, failed.Error.Code)},
		{Name: "pod seen Unschedulable → Running, failover included", Value: served.PodRunning.Sub(failed.PodPendingSeen).Round(time.Millisecond).String()},
	})
}

// Scenario d: `prebake serve` is killed with SIGKILL in the middle of a scale-up and started
// again. No machine is leaked or made twice, the target is right, every node comes up.
func TestRestartSafety(t *testing.T) {
	t.Run("killed while machines boot", func(t *testing.T) {
		e := newEnv(t, "d1", 3*time.Minute)
		const g, n = "d1-slow", 4
		e.startServe(e.writeConfig(group{ID: g, MaxSize: 10}), nil) // runtime install: the longer simulated boot
		s := e.newStandIn(nil, true)
		keys := e.createPods("p", n, podSpec{CPU: "1500m", Selector: map[string]string{providers.LabelGroup: g}})

		var before map[string]time.Time
		e.waitFor(fmt.Sprintf("%d machine records", n), 30*time.Second, func(ctx context.Context) (bool, error) {
			var err error
			before, err = e.leases(ctx)
			return len(before) == n, err
		})
		if nodes, _ := e.ourNodes(e.ctx); len(nodes) > 0 {
			t.Fatalf("%d simulated boots ended before the kill; raise bootRuntimeInstall so the kill lands mid scale-up", len(nodes))
		}
		pid := e.serve.PID()
		e.serve.Kill()
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("prebake serve (pid %d) still exists after SIGKILL: %v", pid, err)
		}
		restartBegan := time.Now()
		if err := e.serve.Restart(e.ctx); err != nil {
			t.Fatal(err)
		}
		restartTook := time.Since(restartBegan)

		// The restarted plugin knows the machines from their records alone.
		if got := e.targetSize(g); got != n {
			t.Errorf("TargetSize right after the restart = %d, want %d (the machine records)", got, n)
		}
		insts, err := e.listInstances(e.ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := instanceIDs(insts), leaseIDs(before); !slices.Equal(got, want) {
			t.Errorf("after the restart NodeGroupNodes lists %v; want the machines made before the kill %v", got, want)
		}
		e.waitFor("every pod Running", 90*time.Second, func(ctx context.Context) (bool, error) {
			r, err := e.podsRunning(ctx, keys)
			return r == n, err
		})
		e.checkExactly(g, before, s)
		e.record("d", "d: restart safety (SIGKILL while 4 machines boot, then restart)", []timeline.Fact{
			{Name: "restart until /readyz answered 200", Value: restartTook.Round(time.Millisecond).String()},
			{Name: "machines before the kill / after everything ran", Value: fmt.Sprintf("%d / %d", len(before), n)},
		}, "prebake serve was killed with SIGKILL between the machines' creation and the end of their simulated boot; "+
			"the registration phases include the time it was down, and its /metrics cover the restarted process only.")
	})

	t.Run("killed right after IncreaseSize", func(t *testing.T) {
		e := newEnv(t, "d2", 3*time.Minute)
		const g, n = "d2-slow", 4
		e.startServe(e.writeConfig(group{ID: g, MaxSize: 10}), nil)
		s := e.newStandIn(nil, false)
		keys := e.createPods("p", n, podSpec{CPU: "1500m", Selector: map[string]string{providers.LabelGroup: g}})
		e.waitFor("every pod seen Unschedulable", 30*time.Second, func(context.Context) (bool, error) {
			for _, k := range keys {
				if seen, _, ok := s.PodTimes(k); !ok || seen.IsZero() {
					return false, nil
				}
			}
			return true, nil
		})
		// Creations may be queued or in flight when the process dies.
		if err := s.IncreaseSize(e.ctx, g, n); err != nil {
			t.Fatal(err)
		}
		e.serve.Kill()
		atKill, err := e.leases(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.serve.Restart(e.ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.targetSize(g); got != len(atKill) {
			t.Errorf("TargetSize right after the restart = %d, want %d: the machines that exist, no more, no fewer", got, len(atKill))
		}
		e.runStandIn() // the stand-in makes up for creations that were lost
		e.waitFor("every pod Running", 90*time.Second, func(ctx context.Context) (bool, error) {
			r, err := e.podsRunning(ctx, keys)
			return r == n, err
		})
		final, err := e.leases(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for name := range atKill {
			if _, ok := final[name]; !ok {
				t.Errorf("machine %s, made before the kill, is gone", name)
			}
		}
		e.checkExactly(g, final, s)
		t.Logf("%d of %d machines were recorded before the kill; the stand-in asked for the other %d after the restart", len(atKill), n, n-len(atKill))
	})
}

// checkExactly checks that group ended with exactly the machines in want: one Node per
// machine record, with the record's providerID, Ready; target equal; and that a few more
// loops change nothing.
func (e *env) checkExactly(group string, want map[string]time.Time, s *standin.StandIn) {
	e.t.Helper()
	check := func() {
		leases, err := e.leases(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if got, w := slices.Sorted(maps.Keys(leases)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
			e.t.Errorf("machine records %v; want exactly %v", got, w)
		}
		nodes := e.waitGroupNodes(group, len(want))
		for _, n := range nodes {
			if _, ok := want[n.Name]; !ok || n.Spec.ProviderID != providerid.Format(n.Name) {
				e.t.Errorf("node %s (providerID %q) is not one of the machines %v", n.Name, n.Spec.ProviderID, slices.Sorted(maps.Keys(want)))
			}
		}
		if got := e.targetSize(group); got != len(want) {
			e.t.Errorf("TargetSize(%s) = %d, want %d", group, got, len(want))
		}
	}
	check()
	// The stand-in keeps looping: nothing may change any more.
	loops := s.Loops()
	e.waitFor("5 more stand-in loops", 30*time.Second, func(context.Context) (bool, error) { return s.Loops() >= loops+5, nil })
	check()
}

func instanceIDs(insts []*protos.Instance) []string {
	out := make([]string, 0, len(insts))
	for _, in := range insts {
		out = append(out, in.GetId())
	}
	slices.Sort(out)
	return out
}

func leaseIDs(leases map[string]time.Time) []string {
	out := make([]string, 0, len(leases))
	for name := range leases {
		out = append(out, providerid.Format(name))
	}
	slices.Sort(out)
	return out
}
