package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// sample is one measured operation.
type sample struct {
	op, path string
	// lat holds one latency per call, sorted.
	lat  []time.Duration
	wall time.Duration
	// target is the p99 bound, 0 for none.
	target time.Duration
	// errs counts calls that failed other than expected.
	errs int
}

// measure runs fn warmup times unmeasured, then n times from parallel
// goroutines, recording each call's latency. fn gets the call's index;
// an error counts against the sample.
func measure(op, path string, n, warmup, parallel int, target time.Duration, fn func(i int) error) sample {
	for i := range warmup {
		_ = fn(i)
	}
	parallel = max(1, min(parallel, n))
	lat := make([]time.Duration, n)
	var mu sync.Mutex
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	for w := range parallel {
		wg.Go(func() {
			bad := 0
			for i := w; i < n; i += parallel {
				t0 := time.Now()
				err := fn(i)
				lat[i] = time.Since(t0)
				if err != nil {
					bad++
				}
			}
			mu.Lock()
			errs += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	s := sample{op: op, path: path, lat: lat, wall: time.Since(start), target: target, errs: errs}
	slices.Sort(s.lat)
	return s
}

// quantile is the q-quantile of the sorted latencies (nearest rank).
func (s sample) quantile(q float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s.lat)))) - 1
	return s.lat[max(0, min(i, len(s.lat)-1))]
}

func (s sample) opsPerSec() float64 { return float64(len(s.lat)) / s.wall.Seconds() }

// pass reports whether p99 meets the target and nothing failed.
func (s sample) pass() bool { return s.errs == 0 && (s.target == 0 || s.quantile(0.99) < s.target) }

// fmtDur prints µs below a millisecond and ms above.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func fmtOps(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.1f", v)
}

// writeTable prints the samples as a markdown table.
func writeTable(w io.Writer, samples []sample) {
	fmt.Fprintln(w, "| operation | path | n | p50 | p90 | p99 | max | ops/s | p99 target | result |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, s := range samples {
		target, result := "—", "—"
		if s.target > 0 {
			target = "< " + fmtDur(s.target)
		}
		switch {
		case s.errs > 0:
			result = fmt.Sprintf("FAIL (%d errors)", s.errs)
		case s.target > 0 && s.pass():
			result = "PASS"
		case s.target > 0:
			result = "FAIL"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n",
			s.op, s.path, len(s.lat), fmtDur(s.quantile(0.50)), fmtDur(s.quantile(0.90)), fmtDur(s.quantile(0.99)),
			fmtDur(s.lat[len(s.lat)-1]), fmtOps(s.opsPerSec()), strings.ReplaceAll(target, "|", "\\|"), result)
	}
}
