// Command gcerate counts the Compute Engine API requests prebake makes: per
// Refresh at a given fleet size, and in one simulated hour of CA's loop at
// several refresh intervals. It prints markdown tables.
//
// The fleet is 1,000 instances in 20 groups spread over 4 zones on the fake
// API (providers/gce/gcefake). CA's loop runs every
// 10 s of simulated time: Refresh, NodeGroups, TargetSize 3× per group,
// NodeGroupForNode per node, NodeGroupNodes and TemplateNodeInfo where CA
// asks; every 5 minutes one group scales up by 5 and, a minute later, back
// down. Time is simulated (one clock drives the core, the provider and the
// fake), so the counts are exact and the run takes seconds; the requests are
// real HTTP requests through cloud.google.com/go/compute's REST clients.
//
//	go run ./bench/gcerate [-instances 1000] [-groups 20] [-hour 1h] [-ttls 10s,30s,60s]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bench/cahour"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

const (
	loop      = cahour.Loop
	churnSize = cahour.ChurnSize
)

var zones = []string{"europe-west4-a", "europe-west4-b", "us-central1-a", "us-central1-f"}

type config struct {
	instances, groups int
	hour              time.Duration
	ttls              []time.Duration
}

// result is one row: API requests during the simulated hour, by endpoint.
type result struct {
	name       string
	requests   int
	byEndpoint map[string]int
	creates    int
	deletes    int
}

