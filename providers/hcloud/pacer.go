package hcloud

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// pacer is an http.RoundTripper that spreads requests according to the
// API's RateLimit headers: while plenty of budget is left it lets calls pass
// at base; once RateLimit-Remaining falls below a tenth of RateLimit-Limit
// (or a 429 arrives) it spaces the calls so the remaining budget lasts until
// RateLimit-Reset.
type pacer struct {
	next  http.RoundTripper
	now   func() time.Time
	base  rate.Limit
	burst int

	// mu guards lim's reconfiguration (lim itself is safe for concurrent
	// use) and limit.
	mu  sync.Mutex
	lim *rate.Limiter
	// limit is the last RateLimit-Limit seen; defaultBudget before any.
	limit int
}

// defaultBudget is Hetzner's default request budget per hour and project
// (https://docs.hetzner.cloud/, "Rate Limiting").
const defaultBudget = 3600

func newPacer(next http.RoundTripper, base rate.Limit, burst int, now func() time.Time) *pacer {
	return &pacer{next: next, now: now, base: base, burst: burst, lim: rate.NewLimiter(base, burst), limit: defaultBudget}
}

// budget is the API's request budget per hour, as last reported.
func (p *pacer) budget() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit
}

func (p *pacer) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := p.lim.Wait(req.Context()); err != nil {
		return nil, err
	}
	resp, err := p.next.RoundTrip(req)
	if resp != nil {
		p.observe(resp.StatusCode, resp.Header)
	}
	return resp, err
}

func (p *pacer) observe(status int, h http.Header) {
	limit, err1 := strconv.Atoi(h.Get("RateLimit-Limit"))
	remaining, err2 := strconv.Atoi(h.Get("RateLimit-Remaining"))
	reset, err3 := strconv.ParseInt(h.Get("RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return
	}
	l, b := pace(p.base, p.burst, status, limit, remaining, time.Unix(reset, 0).Sub(p.now()))
	p.mu.Lock()
	defer p.mu.Unlock()
	if limit > 0 {
		p.limit = limit
	}
	if p.lim.Limit() != l || p.lim.Burst() != b {
		p.lim.SetLimit(l)
		p.lim.SetBurst(b)
	}
}

// pace is the pacer's rule, a pure function: the rate and burst to use after
// a response with these RateLimit values, untilReset being RateLimit-Reset
// minus now.
func pace(base rate.Limit, burst, status, limit, remaining int, untilReset time.Duration) (rate.Limit, int) {
	if limit <= 0 || (status != http.StatusTooManyRequests && remaining*10 >= limit) {
		return base, burst
	}
	if untilReset < time.Second {
		untilReset = time.Second
	}
	// Spread what is left (at least one call) over the time to the reset,
	// never faster than base.
	r := rate.Limit(float64(max(remaining, 1)) / untilReset.Seconds())
	if status == http.StatusTooManyRequests {
		r = rate.Limit(1 / untilReset.Seconds())
	}
	return min(r, base), 1
}
