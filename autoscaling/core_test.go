package autoscaling

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// newCore starts a core over p, with fast workers and a one-hour TTL: tests
// call Sync(force) themselves.
func newCore(t *testing.T, p providers.Provider, groups ...GroupSpec) *Core {
	t.Helper()
	return newCoreWith(t, p, nil, groups...)
}

// newCoreWith is newCore with the options edited by edit first.
func newCoreWith(t *testing.T, p providers.Provider, edit func(*Options), groups ...GroupSpec) *Core {
	t.Helper()
	if len(groups) == 0 {
		groups = []GroupSpec{{ID: "g1", Provider: "fake", MinSize: 0, MaxSize: 10, MachineType: "m1", Zone: "z1"}}
	}
	var n atomic.Int64
	o := Options{
		Cluster:         "test",
		Groups:          groups,
		Providers:       map[string]providers.Provider{p.Name(): p},
		RefreshInterval: time.Hour, // tests call Sync(force) explicitly
		Reserved:        providers.Reserved{MilliCPU: 100, MemoryBytes: 256 << 20},
		GPULabel:        "prebake.dev/gpu",
		Workers:         WorkerOptions{Parallelism: 4, QPS: 1000, Retries: 2, RetryBase: time.Millisecond},
		NameRand:        func() string { return fmt.Sprintf("%05d", n.Add(1)) },
	}
	if edit != nil {
		edit(&o)
	}
	c, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = c.Shutdown(sctx)
		cancel()
	})
	return c
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func mustTarget(t *testing.T, c *Core, id string) int {
	t.Helper()
	n, err := c.TargetSize(id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustNodes(t *testing.T, c *Core, id string) []InstanceView {
	t.Helper()
	v, err := c.Nodes(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestIncreaseSizeIsRecordedBeforeMachinesExist(t *testing.T) {
	t.Parallel()
	p := fake.New()
	release := p.GateCreates() // the cloud hangs
	defer release()
	c := newCore(t, p)

	if err := c.IncreaseSize("g1", 3); err != nil {
		t.Fatal(err)
	}
	if got := mustTarget(t, c, "g1"); got != 3 {
		t.Fatalf("target = %d right after IncreaseSize, want 3", got)
	}
	want := []InstanceView{
		{ProviderID: "fake://g1-00001", State: providers.StateCreating},
		{ProviderID: "fake://g1-00002", State: providers.StateCreating},
		{ProviderID: "fake://g1-00003", State: providers.StateCreating},
	}
	if diff := cmp.Diff(want, mustNodes(t, c, "g1")); diff != "" {
		t.Fatalf("instances while the cloud hangs (-want +got):\n%s", diff)
	}
	release()
	eventually(t, "3 machines", func() bool { return len(p.Machines()) == 3 })
	if diff := cmp.Diff([]string{"fake://g1-00001", "fake://g1-00002", "fake://g1-00003"}, p.Machines()); diff != "" {
		t.Fatalf("machines created under other ids than listed (-listed +created):\n%s", diff)
	}
	p.RunAll()
	c.Sync(t.Context(), true)
	for _, v := range mustNodes(t, c, "g1") {
		if v.State != providers.StateRunning {
			t.Errorf("%s: state %v after the cloud reports it running", v.ProviderID, v.State)
		}
	}
}

func TestIncreaseSizeValidation(t *testing.T) {
	t.Parallel()
	c := newCore(t, fake.New())
	tests := []struct {
		name  string
		group string
		delta int
		want  error
	}{
		{"zero delta", "g1", 0, ErrInvalidArgument},
		{"negative delta", "g1", -1, ErrInvalidArgument},
		{"above max", "g1", 11, ErrFailedPrecondition},
		{"unknown group", "nope", 1, ErrUnknownGroup},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.IncreaseSize(tc.group, tc.delta); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if got := mustTarget(t, c, "g1"); got != 0 {
		t.Fatalf("a rejected IncreaseSize changed the target to %d", got)
	}
}

func TestPlaceholderIsReplacedByRealID(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.KnownIDs = false
	release := p.GateCreates()
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	v := mustNodes(t, c, "g1")
	if len(v) != 1 || !strings.HasPrefix(v[0].ProviderID, placeholderScheme) {
		t.Fatalf("before the cloud answers want one placeholder, got %+v", v)
	}
	release()
	eventually(t, "real id", func() bool {
		v := mustNodes(t, c, "g1")
		return len(v) == 1 && v[0].ProviderID == "fake://1"
	})
	// The real id is found by NodeGroupForNode.
	if g, ok := c.NodeGroupForNode(Node{ProviderID: "fake://1", Name: "whatever"}); !ok || g.ID != "g1" {
		t.Fatalf("NodeGroupForNode(real id) = %+v, %v", g, ok)
	}
}

func TestCapacityErrorIsReportedForFailover(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.SetCapacity(1)
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	var failed InstanceView
	eventually(t, "a creation error", func() bool {
		for _, v := range mustNodes(t, c, "g1") {
			if v.Error != nil {
				failed = v
				return true
			}
		}
		return false
	})
	if failed.State != providers.StateCreating || failed.Error.Class != providers.ErrorOutOfResources || failed.Error.Code != "resource_unavailable" {
		t.Fatalf("failed instance = %+v (error %+v), want creating + OutOfResources + resource_unavailable", failed, failed.Error)
	}
	// CA deletes the failed instance as a fake node: name = providerID.
	if err := c.DeleteNodes("g1", []Node{{Name: failed.ProviderID, ProviderID: failed.ProviderID}}); err != nil {
		t.Fatal(err)
	}
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Fatalf("target = %d after deleting the failed instance, want 1", got)
	}
	for _, v := range mustNodes(t, c, "g1") {
		if v.ProviderID == failed.ProviderID {
			t.Fatalf("failed instance still listed after DeleteNodes: %+v", v)
		}
	}
}

func TestRetryableErrorsAreRetried(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.InjectCreateErrors(fake.ErrTransient, fake.ErrTransient) // Retries: 2
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "machine", func() bool { return len(p.Machines()) == 1 })
	if v := mustNodes(t, c, "g1"); v[0].Error != nil {
		t.Fatalf("error shown although a retry succeeded: %+v", v[0].Error)
	}
	if got := p.Calls("Create"); got != 3 {
		t.Fatalf("Create called %d times, want 3", got)
	}
}

func TestRetriesExhaustedShowAsOther(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.InjectCreateErrors(fake.ErrTransient, fake.ErrTransient, fake.ErrTransient)
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "error", func() bool { return mustNodes(t, c, "g1")[0].Error != nil })
	if e := mustNodes(t, c, "g1")[0].Error; e.Class != providers.ErrorOther || e.Code != "api_5xx" {
		t.Fatalf("error = %+v, want Other/api_5xx", e)
	}
}

func TestDecreaseTargetSizeCancelsOnlyPending(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "2 machines", func() bool { return len(p.Machines()) == 2 })
	p.RunAll()
	c.Sync(t.Context(), true)

	release := p.GateCreates()
	if err := c.IncreaseSize("g1", 3); err != nil {
		t.Fatal(err)
	}
	if err := c.DecreaseTargetSize("g1", -4); !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("decreasing past the running nodes: err = %v, want ErrFailedPrecondition", err)
	}
	if err := c.DecreaseTargetSize("g1", 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("positive delta: err = %v", err)
	}
	if err := c.DecreaseTargetSize("g1", -3); err != nil {
		t.Fatal(err)
	}
	if got := mustTarget(t, c, "g1"); got != 2 {
		t.Fatalf("target = %d, want 2", got)
	}
	release()
	// Cancelled creations (queued or in flight) must not survive.
	// The cloud drops each cancelled machine before the core forgets it, so
	// wait for both.
	want := []InstanceView{{ProviderID: "fake://g1-00001", State: providers.StateRunning}, {ProviderID: "fake://g1-00002", State: providers.StateRunning}}
	eventually(t, "only the running machines, in the cloud and in the core", func() bool {
		return cmp.Equal(p.Machines(), []string{"fake://g1-00001", "fake://g1-00002"}) && cmp.Equal(mustNodes(t, c, "g1"), want)
	})
}

