package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Backend performs pairwise operations, e.g. "cilium clustermesh connect". An
// operation writes both of its clusters, so two operations that share a cluster must
// never run at once. Implementations must be safe for concurrent use on distinct
// clusters.
type Backend interface {
	// Connections returns the connections observed in the clusters now. A pair is
	// connected when each side lists the other.
	Connections(ctx context.Context) (*Graph, error)
	// Apply performs one operation. It must be idempotent: a retried or re-planned
	// operation may run again on a pair that is already done.
	Apply(ctx context.Context, op Op) error
}

// DeclarativeBackend writes a cluster's whole peer list in one update, so every
// cluster can be written at once: one round (shared/spec/mesh.md §2.2).
type DeclarativeBackend interface {
	Connections(ctx context.Context) (*Graph, error)
	// Peers returns the peers each cluster is configured with now.
	Peers(ctx context.Context) (map[string][]string, error)
	// SetPeers replaces the cluster's peer list. It must be idempotent.
	SetPeers(ctx context.Context, cluster string, peers []string) error
}

// Preflighter is a DeclarativeBackend that checks a run's writes before any is made,
// so a run that cannot succeed (a CA not shared, an object over the size limit)
// writes nothing instead of failing half-way.
type Preflighter interface {
	// Preflight gets the peer list each written cluster will get.
	Preflight(ctx context.Context, writes map[string][]string) error
}

// Executor runs schedules against a backend: one round at a time, at most Parallel
// operations at once, each retried with exponential backoff. A failed operation does
// not stop its round or the next ones; Run reports it at the end. Because Run plans
// from the connections it observes, running it again resumes where it stopped.
type Executor struct {
	// Parallel bounds the operations in flight; 0 means a whole round at once.
	Parallel int
	// Attempts per operation; 0 means 3.
	Attempts int
	// Backoff returns the wait before the given retry (1 for the first retry); nil
	// means 1s doubling up to 30s.
	Backoff func(retry int) time.Duration
	// Progress receives one line per finished round; nil discards it.
	Progress io.Writer
}

// Result summarises a run.
type Result struct {
	Schedule  Schedule // what was planned (for Declarative: one round of writes)
	Rounds    int      // rounds run
	Ops       int      // operations planned
	Succeeded int
	Retries   int // extra attempts, over all operations
	Failures  []Failure
	Duration  time.Duration
}

// Failure is an operation that failed every attempt.
type Failure struct {
	Round    int
	Op       string // "connect a b", "disconnect a b" or "set-peers a"
	Attempts int
	Err      error
}

// job is one operation of a round.
type job struct {
	label    string
	clusters []string
	do       func(ctx context.Context) error
}

// Run observes the current connections, plans the way to wanted with Plan, and runs
// the schedule. It returns an error when an operation failed every attempt (run it
// again to resume) or when ctx ends.
func (e *Executor) Run(ctx context.Context, b Backend, wanted *Graph) (Result, error) {
	start := time.Now()
	current, err := b.Connections(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("observe connections: %w", err)
	}
	s := Plan(current, wanted)
	rounds := make([][]job, len(s.Rounds))
	for i, r := range s.Rounds {
		for _, op := range r {
			rounds[i] = append(rounds[i], job{
				label:    op.String(),
				clusters: []string{op.A, op.B},
				do:       func(ctx context.Context) error { return b.Apply(ctx, op) },
			})
		}
	}
	res, err := e.run(ctx, rounds)
	res.Schedule = s
	res.Duration = time.Since(start)
	return res, err
}

// Declarative writes the wanted peer list of every member whose configured peers
// differ from it: one write per cluster, all in one round. Clusters that are not
// members (for example ones leaving the mesh) are not written.
func (e *Executor) Declarative(ctx context.Context, b DeclarativeBackend, members []string, wanted *Graph) (Result, error) {
	start := time.Now()
	have, err := b.Peers(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("observe peers: %w", err)
	}
	want := wanted.Peers()
	var round []job
	for _, c := range slices.SortedFunc(slices.Values(members), Compare) {
		peers := want[c]
		if slices.Equal(peers, sortedCopy(have[c])) {
			continue
		}
		round = append(round, job{
			label:    "set-peers " + c,
			clusters: []string{c},
			do:       func(ctx context.Context) error { return b.SetPeers(ctx, c, peers) },
		})
	}
	var rounds [][]job
	s := Schedule{Rounds: [][]Op{}, Method: MethodDeclarative}
	if p, ok := b.(Preflighter); ok && len(round) > 0 {
		writes := make(map[string][]string, len(round))
		for _, j := range round {
			writes[j.clusters[0]] = want[j.clusters[0]]
		}
		if err := p.Preflight(ctx, writes); err != nil {
			return Result{Schedule: s, Duration: time.Since(start)}, fmt.Errorf("refusing to write: %w", err)
		}
	}
	if len(round) > 0 {
		rounds = append(rounds, round)
		s.RoundCount, s.PairCount, s.LowerBound = 1, len(round), 1
	}
	res, err := e.run(ctx, rounds)
	res.Schedule = s
	res.Duration = time.Since(start)
	return res, err
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.SortFunc(c, Compare)
	return c
}

