package autoscaling

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/internal/manualclock"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// poolUserData renders what bootstrap would, reduced to what the tests
// check: a standby's user-data prepares and holds no token; any other
// machine's joins with a token made for this rendering.
type poolUserData struct{ tokens atomic.Int64 }

func (u *poolUserData) UserData(_ context.Context, m Machine) ([]byte, error) {
	if m.Request.Standby != "" {
		return []byte("prepare " + m.Request.Name), nil
	}
	return fmt.Appendf(nil, "join %s token-%d", m.Request.Name, u.tokens.Add(1)), nil
}

func joins(ud []byte) bool { return strings.HasPrefix(string(ud), "join ") }

// poolFake is a fake cloud that parks standbys stopped.
func poolFake() *fake.Provider {
	p := fake.New()
	p.Standby = []providers.StandbyState{providers.StandbyStopped}
	return p
}

func poolGroup(size, maxSize int) GroupSpec {
	return GroupSpec{ID: "g1", Provider: "fake", MinSize: 0, MaxSize: maxSize, MachineType: "m1", Zone: "z1",
		WarmPool: WarmPool{Size: size, State: providers.StandbyStopped}}
}

// poolOptions gives the core a user-data source (a warm pool needs one)
// and metrics the test reads.
func poolOptions(m *Metrics, edit func(*Options)) func(*Options) {
	return func(o *Options) {
		o.UserData, o.Metrics = &poolUserData{}, m
		if edit != nil {
			edit(o)
		}
	}
}

func mustPool(t *testing.T, c *Core) PoolView {
	t.Helper()
	v, err := c.Pool("g1")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fillPool tends c's pool until it holds n parked standbys: the cloud
// prepares each standby it has, the core parks it.
func fillPool(t *testing.T, c *Core, p *fake.Provider, n int) {
	t.Helper()
	c.TendPools(t.Context())
	eventually(t, fmt.Sprintf("%d parked standbys", n), func() bool {
		p.PrepareStandbys()
		c.Sync(t.Context(), true)
		c.TendPools(t.Context())
		v := mustPool(t, c)
		return v.Parked == n && v.Warming == 0 && v.Prepared == 0
	})
}

// standbyCreates and nodeCreates split the fake's Create requests.
func standbyCreates(p *fake.Provider) (standby, node int) {
	for _, r := range p.CreateRequests() {
		if r.Standby != "" {
			standby++
		} else {
			node++
		}
	}
	return standby, node
}

// noStandbyJoined fails t if a machine of p both carries the standby
// marker and runs with join user-data: the one thing a warm pool must
// never leave behind.
func noStandbyJoined(t *testing.T, p *fake.Provider) {
	t.Helper()
	for _, id := range p.Machines() {
		m, _ := p.Machine(id)
		if m.Standby.Phase != providers.StandbyNone && joins(m.UserData) {
			t.Errorf("%s is a standby (%v) holding join user-data %q", id, m.Standby, m.UserData)
		}
		if m.Standby.Phase != providers.StandbyNone && !m.Stopped && m.Standby.Phase == providers.StandbyParked {
			t.Errorf("%s is parked but running", id)
		}
	}
}

func TestWarmPoolIsInvisibleToCAButCountsTowardMax(t *testing.T) {
	t.Parallel()
	p := poolFake()
	m := NewMetrics(nil)
	c := newCoreWith(t, p, poolOptions(m, nil), poolGroup(2, 3))
	fillPool(t, c, p, 2)

	if got := mustTarget(t, c, "g1"); got != 0 {
		t.Errorf("target with 2 standbys = %d, want 0", got)
	}
	if got := mustNodes(t, c, "g1"); len(got) != 0 {
		t.Errorf("Nodes with 2 standbys = %+v, want none", got)
	}
	pool := mustPool(t, c)
	for _, id := range pool.Standbys {
		m, _ := p.Machine(id)
		if string(m.UserData) != "prepare "+strings.TrimPrefix(id, "fake://") || !m.Stopped {
			t.Errorf("standby %s: user-data %q, stopped %v; want prepare-only, stopped", id, m.UserData, m.Stopped)
		}
		if err := c.DeleteNodes("g1", []Node{{ProviderID: id}}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("DeleteNodes of standby %s = %v, want invalid argument: CA has no such node", id, err)
		}
	}
	if err := c.DecreaseTargetSize("g1", -1); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("DecreaseTargetSize with only standbys = %v, want failed precondition", err)
	}
	if got := gaugeValue(t, m, "prebake_group_instances", "state", "creating") + gaugeValue(t, m, "prebake_group_instances", "state", "running"); got != 0 {
		t.Errorf("prebake_group_instances counts %v standbys", got)
	}
	if got := gaugeValue(t, m, "prebake_warm_pool_standbys", "phase", "parked"); got != 2 {
		t.Errorf("prebake_warm_pool_standbys{phase=parked} = %v, want 2", got)
	}
	// maxSize 3 holds target + pool: a scale-up of 3 takes both standbys
	// and creates one; a fourth is refused.
	if err := c.IncreaseSize("g1", 4); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("IncreaseSize(4) with maxSize 3 = %v", err)
	}
	if err := c.IncreaseSize("g1", 3); err != nil {
		t.Fatal(err)
	}
	c.TendPools(t.Context())
	if v := mustPool(t, c); len(v.Standbys) != 0 {
		t.Errorf("pool at maxSize = %+v, want empty: standbys count toward maxSize", v)
	}
}

