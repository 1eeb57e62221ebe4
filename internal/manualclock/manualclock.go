// Package manualclock is a clock that moves only when told to: the cloud
// fakes (hcloudfake, gcefake) take its Now, so tests and benchmarks decide
// when actions finish and machines boot, with no sleeps.
package manualclock

import (
	"sync"
	"time"
)

// Clock is a manual clock. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// New returns a clock standing at t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
