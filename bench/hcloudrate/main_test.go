package main

import (
	"testing"
	"time"
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