func TestWarmPoolScaleUpResumesStandbysThenCreates(t *testing.T) {
	t.Parallel()
	p := poolFake()
	m := NewMetrics(nil)
	c := newCoreWith(t, p, poolOptions(m, nil), poolGroup(2, 10))
	fillPool(t, c, p, 2)
	standbys := mustPool(t, c).Standbys

	if err := c.IncreaseSize("g1", 3); err != nil {
		t.Fatal(err)
	}
	// CA sees three instances at once, two of them the standbys.
	if got := mustTarget(t, c, "g1"); got != 3 {
		t.Fatalf("target = %d, want 3", got)
	}
	var ids []string
	for _, v := range mustNodes(t, c, "g1") {
		ids = append(ids, v.ProviderID)
		if v.State != providers.StateCreating {
			t.Errorf("%s: %v right after IncreaseSize, want creating", v.ProviderID, v.State)
		}
	}
	for _, s := range standbys {
		if !slices.Contains(ids, s) {
			t.Errorf("Nodes %v lack the taken standby %s", ids, s)
		}
	}
	eventually(t, "2 resumes and 1 create", func() bool {
		_, nodes := standbyCreates(p)
		return p.Calls("Resume") == 2 && nodes == 1
	})
	tokens := map[string]bool{}
	for _, s := range standbys {
		eventually(t, s+" resumed", func() bool { mm, _ := p.Machine(s); return !mm.Stopped })
		mm, _ := p.Machine(s)
		if mm.Standby.Phase != providers.StandbyNone || !joins(mm.UserData) {
			t.Errorf("resumed %s: standby %v, user-data %q; want no marker and join user-data", s, mm.Standby, mm.UserData)
		}
		tokens[string(mm.UserData)] = true
		if tl, _ := c.Timeline(s); !tl.FromWarmPool || tl.Accepted.IsZero() {
			t.Errorf("timeline of %s = %+v, want FromWarmPool and accepted", s, tl)
		}
	}
	if len(tokens) != 2 {
		t.Errorf("the resumed standbys got %d distinct join user-data, want 2 (a fresh token each)", len(tokens))
	}
	if got := testutil.ToFloat64(m.poolTaken.WithLabelValues("g1")); got != 2 {
		t.Errorf("prebake_warm_pool_taken_total = %v, want 2", got)
	}
	// The pool refills in the background: nobody calls TendPools here.
	eventually(t, "the pool refilled", func() bool { s, _ := standbyCreates(p); return s == 4 })
	noStandbyJoined(t, p)
}