func TestDeleteNodes(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p,
		GroupSpec{ID: "g1", Provider: "fake", MinSize: 1, MaxSize: 5, MachineType: "m1", Zone: "z1"},
		GroupSpec{ID: "g2", Provider: "fake", MinSize: 0, MaxSize: 5, MachineType: "m1", Zone: "z1"},
	)
	for _, g := range []string{"g1", "g2"} {
		if err := c.IncreaseSize(g, 2); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "4 machines", func() bool { return len(p.Machines()) == 4 })
	p.RunAll()
	c.Sync(t.Context(), true)
	g1 := mustNodes(t, c, "g1")
	g2 := mustNodes(t, c, "g2")

	if err := c.DeleteNodes("g1", []Node{{Name: "x", ProviderID: g2[0].ProviderID}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("node of another group: err = %v", err)
	}
	if err := c.DeleteNodes("g1", []Node{{ProviderID: g1[0].ProviderID}, {ProviderID: g1[1].ProviderID}}); !errors.Is(err, ErrFailedPrecondition) {
		t.Fatalf("below min: err = %v", err)
	}
	if got := mustTarget(t, c, "g1"); got != 2 {
		t.Fatalf("a refused DeleteNodes changed the target to %d", got)
	}
	// By node name (the machine name), as a real Node from CA would come.
	if err := c.DeleteNodes("g1", []Node{{Name: "g1-00001"}}); err != nil {
		t.Fatal(err)
	}
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Fatalf("target = %d, want 1", got)
	}
	// Idempotent: the same node again is a no-op, not a second decrement.
	if err := c.DeleteNodes("g1", []Node{{Name: "g1-00001", ProviderID: "fake://g1-00001"}}); err != nil && !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Fatalf("target = %d after a repeated delete, want 1", got)
	}
	eventually(t, "machine gone", func() bool { return len(p.Machines()) == 3 })
	c.Sync(t.Context(), true)
	if v := mustNodes(t, c, "g1"); len(v) != 1 {
		t.Fatalf("g1 lists %+v after the delete finished", v)
	}
}

