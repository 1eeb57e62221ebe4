package main

import (
	"testing"
	"time"
)

// TestRates runs a small fleet for five simulated minutes: the count of our
// provider is one paged scan per TTL plus two requests per create and per
// delete, far below the naive provider's.
func TestRates(t *testing.T) {
	t.Parallel()
	c := config{servers: 50, groups: 5, hour: 5 * time.Minute}
	ours, err := runOurs(c, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	naive, err := runNaive(c)
	if err != nil {
		t.Fatal(err)
	}
	if ours.creates != churnSize || ours.deletes != churnSize {
		t.Fatalf("churn: %d creates, %d deletes; want %d each", ours.creates, ours.deletes, churnSize)
	}
	// 5 scans (one a minute) of 1 or 2 pages (50 servers, 55 while a group
	// is scaled up), 3 requests per create (name look-up, POST, a poll of
	// its create_server action) and 2 per delete (GET, DELETE).
	if lo, hi := 5*1+5*churnSize, 5*2+5*churnSize; ours.requests < lo || ours.requests > hi {
		t.Errorf("ours made %d requests, want %d to %d", ours.requests, lo, hi)
	}
	// Naive: 30 loops × (5 groups × 3 TargetSize lists + 50 gets).
	if min := 30 * (5*3 + 50); naive.requests < min {
		t.Errorf("naive made %d requests, want at least %d", naive.requests, min)
	}
	t.Logf("5 simulated minutes: ours %d requests, naive %d", ours.requests, naive.requests)
}