func TestWarmPoolFailedResumeFallsBackToCreate(t *testing.T) {
	t.Parallel()
	p := poolFake()
	m := NewMetrics(nil)
	c := newCoreWith(t, p, poolOptions(m, nil), poolGroup(1, 10))
	fillPool(t, c, p, 1)
	standby := mustPool(t, c).Standbys[0]
	p.InjectResumeErrors(errors.New("fake: the standby's disk is gone"))

	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the standby deleted and a machine created instead", func() bool {
		_, nodes := standbyCreates(p)
		_, exists := p.Machine(standby)
		return nodes == 1 && !exists
	})
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Errorf("target after the fallback = %d, want 1", got)
	}
	if v := mustNodes(t, c, "g1"); len(v) != 1 || v[0].ProviderID == standby || v[0].Error != nil {
		t.Errorf("Nodes after the fallback = %+v, want one machine, not %s, without error", v, standby)
	}
	if got := testutil.ToFloat64(m.poolFallbacks.WithLabelValues("g1", "create_failed")); got != 1 {
		t.Errorf("prebake_warm_pool_resume_fallbacks_total = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.createErrors); got != 0 {
		t.Errorf("a fallback is no create error CA sees, got %v", got)
	}
}

func TestWarmPoolReplacesStandbysOlderThanTheChannelHead(t *testing.T) {
	t.Parallel()
	p := poolFake()
	p.BootsImages = true
	src := &memCatalog{}
	ims := []imagecatalog.Image{catalogImage("img-a", 1, "amd64"), catalogImage("img-b", 2, "amd64")}
	src.set(catalogWith(t, ims, "img-a"), nil)
	m := NewMetrics(nil)
	g := poolGroup(2, 10)
	g.ImageChannel = "stable"
	c := newCoreWith(t, p, poolOptions(m, func(o *Options) { o.Catalog = src }), g)
	fillPool(t, c, p, 2)
	old := mustPool(t, c).Standbys

	// Promote B: the next sync reloads the catalog. A scale-up now takes no
	// standby of A; it creates a machine of B.
	src.set(catalogWith(t, ims, "img-a", "img-b"), nil)
	c.Sync(t.Context(), true)
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a machine of img-b", func() bool {
		for _, r := range p.CreateRequests() {
			if r.Standby == "" && r.Image == "img-b" {
				return true
			}
		}
		return false
	})
	if got := p.Calls("Resume"); got != 0 {
		t.Errorf("Resume called %d times: a standby of the old head was resumed", got)
	}
	fillPool(t, c, p, 2)
	for _, id := range old {
		if _, ok := p.Machine(id); ok {
			t.Errorf("standby %s of img-a still exists after the promote", id)
		}
	}
	for _, id := range mustPool(t, c).Standbys {
		if mm, _ := p.Machine(id); mm.Image != "img-b" {
			t.Errorf("standby %s boots %q, want img-b", id, mm.Image)
		}
	}
	if got := testutil.ToFloat64(m.poolDiscarded.WithLabelValues("g1", DiscardStaleImage)); got != 2 {
		t.Errorf("discarded stale_image = %v, want 2", got)
	}
}

// startKillable starts a core over p that the test kills (cancels, no
// Shutdown) as a crash would end the process.
func startKillable(t *testing.T, p providers.Provider, o func(*Options), groups ...GroupSpec) (*Core, context.CancelFunc) {
	t.Helper()
	var n atomic.Int64
	opts := Options{
		Cluster: "test", Groups: groups, Providers: map[string]providers.Provider{p.Name(): p},
		RefreshInterval: time.Hour,
		Workers:         WorkerOptions{Parallelism: 4, QPS: 1000, Retries: 2, RetryBase: time.Millisecond},
		NameRand:        func() string { return fmt.Sprintf("k%04d", n.Add(1)) },
	}
	o(&opts)
	c, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return c, cancel
}