func TestRestartRebuildsFromTheCloud(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c1 := newCore(t, p)
	if err := c1.IncreaseSize("g1", 3); err != nil {
		t.Fatal(err)
	}
	eventually(t, "3 machines", func() bool { return len(p.Machines()) == 3 })
	p.SetState("fake://g1-00001", providers.StateRunning)

	c2 := newCore(t, p) // a restarted plugin over the same cloud
	if got := mustTarget(t, c2, "g1"); got != 3 {
		t.Fatalf("restarted target = %d, want 3", got)
	}
	want := []InstanceView{
		{ProviderID: "fake://g1-00001", State: providers.StateRunning},
		{ProviderID: "fake://g1-00002", State: providers.StateCreating},
		{ProviderID: "fake://g1-00003", State: providers.StateCreating},
	}
	if diff := cmp.Diff(want, mustNodes(t, c2, "g1")); diff != "" {
		t.Fatalf("restarted instances (-want +got):\n%s", diff)
	}
	if g, ok := c2.NodeGroupForNode(Node{ProviderID: "fake://g1-00002"}); !ok || g.ID != "g1" {
		t.Fatalf("restarted NodeGroupForNode = %+v %v", g, ok)
	}
}

func TestVanishedInstanceLeavesTarget(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "2 machines", func() bool { return len(p.Machines()) == 2 })
	p.Remove("fake://g1-00001")
	c.Sync(t.Context(), true)
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Fatalf("target = %d after a machine vanished, want 1", got)
	}
}

func TestRefreshUnavailableUntilFirstList(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.SetListError(errors.New("401 unauthorized"))
	c := newCore(t, p)
	if err := c.Refresh(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Refresh before any successful List: err = %v, want ErrUnavailable", err)
	}
	p.SetListError(nil)
	c.Sync(t.Context(), true)
	if err := c.Refresh(t.Context()); err != nil {
		t.Fatalf("Refresh after a successful List: %v", err)
	}
	// A later List failure keeps serving the snapshot.
	p.SetListError(errors.New("503"))
	c.Sync(t.Context(), true)
	if err := c.Refresh(t.Context()); err != nil {
		t.Fatalf("Refresh with a stale snapshot: %v", err)
	}
}

func TestRefreshHonoursTTL(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p) // TTL one hour
	before := p.Calls("List")
	for range 5 {
		if err := c.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Calls("List") - before; got != 0 {
		t.Fatalf("Refresh listed %d times within the TTL", got)
	}
}

func TestNodeGroupForNode(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		node Node
		want string
	}{
		{"by providerID", Node{ProviderID: "fake://g1-00001", Name: "other"}, "g1"},
		{"fake node", Node{ProviderID: "fake://g1-00001", Name: "fake://g1-00001"}, "g1"},
		{"by name", Node{Name: "g1-00001"}, "g1"},
		{"by labels", Node{Name: "n", Labels: map[string]string{providers.LabelCluster: "test", providers.LabelGroup: "g1"}}, "g1"},
		{"other cluster's label", Node{Name: "n", Labels: map[string]string{providers.LabelCluster: "other", providers.LabelGroup: "g1"}}, ""},
		{"control plane", Node{Name: "cp-1", ProviderID: "kind://cp-1"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, ok := c.NodeGroupForNode(tc.node)
			if ok != (tc.want != "") || g.ID != tc.want {
				t.Fatalf("got %+v, %v; want %q", g, ok, tc.want)
			}
		})
	}
}

