// Command bench compares three ways of joining n clusters into a Cilium Cluster Mesh
// on the simulated backend: sequential pairwise connects, round-scheduled pairwise
// connects, and the declarative one-shot (one write per cluster, all in parallel).
//
// Each operation is modelled at 15 s (a "cilium clustermesh connect": two Helm
// upgrades of about 7 s plus reads, docs/mesh.md "Benchmark") and run scaled down to
// 15 ms. For n = 2..13 it runs the executor and sleeps for real, then scales the
// measured wall time back up; for larger n it only models: rounds × 15 s.
//
//	go run ./mesh/cmd/bench            # or: make bench-mesh
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/prebake-dev/prebake/mesh"
)

// published are the sequential times of the blog's pairwise kind run (issue 8).
var published = map[int]string{
	2: "2m05s", 3: "2m50s", 4: "4m05s", 5: "5m50s", 6: "8m23s", 7: "11m29s",
	8: "14m44s", 9: "19m44s", 10: "25m19s", 11: "32m39s", 12: "40m11s", 13: "52m49s",
}

func main() {
	opTime := flag.Duration("op", 15*time.Second, "modelled time of one operation")
	scale := flag.Int("scale", 1000, "run each operation scaled down by this factor (15s/1000 = 15ms)")
	maxMeasured := flag.Int("max-measured", 13, "run n = 2..this on the simulated backend; larger n are modelled")
	flag.Parse()
	if err := run(*opTime, *scale, *maxMeasured); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(opTime time.Duration, scale, maxMeasured int) error {
	simOp := opTime / time.Duration(scale)
	fmt.Printf("SIMULATED (run on the simulated backend, not on Cilium): one operation = %s modelled, run as %s; wall times scaled back by %d.\n", opTime, simOp, scale)
	fmt.Println("sequential = one pairwise connect at a time; rounds = round schedule, a whole round in parallel;")
	fmt.Println("declarative = one write per cluster, all in parallel (1 round).")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "n\tpairs\trounds\tsequential\tpublished sequential\trounds wall\tdeclarative writes\tdeclarative wall\t")
	ctx := context.Background()
	for n := 2; n <= maxMeasured; n++ {
		names := mesh.GeneratedNames(n)
		wanted := mesh.FullMesh(names...)
		seq, err := measure(simOp, scale, func(b *mesh.Simulated) (mesh.Result, error) {
			return (&mesh.Executor{Parallel: 1}).Run(ctx, b, wanted)
		})
		if err != nil {
			return err
		}
		rounds, err := measure(simOp, scale, func(b *mesh.Simulated) (mesh.Result, error) {
			return (&mesh.Executor{}).Run(ctx, b, wanted)
		})
		if err != nil {
			return err
		}
		decl, err := measure(simOp, scale, func(b *mesh.Simulated) (mesh.Result, error) {
			return (&mesh.Executor{}).Declarative(ctx, b, names, wanted)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t\n", n, seq.res.Ops, rounds.res.Rounds,
			seq.wall, published[n], rounds.wall, decl.res.Ops, decl.wall)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Printf("\nMODELLED (nothing run; planned with mesh.Plan, wall = operations or rounds × %s):\n", opTime)
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "n\tpairs\trounds\tlowerBound\tplan time\tsequential\trounds wall\tdeclarative writes\tdeclarative wall\tdeclarative P=16\t")
	for _, n := range []int{64, 128, 256, 511} {
		wanted := mesh.FullMesh(mesh.GeneratedNames(n)...)
		start := time.Now()
		s := mesh.Plan(mesh.NewGraph(), wanted)
		planTime := time.Since(start)
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t\n", n, s.PairCount, s.RoundCount, s.LowerBound,
			planTime.Round(100*time.Microsecond),
			short(time.Duration(s.PairCount)*opTime), short(time.Duration(s.RoundCount)*opTime),
			n, short(opTime), short(time.Duration((n+15)/16)*opTime))
	}
	return tw.Flush()
}

type measured struct {
	res  mesh.Result
	wall string
}

func measure(op time.Duration, scale int, f func(*mesh.Simulated) (mesh.Result, error)) (measured, error) {
	b := mesh.NewSimulated(op, nil)
	start := time.Now()
	res, err := f(b)
	wall := time.Since(start)
	if err != nil {
		return measured{}, err
	}
	if st := b.Stats(); st.Conflicts != 0 {
		return measured{}, fmt.Errorf("%d conflicts: a cluster was in two operations at once", st.Conflicts)
	}
	return measured{res: res, wall: short(wall * time.Duration(scale))}, nil
}

// short formats a duration as 52m49s, to the second.
func short(d time.Duration) string { return d.Round(time.Second).String() }
