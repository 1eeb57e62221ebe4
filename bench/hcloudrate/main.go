// Command hcloudrate counts the Hetzner Cloud API requests prebake makes in
// one simulated hour, with the default provider (full scans paced by the
// budget, in-flight servers refreshed in between) and with the behaviour
// before it (a full scan on every re-list), against what a naive provider
// (one that calls the API on every read RPC) would make, and prints a
// markdown table. After each hour it deletes one server behind prebake's
// back, as in the console, and measures how long the core takes to notice.
//
// The fleet is 1,000 servers in 20 groups on the fake API
// (providers/hcloud/hcloudfake). CA's loop runs every
// 10 s of simulated time: Refresh, NodeGroups, TargetSize 3× per group,
// NodeGroupForNode per node, NodeGroupNodes and TemplateNodeInfo where CA asks
// for them; every 5 minutes one group scales up by 5 and, a minute later,
// back down. Time is simulated (a shared clock drives the core, the provider
// and the fake), so the counts do not depend on the machine (with the
// inventory, within a few requests: whether a re-list finds a create still
// in flight depends on when the workers finish) and an hour of prebake takes
// seconds; the requests themselves are real HTTP requests through hcloud-go.
//
//	go run ./bench/hcloudrate [-servers 1000] [-groups 20] [-hour 1h] [-ttls 10s,60s] [-naive=true]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	hc "github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bench/cahour"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// Budget is Hetzner's request budget per hour and project.
const Budget = 3600

const (
	loop       = cahour.Loop
	churnEvery = cahour.ChurnEvery
	churnSize  = cahour.ChurnSize
	churnHold  = cahour.ChurnHold
	targetRPCs = cahour.TargetRPCs
)

type config struct {
	servers, groups int
	hour            time.Duration
	ttls            []time.Duration
	// skipConsoleDelete leaves out the console delete after the hour
	// (result.noticed stays 0), for a run that only counts requests.
	skipConsoleDelete bool
}

// result is one row: API requests during the simulated hour.
type result struct {
	name             string
	requests         int
	creates, deletes int
	lists            int // GET /servers
	// noticed is how long the core took to drop a server deleted behind
	// its back; 0 for the naive provider, which has no snapshot.
	noticed time.Duration
}

// The two provider behaviours measured side by side.
var behaviours = []struct {
	name      string
	scanShare float64 // hcloud.Options.ScanShare
}{
	{"prebake before: a full scan on every re-list", -1},
	{"prebake (default): full scans paced by the budget, in-flight servers between", 0},
}