// TestWarmPoolKilledMidScaleUp kills the process while two resumes are
// between their marker's removal and the machine's start. The restarted
// process finds no machine that is both a standby and joined; the two
// half-taken machines show to CA as failed and are deleted when CA
// deletes them; the pool is rebuilt.
func TestWarmPoolKilledMidScaleUp(t *testing.T) {
	t.Parallel()
	p := poolFake()
	c1, kill := startKillable(t, p, poolOptions(NewMetrics(nil), nil), poolGroup(2, 10))
	fillPool(t, c1, p, 2)
	standbys := mustPool(t, c1).Standbys
	hold := p.GateResumes()
	defer hold()
	if err := c1.IncreaseSize("g1", 3); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both resumes past the marker", func() bool {
		for _, s := range standbys {
			if mm, _ := p.Machine(s); mm.Standby.Phase != providers.StandbyNone {
				return false
			}
		}
		return p.Calls("Resume") == 2
	})
	kill()
	noStandbyJoined(t, p)

	c2 := newCoreWith(t, p, poolOptions(NewMetrics(nil), nil), poolGroup(2, 10))
	noStandbyJoined(t, p)
	views := mustNodes(t, c2, "g1")
	failed := 0
	for _, v := range views {
		if slices.Contains(standbys, v.ProviderID) {
			if v.Error == nil {
				t.Errorf("half-taken %s shows to CA without error: %+v", v.ProviderID, v)
			}
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("restarted Nodes = %+v, want both half-taken standbys among them, failed", views)
	}
	// CA deletes failed instances; those machines exist, so they go.
	if err := c2.DeleteNodes("g1", []Node{{ProviderID: standbys[0]}, {ProviderID: standbys[1]}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the half-taken machines deleted", func() bool {
		_, a := p.Machine(standbys[0])
		_, b := p.Machine(standbys[1])
		return !a && !b
	})
	fillPool(t, c2, p, 2)
	noStandbyJoined(t, p)
}

// TestWarmPoolRebuiltFromListAfterRestart: a restarted process finds the
// parked standbys by their marker and resumes them; it creates none.
func TestWarmPoolRebuiltFromListAfterRestart(t *testing.T) {
	t.Parallel()
	p := poolFake()
	c1, kill := startKillable(t, p, poolOptions(NewMetrics(nil), nil), poolGroup(2, 10))
	fillPool(t, c1, p, 2)
	before := mustPool(t, c1).Standbys
	kill()
	creates := len(p.CreateRequests())

	c2 := newCoreWith(t, p, poolOptions(NewMetrics(nil), nil), poolGroup(2, 10))
	c2.TendPools(t.Context())
	if v := mustPool(t, c2); v.Parked != 2 || !slices.Equal(v.Standbys, before) {
		t.Fatalf("restarted pool = %+v, want %v parked", v, before)
	}
	if got := len(p.CreateRequests()); got != creates {
		t.Errorf("the restarted process created %d machines for a full pool", got-creates)
	}
	if err := c2.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both standbys resumed", func() bool { return p.Calls("Resume") == 2 })
	if _, nodes := standbyCreates(p); nodes != 0 {
		t.Errorf("%d machines created for a scale-up the pool covered", nodes)
	}
}

// A standby whose machine registers a Node joined: it is a node of its
// group, never a standby again.
func TestStandbyWithANodeIsANode(t *testing.T) {
	t.Parallel()
	p := poolFake()
	c := newCoreWith(t, p, poolOptions(NewMetrics(nil), nil), poolGroup(1, 10))
	fillPool(t, c, p, 1)
	id := mustPool(t, c).Standbys[0]
	c.ObserveNode("n1", id, true, time.Now())
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Errorf("target after the standby's Node appeared = %d, want 1", got)
	}
	c.Sync(t.Context(), true) // the cloud still shows the marker
	if v := mustPool(t, c); slices.Contains(v.Standbys, id) {
		t.Errorf("pool %+v still holds %s, which has a Node", v, id)
	}
}

func TestDecreaseTargetSizeCancelsAResumeInFlight(t *testing.T) {
	t.Parallel()
	p := poolFake()
	c := newCoreWith(t, p, poolOptions(NewMetrics(nil), nil), poolGroup(1, 10))
	fillPool(t, c, p, 1)
	id := mustPool(t, c).Standbys[0]
	hold := p.GateResumes()
	defer hold()
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the resume in flight", func() bool { return p.Calls("Resume") == 1 })
	if err := c.DecreaseTargetSize("g1", -1); err != nil {
		t.Fatal(err)
	}
	if got := mustTarget(t, c, "g1"); got != 0 {
		t.Errorf("target = %d, want 0", got)
	}
	hold()
	eventually(t, "the cancelled machine deleted", func() bool { _, ok := p.Machine(id); return !ok })
}

