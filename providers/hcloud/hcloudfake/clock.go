package hcloudfake

import (
	"time"

	"github.com/prebake-dev/prebake/internal/manualclock"
)

// Clock is a manual clock for Options.Now, so tests and benchmarks decide
// when operations finish and machines boot.
type Clock = manualclock.Clock

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return manualclock.New(t) }
