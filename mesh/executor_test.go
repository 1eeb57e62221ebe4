package mesh

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func noBackoff(int) time.Duration { return 0 }

func connections(t *testing.T, b interface {
	Connections(context.Context) (*Graph, error)
}) []Pair {
	t.Helper()
	g, err := b.Connections(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return g.Pairs()
}

func TestExecutorFullMesh(t *testing.T) {
	t.Parallel()
	for _, par := range []int{0, 1, 2, 5} {
		t.Run("parallel "+string(rune('0'+par)), func(t *testing.T) {
			t.Parallel()
			names := GeneratedNames(7)
			b := NewSimulated(time.Millisecond, nil)
			var progress bytes.Buffer
			e := &Executor{Parallel: par, Backoff: noBackoff, Progress: &progress}
			res, err := e.Run(context.Background(), b, FullMesh(names...))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(FullMesh(names...).Pairs(), connections(t, b)); diff != "" {
				t.Errorf("connections (-want +got):\n%s", diff)
			}
			st := b.Stats()
			if st.Conflicts != 0 {
				t.Errorf("%d conflicts: a cluster was in two operations at once", st.Conflicts)
			}
			wantPar := par
			if par == 0 {
				wantPar = 3 // a round of 7 holds 3 pairs
			}
			if st.MaxInFlight > wantPar {
				t.Errorf("max in flight %d > %d", st.MaxInFlight, wantPar)
			}
			if res.Rounds != 7 || res.Ops != 21 || res.Succeeded != 21 || res.Retries != 0 || st.Calls != 21 {
				t.Errorf("result %+v, stats %+v", res, st)
			}
			if got := strings.Count(progress.String(), "\n"); got != 7 {
				t.Errorf("%d progress lines, want 7:\n%s", got, progress.String())
			}
			if !strings.Contains(progress.String(), "round 7/7: 3/3 done, 0 failed, 0 retries; total 21/21 done, 0 failed") {
				t.Errorf("progress:\n%s", progress.String())
			}
		})
	}
}

func TestExecutorRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	names := GeneratedNames(4)
	b := NewSimulated(0, nil)
	b.FailNext("connect c1 c4", 2)
	b.FailNext("connect c2 c3", 1)
	var (
		mu      sync.Mutex // guards retries: Backoff runs on the executor's workers
		retries []int
	)
	e := &Executor{Attempts: 3, Backoff: func(n int) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		retries = append(retries, n)
		return 0
	}}
	res, err := e.Run(context.Background(), b, FullMesh(names...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != 6 || res.Retries != 3 || len(res.Failures) != 0 {
		t.Errorf("result %+v", res)
	}
	if len(connections(t, b)) != 6 {
		t.Errorf("connections %v", connections(t, b))
	}
	// Backoff is asked for retry 1, 2 (c1-c4) and 1 (c2-c3), in some order.
	if len(retries) != 3 {
		t.Errorf("backoff calls %v", retries)
	}
}

func TestExecutorPermanentFailureContinuesAndResumes(t *testing.T) {
	t.Parallel()
	names := GeneratedNames(6)
	wanted := FullMesh(names...)
	b := NewSimulated(0, nil)
	b.FailNext("connect c1 c6", 100)
	var progress bytes.Buffer
	e := &Executor{Attempts: 3, Backoff: noBackoff, Progress: &progress}
	res, err := e.Run(context.Background(), b, wanted)
	if err == nil || !strings.Contains(err.Error(), "1 of 15 operations failed") || !strings.Contains(err.Error(), "round 1: connect c1 c6: connect c1 c6: injected failure") {
		t.Fatalf("Run error %v", err)
	}
	// The rest of round 1 and every later round ran.
	if res.Rounds != 5 || res.Succeeded != 14 || len(res.Failures) != 1 || res.Failures[0].Attempts != 3 {
		t.Errorf("result %+v", res)
	}
	if !strings.Contains(progress.String(), "round 1/5: 2/3 done, 1 failed, 2 retries") {
		t.Errorf("progress:\n%s", progress.String())
	}
	var sum bytes.Buffer
	if err := WriteSummary(&sum, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), "circle  5/5     15          14         1       2") ||
		!strings.Contains(sum.String(), "failed: round 1: connect c1 c6 after 3 attempts") {
		t.Errorf("summary:\n%s", sum.String())
	}

	// Resume: the fault is gone; a new run plans only the missing pair.
	b.FailNext("connect c1 c6", 0)
	res, err = e.Run(context.Background(), b, wanted)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 1 || res.Succeeded != 1 || res.Schedule.Rounds[0][0] != (Op{A: "c1", B: "c6"}) {
		t.Errorf("resume result %+v", res)
	}
	if diff := cmp.Diff(wanted.Pairs(), connections(t, b)); diff != "" {
		t.Errorf("connections (-want +got):\n%s", diff)
	}
	// A third run has nothing to do.
	if res, err = e.Run(context.Background(), b, wanted); err != nil || res.Ops != 0 {
		t.Errorf("third run: %+v, %v", res, err)
	}
}