func (e *Executor) attempts() int {
	if e.Attempts <= 0 {
		return 3
	}
	return e.Attempts
}

func (e *Executor) backoff(retry int) time.Duration {
	if e.Backoff != nil {
		return e.Backoff(retry)
	}
	d := time.Second << min(retry-1, 5)
	return min(d, 30*time.Second)
}

// run executes the rounds in order.
func (e *Executor) run(ctx context.Context, rounds [][]job) (Result, error) {
	var res Result
	for _, r := range rounds {
		res.Ops += len(r)
	}
	for i, r := range rounds {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		rr, err := e.runRound(ctx, i+1, r)
		res.Rounds++
		res.Succeeded += rr.succeeded
		res.Retries += rr.retries
		res.Failures = append(res.Failures, rr.failures...)
		if e.Progress != nil {
			fmt.Fprintf(e.Progress, "round %d/%d: %d/%d done, %d failed, %d retries; total %d/%d done, %d failed\n",
				i+1, len(rounds), rr.succeeded, len(r), len(rr.failures), rr.retries,
				res.Succeeded, res.Ops, len(res.Failures))
		}
		if err != nil {
			return res, err
		}
	}
	if len(res.Failures) > 0 {
		msgs := make([]string, len(res.Failures))
		for i, f := range res.Failures {
			msgs[i] = fmt.Sprintf("round %d: %s: %v", f.Round, f.Op, f.Err)
		}
		return res, fmt.Errorf("%d of %d operations failed after retries (run again to resume from the observed state):\n  %s",
			len(res.Failures), res.Ops, strings.Join(msgs, "\n  "))
	}
	return res, nil
}

type roundResult struct {
	succeeded, retries int
	failures           []Failure
}

// runRound runs one round's jobs with at most Parallel in flight. It refuses to start
// a job whose cluster is already busy: Plan never produces such a round, so that
// would be a bug, and running it would lose an update.
func (e *Executor) runRound(ctx context.Context, round int, jobs []job) (roundResult, error) {
	par := e.Parallel
	if par <= 0 || par > len(jobs) {
		par = len(jobs)
	}
	var (
		mu sync.Mutex // guards rr
		rr roundResult
	)
	busy := make(map[string]bool)
	for _, j := range jobs {
		for _, c := range j.clusters {
			if busy[c] {
				return rr, fmt.Errorf("round %d: cluster %q is in two operations (%s); refusing to run the round", round, c, j.label)
			}
			busy[c] = true
		}
	}

	queue := make(chan job)
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				tries, err := e.attempt(ctx, j)
				mu.Lock()
				rr.retries += tries - 1
				if err != nil {
					rr.failures = append(rr.failures, Failure{Round: round, Op: j.label, Attempts: tries, Err: err})
				} else {
					rr.succeeded++
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		select {
		case queue <- j:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(queue)
	wg.Wait()
	slices.SortFunc(rr.failures, func(x, y Failure) int { return strings.Compare(x.Op, y.Op) })
	return rr, ctx.Err()
}

// attempt runs a job until it succeeds, attempts run out, or ctx ends. It returns
// the number of attempts made.
func (e *Executor) attempt(ctx context.Context, j job) (int, error) {
	var err error
	n := 0
	for n < e.attempts() {
		if n > 0 {
			t := time.NewTimer(e.backoff(n))
			select {
			case <-ctx.Done():
				t.Stop()
				return n, errors.Join(err, ctx.Err())
			case <-t.C:
			}
		}
		n++
		if err = j.do(ctx); err == nil {
			return n, nil
		}
		if ctx.Err() != nil {
			return n, err
		}
	}
	return n, err
}

// WriteSummary prints the result as a table, followed by the failed operations.
func WriteSummary(w io.Writer, r Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METHOD\tROUNDS\tOPERATIONS\tSUCCEEDED\tFAILED\tRETRIES\tWALL")
	fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%d\t%d\t%s\n", r.Schedule.Method, r.Rounds, r.Schedule.RoundCount,
		r.Ops, r.Succeeded, len(r.Failures), r.Retries, r.Duration.Round(time.Millisecond))
	for _, f := range r.Failures {
		fmt.Fprintf(tw, "failed: round %d: %s after %d attempts: %v\n", f.Round, f.Op, f.Attempts, f.Err)
	}
	return tw.Flush()
}