func main() {
	var c config
	var ttls string
	flag.IntVar(&c.servers, "servers", 1000, "servers in the fleet")
	flag.IntVar(&c.groups, "groups", 20, "node groups")
	flag.DurationVar(&c.hour, "hour", time.Hour, "simulated duration")
	flag.StringVar(&ttls, "ttls", "10s,60s", "refresh TTLs (refreshInterval) to measure")
	naive := flag.Bool("naive", true, "also measure the naive provider (its hour takes minutes: ~380,000 requests)")
	flag.Parse()
	for s := range strings.SplitSeq(ttls, ",") {
		d, err := time.ParseDuration(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		c.ttls = append(c.ttls, d)
	}
	var rows []result
	for _, ttl := range c.ttls {
		for _, b := range behaviours {
			fmt.Fprintf(os.Stderr, "%s, refreshInterval %v ...\n", b.name, ttl)
			start := time.Now()
			r, err := runOurs(c, ttl, b.scanShare)
			fmt.Fprintf(os.Stderr, "  took %v\n", time.Since(start).Round(time.Millisecond))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			r.name = fmt.Sprintf("%s, `refreshInterval: %v`", b.name, ttl)
			rows = append(rows, r)
		}
	}
	if *naive {
		fmt.Fprintln(os.Stderr, "naive ...")
		start := time.Now()
		r, err := runNaive(c)
		fmt.Fprintf(os.Stderr, "  took %v\n", time.Since(start).Round(time.Millisecond))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		rows = append(rows, r)
	}
	fmt.Printf("Hetzner API requests in %v of simulated time (SIMULATED: the fake API on a simulated clock): "+
		"%d servers in %d groups, CA loop every %v, %d creates and %d deletes of churn. Budget: %d requests/hour.\n\n",
		c.hour, c.servers, c.groups, loop, rows[0].creates, rows[0].deletes, Budget)
	fmt.Println("| provider | requests | of which GET /servers (scan pages, in-flight refreshes, name look-ups) | creates | deletes | share of the 3,600/h budget | a server deleted in the console is dropped after |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		perHour := float64(r.requests) / c.hour.Hours()
		noticed := "n/a"
		if r.noticed > 0 {
			noticed = r.noticed.String()
		}
		fmt.Printf("| %s | %d | %d | %d | %d | %.0f%% | %s |\n", r.name, r.requests, r.lists, r.creates, r.deletes, 100*perHour/Budget, noticed)
	}
}

func newFake(clk *hcloudfake.Clock) *hcloudfake.Fake {
	// The fake's own bucket is out of the way: the point is to count.
	return hcloudfake.New(hcloudfake.Options{Token: "bench", Now: clk.Now, RateLimit: 1 << 30})
}

func groupID(i int) string { return fmt.Sprintf("pool-%02d", i) }

// runOurs replays the hour against prebake's core and hcloud provider,
// with the provider's ScanShare, then measures how long a server deleted
// behind prebake's back stays in the core's picture.
func runOurs(c config, ttl time.Duration, scanShare float64) (result, error) {
	ctx := context.Background()
	clk := hcloudfake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // simulated time, shared by the fake, the provider and the core
	f := newFake(clk)
	defer f.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := hcloud.New(hcloud.Options{Token: "bench", Endpoint: f.URL(), Cluster: "bench", Now: clk.Now,
		Rate: 1e6, Burst: 1e6, RetryBase: time.Millisecond, PollInterval: time.Millisecond, ScanShare: scanShare,
		Budget: Budget, // the fake's own limit is off (newFake): pace scans by Hetzner's
		Logger: quiet})
	if err != nil {
		return result{}, err
	}
	per := c.servers / c.groups
	var specs []autoscaling.GroupSpec
	for i := range c.groups {
		specs = append(specs, autoscaling.GroupSpec{ID: groupID(i), Provider: "hcloud", MaxSize: per + churnSize,
			MachineType: "cx22", Zone: "fsn1"})
	}
	core, stop, err := cahour.StartFleet(ctx, autoscaling.Options{
		Cluster: "bench", Groups: specs, Providers: map[string]providers.Provider{"hcloud": p},
		RefreshInterval: ttl, Now: clk.Now, Logger: quiet,
	}, per, func(n int) error { return waitServers(f, n) })
	if err != nil {
		return result{}, err
	}
	defer stop()

	var r result
	before := snapshot(f)
	churn, err := cahour.Hour{Core: core, Length: c.hour, Advance: clk.Advance, Machines: c.servers,
		Wait: func(n int) error { return waitServers(f, n) }}.Run(ctx)
	if err != nil {
		return r, err
	}
	r.creates, r.deletes = churn.Creates, churn.Deletes
	after := snapshot(f)
	r.requests, r.lists = after.total-before.total, after.lists-before.lists
	if c.skipConsoleDelete {
		return r, nil
	}
	r.noticed, err = noticeConsoleDelete(ctx, core, f, clk, c.hour)
	return r, err
}

// noticeConsoleDelete deletes one server the way the console does (a
// client of its own, not prebake) and runs CA's loop until the core no
// longer lists it; it returns the simulated time that took. The delete
// comes right after a full scan (a re-list that read every page), the
// worst moment: the longest wait for the next one.
func noticeConsoleDelete(ctx context.Context, core *autoscaling.Core, f *hcloudfake.Fake, clk *hcloudfake.Clock, limit time.Duration) (time.Duration, error) {
	step := func() {
		clk.Advance(loop)
		_ = core.Refresh(ctx)
		core.Sync(ctx, false)
	}
	pages := (f.Live() + 49) / 50
	for waited := time.Duration(0); ; waited += loop {
		if waited > limit {
			return 0, fmt.Errorf("no full scan in %v", limit)
		}
		before := f.Calls("GET", "/servers")
		step()
		if f.Calls("GET", "/servers")-before >= pages {
			break
		}
	}
	g := groupID(0)
	views, err := core.Nodes(g)
	if err != nil || len(views) == 0 {
		return 0, fmt.Errorf("group %s has no instances to delete (%v)", g, err)
	}
	victim := views[0].ProviderID
	id, err := strconv.ParseInt(strings.TrimPrefix(victim, "hcloud://"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("providerID %q: %w", victim, err)
	}
	console := hc.NewClient(hc.WithEndpoint(f.URL()), hc.WithToken("bench"))
	if _, err := console.Server.Delete(ctx, &hc.Server{ID: id}); err != nil {
		return 0, err
	}
	for elapsed := time.Duration(0); elapsed <= limit; {
		step()
		elapsed += loop
		views, err := core.Nodes(g)
		if err != nil {
			return 0, err
		}
		if !slices.ContainsFunc(views, func(v autoscaling.InstanceView) bool { return v.ProviderID == victim }) {
			return elapsed, nil
		}
	}
	return 0, fmt.Errorf("a server deleted behind prebake's back was still listed after %v", limit)
}

type counts struct{ total, lists int }

func snapshot(f *hcloudfake.Fake) counts {
	return counts{total: f.Calls("", ""), lists: f.Calls("GET", "/servers")}
}

// waitServers waits (in real time) until the workers have brought the fake
// to n live servers. It gives up when the count has not moved for a minute:
// a machine loaded by other work (a -race run beside CI) is slow, not stuck.
func waitServers(f *hcloudfake.Fake, n int) error {
	const stall = time.Minute
	last, since := f.Live(), time.Now()
	for {
		live := f.Live()
		if live == n {
			return nil
		}
		if live != last {
			last, since = live, time.Now()
		}
		if time.Since(since) > stall {
			return fmt.Errorf("the fake holds %d live servers, want %d; none came or went for %v", live, n, stall)
		}
		time.Sleep(time.Millisecond)
	}
}

// runNaive replays the same hour with a provider that asks the API on every
// read RPC: TargetSize and NodeGroupNodes list the group's servers,
// NodeGroupForNode gets the server, TemplateNodeInfo gets the server type.
func runNaive(c config) (result, error) {
	ctx := context.Background()
	clk := hcloudfake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // simulated time, shared by the fake, the provider and the core
	f := newFake(clk)
	defer f.Close()
	client := hc.NewClient(hc.WithEndpoint(f.URL()), hc.WithToken("bench"))
	per := c.servers / c.groups
	ids := map[string][]int64{}
	create := func(g string, n int) error {
		for range n {
			name := fmt.Sprintf("%s-%d", g, len(ids[g]))
			res, _, err := client.Server.Create(ctx, hc.ServerCreateOpts{Name: name, ServerType: &hc.ServerType{Name: "cx22"},
				Image: &hc.Image{Name: "ubuntu-24.04"}, Location: &hc.Location{Name: "fsn1"},
				Labels: map[string]string{providers.LabelCluster: "bench", providers.LabelGroup: g}})
			if err != nil {
				return err
			}
			ids[g] = append(ids[g], res.Server.ID)
		}
		return nil
	}
	for i := range c.groups {
		if err := create(groupID(i), per); err != nil {
			return result{}, err
		}
	}
	listGroup := func(g string) ([]*hc.Server, error) {
		return client.Server.AllWithOpts(ctx, hc.ServerListOpts{ListOpts: hc.ListOpts{
			LabelSelector: providers.LabelCluster + "=bench," + providers.LabelGroup + "=" + g, PerPage: 50}})
	}
	r := result{name: "naive: the API on every read RPC"}
	before := snapshot(f)
	loops := int(c.hour / loop)
	var churned string
	for l := range loops {
		clk.Advance(loop)
		for i := range c.groups {
			g := groupID(i)
			for range targetRPCs {
				if _, err := listGroup(g); err != nil {
					return r, err
				}
			}
			for _, id := range ids[g] {
				if _, _, err := client.Server.GetByID(ctx, id); err != nil {
					return r, err
				}
			}
			if len(ids[g]) == 0 {
				if _, _, err := client.ServerType.GetByName(ctx, "cx22"); err != nil {
					return r, err
				}
			}
		}
		switch {
		case l%churnEvery == 0:
			churned = groupID((l / churnEvery) % c.groups)
			if err := create(churned, churnSize); err != nil {
				return r, err
			}
			// CA reads the scaling group's instances in the loops that follow.
			if _, err := listGroup(churned); err != nil {
				return r, err
			}
			r.creates += churnSize
		case l%churnEvery == churnHold && churned != "":
			g := ids[churned]
			for _, id := range g[len(g)-churnSize:] {
				if _, err := client.Server.Delete(ctx, &hc.Server{ID: id}); err != nil {
					return r, err
				}
			}
			ids[churned] = g[:len(g)-churnSize]
			r.deletes += churnSize
		}
	}
	after := snapshot(f)
	r.requests, r.lists = after.total-before.total, after.lists-before.lists
	return r, nil
}