func TestExecutorGrowAndShrink(t *testing.T) {
	t.Parallel()
	names := GeneratedNames(8)
	b := NewSimulated(0, FullMesh(names[:4]...))
	e := &Executor{Backoff: noBackoff}
	res, err := e.Run(context.Background(), b, FullMesh(names...))
	if err != nil {
		t.Fatal(err)
	}
	// Adding 4 to 4: Δ = 7 rounds, 4·4 + 6 = 22 pairs.
	if res.Rounds != 7 || res.Ops != 22 {
		t.Errorf("grow: %+v", res.Schedule)
	}
	// Remove c8: a star of 7 disconnects.
	res, err = e.Run(context.Background(), b, FullMesh(names[:7]...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds != 7 || res.Ops != 7 || !res.Schedule.Rounds[0][0].Disconnect {
		t.Errorf("shrink: %+v", res.Schedule)
	}
	if diff := cmp.Diff(FullMesh(names[:7]...).Pairs(), connections(t, b)); diff != "" {
		t.Errorf("connections (-want +got):\n%s", diff)
	}
}

func TestExecutorCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := NewSimulated(time.Hour, nil)
	_, err := (&Executor{}).Run(ctx, b, FullMesh(GeneratedNames(4)...))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a cancelled context: %v", err)
	}
	if len(connections(t, b)) != 0 {
		t.Error("a cancelled run wrote connections")
	}
}

func TestRunRoundRefusesBusyCluster(t *testing.T) {
	t.Parallel()
	calls := 0
	do := func(context.Context) error { calls++; return nil }
	_, err := (&Executor{}).runRound(context.Background(), 1, []job{
		{label: "connect a b", clusters: []string{"a", "b"}, do: do},
		{label: "connect b c", clusters: []string{"b", "c"}, do: do},
	})
	if err == nil || !strings.Contains(err.Error(), `cluster "b" is in two operations (connect b c)`) || calls != 0 {
		t.Errorf("runRound: %v, %d calls", err, calls)
	}
}

func TestExecutorDeclarative(t *testing.T) {
	t.Parallel()
	names := GeneratedNames(8)
	b := NewSimulated(time.Millisecond, nil)
	b.FailNext("set-peers c3", 1)
	var progress bytes.Buffer
	e := &Executor{Parallel: 4, Backoff: noBackoff, Progress: &progress}
	res, err := e.Declarative(context.Background(), b, names, FullMesh(names...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds != 1 || res.Ops != 8 || res.Succeeded != 8 || res.Retries != 1 {
		t.Errorf("result %+v", res)
	}
	if st := b.Stats(); st.Conflicts != 0 || st.MaxInFlight > 4 {
		t.Errorf("stats %+v", st)
	}
	if diff := cmp.Diff(FullMesh(names...).Pairs(), connections(t, b)); diff != "" {
		t.Errorf("connections (-want +got):\n%s", diff)
	}

	// Remove c8: only the 7 remaining clusters are written, once each.
	before := b.Stats().Calls
	res, err = e.Declarative(context.Background(), b, names[:7], FullMesh(names[:7]...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 7 || b.Stats().Calls-before != 7 {
		t.Errorf("remove: %+v", res)
	}
	if diff := cmp.Diff(FullMesh(names[:7]...).Pairs(), connections(t, b)); diff != "" {
		t.Errorf("connections (-want +got):\n%s", diff)
	}
	// Re-applying the same state writes nothing.
	if res, err = e.Declarative(context.Background(), b, names[:7], FullMesh(names[:7]...)); err != nil || res.Ops != 0 {
		t.Errorf("re-apply: %+v, %v", res, err)
	}
}