func TestTemplateNode(t *testing.T) {
	t.Parallel()
	c := newCore(t, fake.New(),
		GroupSpec{ID: "g1", Provider: "fake", MaxSize: 3, MachineType: "m1", Zone: "z1", Region: "r1",
			Labels: map[string]string{"team": "a"}, Taints: []providers.Taint{{Key: "k", Value: "v", Effect: "NoSchedule"}}},
		GroupSpec{ID: "gpu", Provider: "fake", MaxSize: 3, MachineType: "gpu", Zone: "z1"},
	)
	b, err := c.TemplateNode("g1")
	if err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	if err := n.Unmarshal(b); err != nil {
		t.Fatalf("template bytes are not a core/v1 Node: %v", err)
	}
	wantAlloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1900m"),
		corev1.ResourceMemory: resource.MustParse("3840Mi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	for name, want := range wantAlloc {
		if got := n.Status.Allocatable[name]; got.Cmp(want) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, got.String(), want.String())
		}
	}
	if got := n.Status.Capacity[corev1.ResourceCPU]; got.MilliValue() != 2000 {
		t.Errorf("capacity cpu = %s", got.String())
	}
	for k, v := range map[string]string{"team": "a", providers.LabelGroup: "g1", providers.LabelZone: "z1", providers.LabelRegion: "r1", providers.LabelInstanceType: "m1", providers.LabelArch: "amd64"} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "k" {
		t.Errorf("taints = %+v", n.Spec.Taints)
	}
	if len(n.Status.Conditions) == 0 || n.Status.Conditions[0].Type != corev1.NodeReady || n.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("template is not Ready: %+v", n.Status.Conditions)
	}
	gb, _ := c.TemplateNode("gpu")
	var gn corev1.Node
	if err := gn.Unmarshal(gb); err != nil {
		t.Fatal(err)
	}
	if got := gn.Status.Allocatable["nvidia.com/gpu"]; got.Value() != 1 || gn.Labels["prebake.dev/gpu"] != "nvidia-t4" {
		t.Errorf("gpu template: allocatable %v labels %v", gn.Status.Allocatable, gn.Labels)
	}
	if diff := cmp.Diff([]string{"nvidia-t4"}, c.GPUTypes()); diff != "" {
		t.Error(diff)
	}
}