func TestNewRejectsAWarmPoolItCantKeep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		p     *fake.Provider
		group func(*GroupSpec)
		ud    bool
		want  string
	}{
		{"provider parks nothing", fake.New(), nil, true,
			`node group "g1": warmPool.state "stopped": provider fake can't keep standbys stopped (it can't park machines at all)`},
		{"state the provider lacks", poolFake(), func(g *GroupSpec) { g.WarmPool.State = providers.StandbySuspended }, true,
			`warmPool.state "suspended": provider fake can't keep standbys suspended (it parks them stopped)`},
		{"larger than maxSize", poolFake(), func(g *GroupSpec) { g.WarmPool.Size = 11 }, true,
			`node group "g1": warmPool.size 11 is more than maxSize 10`},
		{"negative", poolFake(), func(g *GroupSpec) { g.WarmPool.Size = -1 }, true, `warmPool.size -1 is negative`},
		{"negative warmingTimeout", poolFake(), func(g *GroupSpec) { g.WarmPool.WarmingTimeout = -time.Second }, true,
			`node group "g1": warmPool.warmingTimeout -1s is negative`},
		{"userDataFile", poolFake(), func(g *GroupSpec) { g.UserData = []byte("#cloud-config\n") }, true,
			`node group "g1": warmPool needs the user-data prebake renders`},
		{"no user-data source", poolFake(), nil, false, `warmPool needs the user-data prebake renders`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := poolGroup(2, 10)
			if tc.group != nil {
				tc.group(&g)
			}
			o := Options{Cluster: "c", Groups: []GroupSpec{g}, Providers: map[string]providers.Provider{"fake": tc.p}}
			if tc.ud {
				o.UserData = &poolUserData{}
			}
			_, err := New(t.Context(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want %q", err, tc.want)
			}
		})
	}
}

// gaugeValue sums the samples of the gauge name of group g1 whose label
// key has value.
func gaugeValue(t *testing.T, m *Metrics, name, key, value string) float64 {
	t.Helper()
	g, ok := m.reg.(prometheus.Gatherer)
	if !ok {
		t.Fatal("the metrics' registry gathers nothing")
	}
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] == "g1" && labels[key] == value {
				sum += mt.GetGauge().GetValue()
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no %s{group=g1,%s=%s}", name, key, value)
	}
	return sum
}

// A taken standby whose resume has not started goes back to the pool when
// CA cancels it.
func TestDecreaseTargetSizeReturnsAQueuedTakeToThePool(t *testing.T) {
	t.Parallel()
	p := poolFake()
	c := newCoreWith(t, p, poolOptions(NewMetrics(nil), func(o *Options) { o.Workers.Parallelism = 1 }), poolGroup(2, 10))
	fillPool(t, c, p, 2)
	// The one worker is busy resuming the first standby taken.
	hold := p.GateResumes()
	defer hold()
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker busy resuming", func() bool { return p.Calls("Resume") == 1 })
	// The second take waits behind it; cancel one instance: the least
	// advanced, that queued take.
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.DecreaseTargetSize("g1", -1); err != nil {
		t.Fatal(err)
	}
	if v := mustPool(t, c); v.Parked != 1 {
		t.Errorf("pool after the cancel = %+v, want the second standby parked again", v)
	}
	hold()
	eventually(t, "the first standby resumed", func() bool {
		for _, v := range mustNodes(t, c, "g1") {
			if tl, _ := c.Timeline(v.ProviderID); tl.Accepted.IsZero() {
				return false
			}
		}
		return true
	})
	if got := p.Calls("Resume"); got != 1 {
		t.Errorf("Resume called %d times, want 1: the cancelled take must not resume", got)
	}
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Errorf("target = %d, want 1", got)
	}
}

