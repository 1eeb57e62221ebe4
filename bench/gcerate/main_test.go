package main

import (
	"testing"
	"time"
)

// TestPerRefresh: one List is one aggregatedList request per 500 instances.
func TestPerRefresh(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, want int }{{0, 1}, {10, 1}, {500, 1}, {501, 2}} {
		req, pages, err := perRefresh(tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if req != tc.want || pages != tc.want {
			t.Errorf("%d instances: %d requests, %d pages; want %d", tc.n, req, pages, tc.want)
		}
	}
}

// TestHour runs a small fleet for five simulated minutes: one aggregatedList
// per TTL, and per create a get (idempotence) and an insert, per delete a
// get and a delete; nothing else.
func TestHour(t *testing.T) {
	t.Parallel()
	c := config{instances: 40, groups: 4, hour: 5 * time.Minute}
	r, err := runHour(c, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.creates != churnSize || r.deletes != churnSize {
		t.Fatalf("churn: %d creates, %d deletes; want %d each", r.creates, r.deletes, churnSize)
	}
	want := map[string]int{
		"instances.aggregatedList": 5,
		"instances.get":            2 * churnSize,
		"instances.insert":         churnSize,
		"instances.delete":         churnSize,
	}
	for k, n := range want {
		if r.byEndpoint[k] != n {
			t.Errorf("%s: %d requests, want %d (all: %v)", k, r.byEndpoint[k], n, r.byEndpoint)
		}
	}
	if len(r.byEndpoint) != len(want) {
		t.Errorf("endpoints %v, want only %v", r.byEndpoint, want)
	}
}
