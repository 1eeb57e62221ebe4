// Command hcloudrate counts the Hetzner Cloud API requests prebake makes in
// one simulated hour, against what a naive provider (one that calls the API
// on every read RPC) would make, and prints a markdown table.
//
// The fleet is 1,000 servers in 20 groups on the fake API
// (providers/hcloud/hcloudfake). CA's loop (spec externalgrpc §7.2) runs every
// 10 s of simulated time: Refresh, NodeGroups, TargetSize 3× per group,
// NodeGroupForNode per node, NodeGroupNodes and TemplateNodeInfo where CA asks
// for them; every 5 minutes one group scales up by 5 and, a minute later,
// back down. Time is simulated (a shared clock drives the core, the provider
// and the fake), so the counts are exact and the run takes seconds; the
// requests themselves are real HTTP requests through hcloud-go.
//
//	go run ./bench/hcloudrate [-servers 1000] [-groups 20] [-hour 1h]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
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
}

// result is one row: API requests during the simulated hour.
type result struct {
	name             string
	requests         int
	creates, deletes int
	lists            int // GET /servers
}

func main() {
	var c config
	var ttls string
	flag.IntVar(&c.servers, "servers", 1000, "servers in the fleet")
	flag.IntVar(&c.groups, "groups", 20, "node groups")
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
	var rows []result
	for _, ttl := range c.ttls {
		fmt.Fprintf(os.Stderr, "prebake, refreshInterval %v ...\n", ttl)
		start := time.Now()
		r, err := runOurs(c, ttl)
		fmt.Fprintf(os.Stderr, "  took %v\n", time.Since(start).Round(time.Millisecond))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		rows = append(rows, r)
	}
	fmt.Fprintln(os.Stderr, "naive ...")
	start := time.Now()
	r, err := runNaive(c)
	fmt.Fprintf(os.Stderr, "  took %v\n", time.Since(start).Round(time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rows = append(rows, r)
	fmt.Printf("Hetzner API requests in %v of simulated time: %d servers in %d groups, CA loop every %v, "+
		"%d creates and %d deletes of churn. Budget: %d requests/hour.\n\n",
		c.hour, c.servers, c.groups, loop, rows[0].creates, rows[0].deletes, Budget)
	fmt.Println("| provider | requests | of which GET /servers (scan pages, name look-ups) | creates | deletes | share of the 3,600/h budget |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		perHour := float64(r.requests) / c.hour.Hours()
		fmt.Printf("| %s | %d | %d | %d | %d | %.0f%% |\n", r.name, r.requests, r.lists, r.creates, r.deletes, 100*perHour/Budget)
	}
}

func newFake(clk *hcloudfake.Clock) *hcloudfake.Fake {
	// The fake's own bucket is out of the way: the point is to count.
	return hcloudfake.New(hcloudfake.Options{Token: "bench", Now: clk.Now, RateLimit: 1 << 30})
}

func groupID(i int) string { return fmt.Sprintf("pool-%02d", i) }

// runOurs replays the hour against prebake's core and hcloud provider.
func runOurs(c config, ttl time.Duration) (result, error) {
	ctx := context.Background()
	clk := hcloudfake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // simulated time, shared by the fake, the provider and the core
	f := newFake(clk)
	defer f.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := hcloud.New(hcloud.Options{Token: "bench", Endpoint: f.URL(), Cluster: "bench", Now: clk.Now,
		Rate: 1e6, Burst: 1e6, RetryBase: time.Millisecond, PollInterval: time.Millisecond, Logger: quiet})
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

	r := result{name: fmt.Sprintf("prebake, refreshInterval %v", ttl)}
	before := snapshot(f)
	churn, err := cahour.Hour{Core: core, Length: c.hour, Advance: clk.Advance, Machines: c.servers,
		Wait: func(n int) error { return waitServers(f, n) }}.Run(ctx)
	if err != nil {
		return r, err
	}
	r.creates, r.deletes = churn.Creates, churn.Deletes
	after := snapshot(f)
	r.requests, r.lists = after.total-before.total, after.lists-before.lists
	return r, nil
}

type counts struct{ total, lists int }

func snapshot(f *hcloudfake.Fake) counts {
	return counts{total: f.Calls("", ""), lists: f.Calls("GET", "/servers")}
}

// waitServers waits (in real time) until the workers have brought the fake
// to n live servers.
func waitServers(f *hcloudfake.Fake, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		live := f.Live()
		if live == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the fake holds %d live servers, want %d", live, n)
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