func main() {
	var c config
	var ttls string
	flag.IntVar(&c.instances, "instances", 1000, "instances in the fleet")
	flag.IntVar(&c.groups, "groups", 20, "node groups (spread over 4 zones)")
	flag.DurationVar(&c.hour, "hour", time.Hour, "simulated duration")
	flag.StringVar(&ttls, "ttls", "10s,30s,60s", "refresh TTLs (refreshInterval) to measure")
	flag.Parse()
	for s := range strings.SplitSeq(ttls, ",") {
		d, err := time.ParseDuration(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		c.ttls = append(c.ttls, d)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	fmt.Printf("Compute Engine API requests of one forced Refresh (one provider List; SIMULATED: requests to the fake API):\n\n")
	fmt.Println("| instances | requests | aggregatedList pages (500 a page) |")
	fmt.Println("|---:|---:|---:|")
	for _, n := range []int{100, 499, 500, 501, c.instances} {
		req, pages, err := perRefresh(n)
		if err != nil {
			fail(err)
		}
		fmt.Printf("| %d | %d | %d |\n", n, req, pages)
	}
	fmt.Println()

	var rows []result
	for _, ttl := range c.ttls {
		fmt.Fprintf(os.Stderr, "prebake, refreshInterval %v ...\n", ttl)
		start := time.Now()
		r, err := runHour(c, ttl)
		fmt.Fprintf(os.Stderr, "  took %v\n", time.Since(start).Round(time.Millisecond))
		if err != nil {
			fail(err)
		}
		rows = append(rows, r)
	}
	fmt.Printf("Compute Engine API requests in %v of simulated time (SIMULATED: the fake API on a simulated clock): %d instances in %d groups over %d zones, CA loop every %v, "+
		"%d creates and %d deletes of churn:\n\n", c.hour, c.instances, c.groups, len(zones), loop, rows[0].creates, rows[0].deletes)
	fmt.Println("| provider | requests/hour | by endpoint |")
	fmt.Println("|---|---:|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %.0f | %s |\n", r.name, float64(r.requests)/c.hour.Hours(), endpoints(r.byEndpoint))
	}
}

func endpoints(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func groupID(i int) string { return fmt.Sprintf("pool-%02d", i) }

var quiet = slog.New(slog.DiscardHandler)

func newProvider(f *gcefake.Fake, now func() time.Time) (*gce.Provider, error) {
	return gce.New(context.Background(), gce.Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "bench",
		Rate: 1e6, Burst: 1e6, Now: now, Logger: quiet})
}

// perRefresh creates n instances and counts the requests of one List.
func perRefresh(n int) (requests, pages int, err error) {
	clk := gcefake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := gcefake.New(gcefake.Options{Now: clk.Now})
	defer f.Close()
	p, err := newProvider(f, clk.Now)
	if err != nil {
		return 0, 0, err
	}
	defer p.Close()
	ctx := context.Background()
	for i := range n {
		z := zones[i%len(zones)]
		if _, err := p.Create(ctx, providers.CreateRequest{Name: fmt.Sprintf("pool-%04d", i), Cluster: "bench", Group: "pool",
			MachineType: "e2-standard-2", Location: z}); err != nil {
			return 0, 0, err
		}
	}
	f.ResetRequests()
	listed, err := p.List(ctx)
	if err != nil {
		return 0, 0, err
	}
	if len(listed) != n {
		return 0, 0, fmt.Errorf("listed %d instances, want %d", len(listed), n)
	}
	return len(f.Requests()), f.Calls("GET", "/aggregated/instances"), nil
}

// runHour replays the hour against prebake's core and gce provider.
func runHour(c config, ttl time.Duration) (result, error) {
	ctx := context.Background()
	clk := gcefake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // simulated time, shared by the fake, the provider and the core
	f := gcefake.New(gcefake.Options{Now: clk.Now})
	defer f.Close()
	p, err := newProvider(f, clk.Now)
	if err != nil {
		return result{}, err
	}
	defer p.Close()
	per := c.instances / c.groups
	var specs []autoscaling.GroupSpec
	for i := range c.groups {
		z := zones[i%len(zones)]
		specs = append(specs, autoscaling.GroupSpec{ID: groupID(i), Provider: "gce", MaxSize: per + churnSize,
			MachineType: "e2-standard-2", Zone: z, Region: gce.Region(z)})
	}
	core, stop, err := cahour.StartFleet(ctx, autoscaling.Options{
		Cluster: "bench", Groups: specs, Providers: map[string]providers.Provider{"gce": p},
		RefreshInterval: ttl, Now: clk.Now, Logger: quiet,
	}, per, func(n int) error { return waitInstances(f, n) })
	if err != nil {
		return result{}, err
	}
	defer stop()

	r := result{name: fmt.Sprintf("prebake, refreshInterval %v", ttl)}
	f.ResetRequests()
	churn, err := cahour.Hour{Core: core, Length: c.hour, Advance: clk.Advance, Machines: c.instances,
		Wait: func(n int) error { return waitInstances(f, n) }}.Run(ctx)
	if err != nil {
		return r, err
	}
	r.creates, r.deletes = churn.Creates, churn.Deletes
	reqs := f.Requests()
	r.requests = len(reqs)
	r.byEndpoint = map[string]int{}
	for _, q := range reqs {
		r.byEndpoint[endpoint(q)]++
	}
	return r, nil
}

// endpoint names a request by its API method.
func endpoint(q gcefake.Request) string {
	switch p := q.Path; {
	case strings.HasSuffix(p, "/aggregated/instances"):
		return "instances.aggregatedList"
	case strings.HasSuffix(p, "/wait"):
		return "operations.wait"
	case strings.Contains(p, "/machineTypes/"):
		return "machineTypes.get"
	case strings.Contains(p, "/instances/") && q.Method == "GET":
		return "instances.get"
	case strings.Contains(p, "/instances/") && q.Method == "DELETE":
		return "instances.delete"
	case strings.HasSuffix(p, "/instances") && q.Method == "POST":
		return "instances.insert"
	}
	return q.Method + " " + q.Path
}

// waitInstances waits (in real time) until the workers have brought the
// fake to n instances.
func waitInstances(f *gcefake.Fake, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		live := len(f.Instances())
		if live == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the fake holds %d instances, want %d", live, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
