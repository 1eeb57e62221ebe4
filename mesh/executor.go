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
// cluster can be written at once: one round (docs/mesh.md, "Backend cilium").
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
	// Progress receives one line per finished round (and, with Status, per join); nil
	// discards it. The joins of a round write to it from their own goroutines, one
	// line at a time.
	Progress   io.Writer
	progressMu sync.Mutex

	// The declarative joins. A join is one cluster's write plus, with Status, the wait
	// until that cluster reports every peer ready; it holds one of the Parallel slots from
	// its write to the end of its wait, so at most Parallel joins are in flight.

	// Status, when set, is polled after a cluster is written; the join is done once every
	// agent reported lists every peer ready (and every KVStoreMesh ready and synced, with
	// KVStoreMesh). A cluster already written but not recorded as joined in Journal is
	// only waited for. Without Status a join ends once written: Journal records it as
	// "unverified", and Result.Unverified counts it.
	Status StatusReader
	// KVStoreMesh makes a join wait for the KVStoreMesh sync too.
	KVStoreMesh bool
	// JoinTimeout bounds one cluster's wait; 0 means 10 minutes.
	JoinTimeout time.Duration
	// PollInterval is the time between two status reads of a cluster; 0 means 5 s.
	PollInterval time.Duration
	// Journal, when set, records each join as it begins and ends; a cluster whose join it
	// records as done for the same peers, and whose objects list them, is skipped.
	Journal *Journal
}

// Result summarises a run.
type Result struct {
	Schedule  Schedule // what was planned (for Declarative: one round of joins)
	Rounds    int      // rounds run
	Ops       int      // operations planned
	Succeeded int
	Retries   int // extra attempts, over all operations
	// Writes counts the joins that began with a write; the others only waited.
	Writes int
	// Finished counts the clusters skipped because Journal holds their finished join.
	Finished int
	// Unverified counts the joins that succeeded without a status wait (no Status): written,
	// not confirmed by Cilium.
	Unverified int
	Failures   []Failure
	Duration   time.Duration
}

// Failure is an operation that failed every attempt.
type Failure struct {
	Round    int
	Op       string // "connect a b", "disconnect a b" or "join a" (declarative)
	Attempts int
	Err      error
}

