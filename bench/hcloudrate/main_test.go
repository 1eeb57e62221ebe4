package main

import (
	"testing"
	"time"

	"github.com/prebake-dev/prebake/bench/cahour"
)

// TestRates runs 200 servers (4 scan pages) for five simulated minutes at a
// 10 s refreshInterval. Before, every re-list was a full scan: 30 of 4 or 5
// pages. By default full scans are paced by the budget (10 s a page: one
// each 40-50 s) and only in-flight servers are asked about between them,
// so the count falls by more than half, while a server deleted behind
// prebake's back is still dropped within one scan interval and a re-list.
// Both stay far below the naive provider's.
func TestRates(t *testing.T) {
	t.Parallel()
	c := config{servers: 200, groups: 5, hour: 5 * time.Minute}
	const ttl = 10 * time.Second
	before, err := runOurs(c, ttl, -1)
	if err != nil {
		t.Fatal(err)
	}
	now, err := runOurs(c, ttl, 0)
	if err != nil {
		t.Fatal(err)
	}
	naive, err := runNaive(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []result{before, now} {
		if r.creates != churnSize || r.deletes != churnSize {
			t.Fatalf("churn: %d creates, %d deletes; want %d each", r.creates, r.deletes, churnSize)
		}
	}
	// Before: 30 scans of 4 pages (5 while the group is scaled up), 3
	// requests per create (name look-up, POST, a poll of its create_server
	// action) and 2 per delete (GET, DELETE).
	if lo, hi := 30*4+5*churnSize, 30*5+5*churnSize; before.requests < lo || before.requests > hi {
		t.Errorf("before: %d requests, want %d to %d", before.requests, lo, hi)
	}
	if before.noticed != ttl {
		t.Errorf("before: a console delete was dropped after %v, want the next re-list (%v)", before.noticed, ttl)
	}
	if now.requests*2 >= before.requests {
		t.Errorf("default: %d requests, want less than half of the %d before", now.requests, before.requests)
	}
	if bound := 5*10*time.Second + ttl; now.noticed <= 0 || now.noticed > bound {
		t.Errorf("default: a console delete was dropped after %v, want within %v (5 pages × 10 s + one re-list)", now.noticed, bound)
	}
	// Naive: 30 loops × (5 groups × 3 TargetSize lists + 200 gets).
	if min := 30 * (5*3 + 200); naive.requests < min {
		t.Errorf("naive made %d requests, want at least %d", naive.requests, min)
	}
	t.Logf("5 simulated minutes at 200 servers: before %d requests (console delete seen after %v), default %d (after %v), naive %d",
		before.requests, before.noticed, now.requests, now.noticed, naive.requests)
}

// TestDefaultStaysWithinTheBudget guards the figure docs/performance.md
// quotes (19% of Hetzner's 3,600 requests/hour): the default provider at
// 1,000 servers in 20 groups, with the default refreshInterval (10 s),
// stays at or below a quarter of the budget.
//
// The full simulated hour took 64 s under -race on the shared 2-core
// machine (18 s of it creating the fleet, 42 s the hour), so the test runs
// a sixth of the hour and multiplies by six (25 s): what makes requests
// repeats with periods that divide 10 minutes (a full scan every 200 s at
// 20 pages; a churn cycle every 300 s), so 10 minutes hold 3 full scans
// and 2 churn cycles, a sixth of the hour's 18 and 12. Checked here: the
// full hour made 689, 698 and 701 requests in three runs; six times the
// window, 690, 696 and 702. The console delete after the hour makes no
// difference to the count and is left out.
func TestDefaultStaysWithinTheBudget(t *testing.T) {
	t.Parallel()
	const window, defaultRefresh = 10 * time.Minute, 10 * time.Second
	c := config{servers: 1000, groups: 20, hour: window, skipConsoleDelete: true}
	r, err := runOurs(c, defaultRefresh, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := int(window / (cahour.ChurnEvery * cahour.Loop) * churnSize); r.creates != want || r.deletes != want {
		t.Fatalf("churn in the window: %d creates, %d deletes; want %d each", r.creates, r.deletes, want)
	}
	perHour := float64(r.requests) * float64(time.Hour/window)
	share := perHour / Budget
	t.Logf("%d requests in %v (%d GET /servers): %.0f an hour, %.1f%% of the budget", r.requests, window, r.lists, perHour, 100*share)
	if share > 0.25 {
		t.Errorf("%d requests in %v, %.0f an hour: %.1f%% of Hetzner's %d/hour, want at most 25%%", r.requests, window, perHour, 100*share, Budget)
	}
}