func TestNewRejectsBadGroups(t *testing.T) {
	t.Parallel()
	p := map[string]providers.Provider{"fake": fake.New()}
	tests := []struct {
		name   string
		groups []GroupSpec
		want   string
	}{
		{"unknown provider", []GroupSpec{{ID: "a", Provider: "hcloud", MaxSize: 1, MachineType: "m1"}}, `provider "hcloud" is not configured`},
		{"unknown machine type", []GroupSpec{{ID: "a", Provider: "fake", MaxSize: 1, MachineType: "huge"}}, `machine type "huge"`},
		{"duplicate", []GroupSpec{{ID: "a", Provider: "fake", MaxSize: 1, MachineType: "m1"}, {ID: "a", Provider: "fake", MaxSize: 1, MachineType: "m1"}}, "configured twice"},
		{"min > max", []GroupSpec{{ID: "a", Provider: "fake", MinSize: 3, MaxSize: 1, MachineType: "m1"}}, "minSize (3) <= maxSize (1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(t.Context(), Options{Cluster: "c", Groups: tc.groups, Providers: p})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestShutdownDrainsCreations(t *testing.T) {
	t.Parallel()
	p := fake.New()
	p.SetCreateDelay(20 * time.Millisecond)
	c, err := New(t.Context(), Options{Cluster: "c", Providers: map[string]providers.Provider{"fake": p},
		Groups: []GroupSpec{{ID: "g1", Provider: "fake", MaxSize: 20, MachineType: "m1"}}, Workers: WorkerOptions{Parallelism: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.IncreaseSize("g1", 6); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(p.Machines()); got != 6 {
		t.Fatalf("%d machines after a graceful shutdown, want all 6 queued creations done", got)
	}
	if err := c.IncreaseSize("g1", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("IncreaseSize after shutdown: err = %v", err)
	}
}

// TestConcurrentHammer drives every RPC from many goroutines; run it with
// -race. Invariants checked at the end: target == instances not deleting,
// within [min, max], and every machine in the cloud is known to the core.
func TestConcurrentHammer(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p,
		GroupSpec{ID: "a", Provider: "fake", MinSize: 1, MaxSize: 30, MachineType: "m1"},
		GroupSpec{ID: "b", Provider: "fake", MinSize: 0, MaxSize: 30, MachineType: "m1"},
	)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			g := []string{"a", "b"}[w%2]
			for i := range 200 {
				switch (i + w) % 7 {
				case 0:
					_ = c.IncreaseSize(g, 1+i%3)
				case 1:
					_ = c.DecreaseTargetSize(g, -1)
				case 2:
					if v, _ := c.Nodes(g); len(v) > 0 {
						_ = c.DeleteNodes(g, []Node{{Name: v[i%len(v)].ProviderID, ProviderID: v[i%len(v)].ProviderID}})
					}
				case 3:
					c.Sync(context.Background(), true)
				case 4:
					p.RunAll()
					_ = c.Refresh(context.Background())
				case 5:
					_, _ = c.TargetSize(g)
					_ = c.NodeGroups()
				case 6:
					_, _ = c.NodeGroupForNode(Node{Name: fmt.Sprintf("%s-%05d", g, i)})
					_, _ = c.TemplateNode(g)
				}
			}
		})
	}
	wg.Wait()
	// Let the workers finish, then check the invariants.
	for _, w := range c.workers {
		if err := w.drain(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	c.Sync(t.Context(), true)
	for _, w := range c.workers {
		if err := w.drain(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	c.Sync(t.Context(), true)
	known := map[string]bool{}
	for _, id := range []string{"a", "b"} {
		target := mustTarget(t, c, id)
		g := c.groups[id]
		if target > g.spec.MaxSize || target < 0 {
			t.Errorf("group %s: target %d outside [0, %d]", id, target, g.spec.MaxSize)
		}
		notDeleting := 0
		for _, v := range mustNodes(t, c, id) {
			known[v.ProviderID] = true
			if v.State != providers.StateDeleting {
				notDeleting++
			}
		}
		if notDeleting != target {
			t.Errorf("group %s: target %d but %d instances not deleting", id, target, notDeleting)
		}
	}
	for _, m := range p.Machines() {
		if !known[m] {
			t.Errorf("machine %s exists in the cloud but the core doesn't list it (leak)", m)
		}
	}
}

func TestLogsNeverHoldUserData(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	p := fake.New()
	p.InjectCreateErrors(errors.New("boom"))
	c, err := New(t.Context(), Options{
		Cluster: "c", Providers: map[string]providers.Provider{"fake": p},
		Groups: []GroupSpec{{ID: "g1", Provider: "fake", MaxSize: 3, MachineType: "m1", UserData: []byte("#cloud-config\njoin-token: s3cr3t-t0ken")}},
		Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both creations settled", func() bool {
		failed := 0
		for _, v := range mustNodes(t, c, "g1") {
			if v.Error != nil {
				failed++
			}
		}
		return failed == 1 && len(p.Machines()) == 1
	})
	if err := c.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "s3cr3t") {
		t.Fatalf("user-data leaked into the logs:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "create failed") {
		t.Fatalf("expected the failure to be logged; logs:\n%s", buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStaleListDoesNotResurrect: a List that started before an instance was
// deleted and forgotten still holds it; applying that answer must not adopt
// it back (it would count against maxSize until the next List). A List
// that starts later and still finds the machine does adopt it: an orphan.
func TestStaleListDoesNotResurrect(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p)
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "2 machines", func() bool { return len(p.Machines()) == 2 })
	c.Sync(t.Context(), true)
	before := time.Now()
	stale, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gone := stale[0].ProviderID
	if err := c.DeleteNodes("g1", []Node{{ProviderID: gone}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted instance forgotten", func() bool {
		c.mu.RLock()
		defer c.mu.RUnlock()
		return c.index.byID(gone) == nil
	})
	c.reconcile(p, stale, before)
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Errorf("target after applying a List that started before the delete = %d, want 1 (the deleted machine must not come back)", got)
	}
	c.reconcile(p, stale, time.Now())
	if got := mustTarget(t, c, "g1"); got != 2 {
		t.Errorf("target after a later List that still finds the machine = %d, want 2 (an orphan is adopted)", got)
	}
}