// A standby whose prepared report never comes is deleted once it has
// warmed longer than warmPool.warmingTimeout, and another takes its slot;
// a parked standby of the same age stays.
func TestWarmPoolDiscardsAStandbyWarmingTooLong(t *testing.T) {
	t.Parallel()
	clock := manualclock.New(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	p := poolFake()
	p.Now = clock.Now
	m := NewMetrics(nil)
	var logs syncBuffer
	c := newCoreWith(t, p, poolOptions(m, func(o *Options) {
		o.Now = clock.Now
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}), poolGroup(2, 10))
	c.TendPools(t.Context())
	eventually(t, "2 standbys accepted", func() bool {
		v := mustPool(t, c)
		for _, id := range v.Standbys {
			if tl, _ := c.Timeline(id); tl.Accepted.IsZero() {
				return false
			}
		}
		return len(v.Standbys) == 2
	})
	standbys := mustPool(t, c).Standbys
	stuck, ready := standbys[0], standbys[1]
	p.PrepareStandby(ready)
	eventually(t, ready+" parked", func() bool {
		c.Sync(t.Context(), true)
		c.TendPools(t.Context())
		return mustPool(t, c).Parked == 1
	})
	discarded := func() float64 {
		return testutil.ToFloat64(m.poolDiscarded.WithLabelValues("g1", DiscardWarmingTimeout))
	}

	clock.Advance(DefaultWarmingTimeout)
	c.TendPools(t.Context())
	if v := mustPool(t, c); v.Warming != 1 || v.Parked != 1 || discarded() != 0 {
		t.Fatalf("after exactly warmingTimeout: pool %+v, discarded %v; want %s still warming", v, discarded(), stuck)
	}

	clock.Advance(time.Second)
	c.TendPools(t.Context())
	if got := discarded(); got != 1 {
		t.Errorf("prebake_warm_pool_discarded_total{reason=warming_timeout} = %v, want 1", got)
	}
	eventually(t, stuck+" deleted and a third standby created", func() bool {
		_, exists := p.Machine(stuck)
		s, _ := standbyCreates(p)
		return !exists && s == 3
	})
	if v := mustPool(t, c); len(v.Standbys) != 2 || v.Parked != 1 || !slices.Contains(v.Standbys, ready) || slices.Contains(v.Standbys, stuck) {
		t.Errorf("pool after the timeout = %+v, want %s parked beside a new standby", v, ready)
	}
	if l := logs.String(); !strings.Contains(l, "still warming after warmPool.warmingTimeout") || !strings.Contains(l, stuck) {
		t.Errorf("the timeout of %s is not logged:\n%s", stuck, l)
	}
}

// A restarted process counts a warming standby's time from its creation
// as List gives it; where the provider gives none, from the moment it
// first listed the standby.
func TestWarmPoolWarmingTimeoutAfterRestart(t *testing.T) {
	t.Parallel()
	for _, createdAtKnown := range []bool{true, false} {
		t.Run(fmt.Sprintf("createdAtKnown=%v", createdAtKnown), func(t *testing.T) {
			t.Parallel()
			clock := manualclock.New(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
			p := poolFake()
			p.Now = clock.Now
			if !createdAtKnown {
				p.Now = func() time.Time { return time.Time{} }
			}
			withClock := func(o *Options) { o.Now = clock.Now }
			c1, kill := startKillable(t, p, poolOptions(NewMetrics(nil), withClock), poolGroup(1, 10))
			c1.TendPools(t.Context())
			eventually(t, "the standby created", func() bool { return len(p.Machines()) == 1 })
			kill()
			id := p.Machines()[0]

			clock.Advance(9 * time.Minute)
			m := NewMetrics(nil)
			c2 := newCoreWith(t, p, poolOptions(m, withClock), poolGroup(1, 10))
			discarded := func() float64 {
				return testutil.ToFloat64(m.poolDiscarded.WithLabelValues("g1", DiscardWarmingTimeout))
			}
			// 10m1s since its creation, 1m1s since the restart.
			clock.Advance(time.Minute + time.Second)
			c2.TendPools(t.Context())
			if createdAtKnown {
				if got := discarded(); got != 1 {
					t.Fatalf("discarded %v 10m1s after its creation, want 1: the timeout counts from CreatedAt", got)
				}
			} else {
				if got := discarded(); got != 0 {
					t.Fatalf("discarded %v 1m1s after it was first listed, without CreatedAt; want 0", got)
				}
				clock.Advance(9 * time.Minute) // 10m1s since first listed
				c2.TendPools(t.Context())
				if got := discarded(); got != 1 {
					t.Fatalf("discarded %v 10m1s after it was first listed, want 1", got)
				}
			}
			eventually(t, id+" deleted", func() bool { _, ok := p.Machine(id); return !ok })
		})
	}
}