// job is one operation of a round.
type job struct {
	label    string
	clusters []string
	do       func(ctx context.Context) error // retried; nil for a join that only waits
	// For declarative joins: then is run once do succeeded (the status wait), and
	// begin/end record the join.
	then  func(ctx context.Context) error
	begin func() error
	end   func(err error) error
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

// Declarative joins every member whose configured peers differ from its wanted ones:
// one write of its whole peer list per cluster, all in one round, at most Parallel at
// once; with Status, each join also waits until the cluster reports its peers ready.
// Clusters that are not members (for example ones leaving the mesh) are not written.
func (e *Executor) Declarative(ctx context.Context, b DeclarativeBackend, members []string, wanted *Graph) (Result, error) {
	start := time.Now()
	have, err := b.Peers(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("observe peers: %w", err)
	}
	want := wanted.Peers()
	var (
		round    []job
		finished int
		writes   = map[string][]string{}
	)
	for _, c := range slices.SortedFunc(slices.Values(members), Compare) {
		peers := want[c]
		configured := slices.Equal(peers, sortedCopy(have[c]))
		switch {
		case configured && e.Journal != nil && e.Journal.Finished(c, peers):
			finished++
			continue
		case configured && e.Status == nil:
			continue
		}
		j := job{label: "join " + c, clusters: []string{c}}
		event := JournalWait
		if !configured {
			event = JournalWrite
			writes[c] = peers
			j.do = func(ctx context.Context) error { return b.SetPeers(ctx, c, peers) }
		}
		if e.Status != nil {
			j.then = func(ctx context.Context) error { return e.waitJoined(ctx, c, peers) }
		}
		if e.Journal != nil {
			j.begin = func() error { return e.Journal.record(event, c, peers, "") }
			j.end = func(err error) error {
				switch {
				case err != nil:
					return e.Journal.record(JournalFailed, c, peers, err.Error())
				case e.Status == nil:
					return e.Journal.record(JournalUnverified, c, peers, unverifiedDetail)
				}
				return e.Journal.record(JournalDone, c, peers, "")
			}
		}
		round = append(round, j)
	}
	var rounds [][]job
	s := Schedule{Rounds: [][]Op{}, Method: MethodDeclarative}
	if p, ok := b.(Preflighter); ok && len(writes) > 0 {
		if err := p.Preflight(ctx, writes); err != nil {
			return Result{Schedule: s, Finished: finished, Duration: time.Since(start)}, fmt.Errorf("refusing to write: %w", err)
		}
	}
	if len(round) > 0 {
		rounds = append(rounds, round)
		s.RoundCount, s.PairCount, s.LowerBound = 1, len(round), 1
	}
	res, err := e.run(ctx, rounds)
	if e.Status == nil {
		res.Unverified = res.Succeeded
	}
	res.Schedule = s
	res.Writes = len(writes)
	res.Finished = finished
	res.Duration = time.Since(start)
	return res, err
}

// unverifiedDetail is the journal's note on a join that ended without a status wait.
const unverifiedDetail = "written; not verified: Cilium's status was not read"

func (e *Executor) joinTimeout() time.Duration {
	if e.JoinTimeout <= 0 {
		return 10 * time.Minute
	}
	return e.JoinTimeout
}

func (e *Executor) pollInterval() time.Duration {
	if e.PollInterval <= 0 {
		return 5 * time.Second
	}
	return e.PollInterval
}

// waitJoined polls the cluster's status until every peer is there, or JoinTimeout passes.
// A peer that flaps (ready, then not, then ready) only prolongs the wait: nothing is
// written again.
func (e *Executor) waitJoined(ctx context.Context, cluster string, peers []string) error {
	began := time.Now()
	wctx, cancel := context.WithTimeout(ctx, e.joinTimeout())
	defer cancel()
	t := time.NewTimer(0)
	defer t.Stop()
	var (
		missing []string
		lastErr error
	)
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			why := strings.Join(missing, "; ")
			switch {
			case lastErr != nil && why != "":
				why += "; the last status read failed: " + lastErr.Error()
			case lastErr != nil:
				why = lastErr.Error()
			}
			return fmt.Errorf("cluster %q: not joined after %s (--join-timeout): %s", cluster, e.joinTimeout(), why)
		case <-t.C:
		}
		st, err := e.Status.MeshStatus(wctx, cluster)
		if err == nil {
			lastErr = nil
			missing = st.Missing(peers, e.KVStoreMesh)
			if len(missing) == 0 {
				e.progressf("join %s: %d peers ready after %s\n", cluster, len(peers), time.Since(began).Round(time.Millisecond))
				return nil
			}
		} else if wctx.Err() == nil {
			lastErr = err
		}
		t.Reset(e.pollInterval())
	}
}

// progressf writes one line to Progress; the joins of a round call it at once.
func (e *Executor) progressf(format string, args ...any) {
	if e.Progress == nil {
		return
	}
	e.progressMu.Lock()
	defer e.progressMu.Unlock()
	fmt.Fprintf(e.Progress, format, args...)
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
		e.progressf("round %d/%d: %d/%d done, %d failed, %d retries; total %d/%d done, %d failed\n",
			i+1, len(rounds), rr.succeeded, len(r), len(rr.failures), rr.retries,
			res.Succeeded, res.Ops, len(res.Failures))
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
				tries, err := e.runJob(ctx, j)
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

// runJob records the job's beginning, runs it (do with retries, then then), and records its
// end. It returns the attempts made at do.
func (e *Executor) runJob(ctx context.Context, j job) (int, error) {
	if j.begin != nil {
		if err := j.begin(); err != nil {
			return 1, err
		}
	}
	tries, err := 1, error(nil)
	if j.do != nil {
		tries, err = e.attempt(ctx, j)
	}
	if err == nil && j.then != nil {
		err = j.then(ctx)
	}
	if j.end != nil && ctx.Err() == nil {
		err = errors.Join(err, j.end(err))
	}
	return tries, err
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
	if r.Schedule.Method == MethodDeclarative && (r.Finished > 0 || r.Writes != r.Ops) {
		fmt.Fprintf(tw, "joins: %d written, %d only awaited (written before), %d skipped (done per the journal)\n", r.Writes, r.Ops-r.Writes, r.Finished)
	}
	if r.Unverified > 0 {
		fmt.Fprintf(tw, "joins: %d not verified: written, but Cilium's status was not read, so nothing confirms that the peers connected\n", r.Unverified)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(tw, "failed: round %d: %s after %d attempts: %v\n", f.Round, f.Op, f.Attempts, f.Err)
	}
	return tw.Flush()
}
