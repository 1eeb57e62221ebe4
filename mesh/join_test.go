package mesh

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeStatus reports, for a cluster, every peer the simulated backend has configured for
// it, as one agent and one KVStoreMesh would. A cluster's peers become ready only from its
// readyAfter-th read after it was written (so joins overlap), and flap scripts a remote's
// readiness per read: flap["c3"] = [true, false, true] makes the first three reads that
// mention c3, by any cluster, report it ready, not ready, ready.
type fakeStatus struct {
	sim        *Simulated
	readyAfter int

	mu      sync.Mutex
	reads   map[string]int // cluster → reads
	flap    map[string][]bool
	never   map[string]bool // clusters that never get ready
	calls   int
	flapped int // reads that reported a flapping remote not ready
}

func newFakeStatus(sim *Simulated, readyAfter int) *fakeStatus {
	return &fakeStatus{sim: sim, readyAfter: readyAfter, reads: map[string]int{}, flap: map[string][]bool{}, never: map[string]bool{}}
}

func (f *fakeStatus) MeshStatus(ctx context.Context, cluster string) (MeshStatus, error) {
	peers, err := f.sim.Peers(ctx)
	if err != nil {
		return MeshStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.reads[cluster]++
	var rs []RemoteStatus
	for _, p := range sortedCopy(peers[cluster]) {
		r := RemoteStatus{Name: p, Ready: f.reads[cluster] >= f.readyAfter && !f.never[cluster], Status: "connected", Synced: &RemoteSynced{Nodes: true, Services: true, Identities: true, Endpoints: true}}
		if script := f.flap[p]; len(script) > 0 {
			r.Ready = r.Ready && script[0]
			if !script[0] {
				f.flapped++
				r.Status = "connection lost, reconnecting"
			}
			f.flap[p] = script[1:]
		}
		rs = append(rs, r)
	}
	return MeshStatus{Agents: [][]RemoteStatus{rs}, KVStoreMesh: [][]RemoteStatus{rs}}, nil
}

func names(n int) []string { return GeneratedNames(n) }

func TestDeclarativeJoinsBoundedAndWaited(t *testing.T) {
	t.Parallel()
	const n, par = 10, 3
	sim := NewSimulated(0, nil)
	st := newFakeStatus(sim, 3)
	j, err := OpenJournal(filepath.Join(t.TempDir(), "apply.journal"))
	if err != nil {
		t.Fatal(err)
	}
	// The joins write their progress lines from their own goroutines: under -race, a write
	// to a plain buffer not serialised by the Executor fails this test.
	var progress bytes.Buffer
	e := &Executor{Parallel: par, Status: st, KVStoreMesh: true, PollInterval: time.Millisecond, Journal: j, Progress: &progress}
	res, err := e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	for _, c := range names(n) {
		if !slices.ContainsFunc(lines, func(l string) bool {
			return strings.HasPrefix(l, fmt.Sprintf("join %s: %d peers ready after ", c, n-1))
		}) {
			t.Errorf("no progress line for %s's join in:\n%s", c, progress.String())
		}
	}
	if len(lines) != n+1 || !strings.HasPrefix(lines[n], "round 1/1: ") {
		t.Errorf("progress: want %d join lines and a round line, got:\n%s", n, progress.String())
	}
	if res.Succeeded != n || res.Writes != n || res.Rounds != 1 {
		t.Errorf("joins: %d succeeded, %d writes, %d rounds; want %d, %d, 1", res.Succeeded, res.Writes, res.Rounds, n, n)
	}
	entries, err := ReadJournal(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	// Each join holds its slot through its wait (3 reads each), so the bound is reached,
	// and never exceeded.
	if got := MaxInFlight(entries); got != par {
		t.Errorf("at most %d joins in flight, journal shows %d", par, got)
	}
	for _, c := range names(n) {
		if st.reads[c] < 3 {
			t.Errorf("%s: join done after %d status reads, before its peers were ready (read 3)", c, st.reads[c])
		}
	}
	if calls := sim.Stats().Calls; calls != n {
		t.Errorf("%d writes to the simulated mesh, want %d", calls, n)
	}
}

func TestDeclarativeFlappingRemoteDoesNotRejoin(t *testing.T) {
	t.Parallel()
	const n = 7
	sim := NewSimulated(0, nil)
	st := newFakeStatus(sim, 1)
	// c3 flaps: down for 4 reads, up, down twice, up for good.
	st.flap["c3"] = []bool{false, false, false, false, true, false, false}
	path := filepath.Join(t.TempDir(), "apply.journal")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{Parallel: 4, Status: st, PollInterval: time.Millisecond, Journal: j}
	res, err := e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err != nil {
		t.Fatal(err)
	}
	if st.flapped != 6 {
		t.Fatalf("the script reported c3 down %d times, want 6: the flap was not exercised", st.flapped)
	}
	if calls := sim.Stats().Calls; calls != n || res.Writes != n {
		t.Errorf("a flapping remote made %d writes (%d counted), want one per cluster (%d)", calls, res.Writes, n)
	}
	entries, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, en := range entries {
		count[en.Event+" "+en.Cluster]++
	}
	for _, c := range names(n) {
		if count["write "+c] != 1 || count["done "+c] != 1 || count["failed "+c] != 0 {
			t.Errorf("%s: journal has %d writes, %d done, %d failed; want 1, 1, 0", c, count["write "+c], count["done "+c], count["failed "+c])
		}
	}

	// Re-running after the mesh settled: every join is in the journal, nothing is read
	// or written, however c3 behaves now.
	st.flap["c3"] = []bool{false, false, false}
	callsBefore := st.calls
	j2, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e.Journal = j2
	res, err = e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Finished != n || res.Ops != 0 || sim.Stats().Calls != n || st.calls != callsBefore {
		t.Errorf("re-run: %d finished, %d joins, %d writes in all, %d status reads; want %d, 0, %d, 0",
			res.Finished, res.Ops, sim.Stats().Calls, st.calls-callsBefore, n, n)
	}
}

func TestDeclarativeJoinTimeoutAndResume(t *testing.T) {
	t.Parallel()
	const n = 5
	sim := NewSimulated(0, nil)
	st := newFakeStatus(sim, 1)
	st.never["c4"] = true
	path := filepath.Join(t.TempDir(), "apply.journal")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{Parallel: 2, Status: st, PollInterval: time.Millisecond, JoinTimeout: 30 * time.Millisecond, Journal: j}
	res, err := e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err == nil || len(res.Failures) != 1 || res.Failures[0].Op != "join c4" {
		t.Fatalf("want join c4 to fail, got %v, failures %+v", err, res.Failures)
	}
	for _, want := range []string{`cluster "c4": not joined after 30ms (--join-timeout)`, "c1: agent 1: not ready (connected)"} {
		if !strings.Contains(res.Failures[0].Err.Error(), want) {
			t.Errorf("failure %q lacks %q", res.Failures[0].Err, want)
		}
	}

	// The resumed run waits for c4 only: it is written already, and the others are done.
	st.never["c4"] = false
	j2, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e.Journal = j2
	reads := st.reads["c4"]
	res, err = e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Finished != n-1 || res.Ops != 1 || res.Writes != 0 || sim.Stats().Calls != n || st.reads["c4"] == reads {
		t.Errorf("resume: %d finished, %d joins, %d writes (%d in all), c4 read %d more times; want %d, 1, 0 (%d), ≥1",
			res.Finished, res.Ops, res.Writes, sim.Stats().Calls, st.reads["c4"]-reads, n-1, n)
	}
}

func TestDeclarativeKilledApplyResumes(t *testing.T) {
	t.Parallel()
	const n = 8
	sim := NewSimulated(0, nil)
	st := newFakeStatus(sim, 1)
	st.never["c6"], st.never["c7"], st.never["c8"] = true, true, true
	path := filepath.Join(t.TempDir(), "apply.journal")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// "Kill" the run once five joins are done: the three left are waiting forever.
	go func() {
		defer cancel()
		for {
			entries, _ := ReadJournal(path)
			done := 0
			for _, e := range entries {
				if e.Event == JournalDone {
					done++
				}
			}
			if done == 5 {
				return
			}
			time.Sleep(time.Millisecond) // polls the journal file; not a synchronisation stand-in
		}
	}()
	e := &Executor{Parallel: 8, Status: st, PollInterval: time.Millisecond, Journal: j}
	if _, err := e.Declarative(ctx, sim, names(n), FullMesh(names(n)...)); err == nil {
		t.Fatal("the killed run succeeded")
	}
	first, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, en := range first {
		if en.Event == JournalWrite {
			written[en.Cluster] = true
		}
	}
	for _, c := range []string{"c6", "c7", "c8"} {
		st.never[c] = false
	}
	j2, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e.Journal = j2
	res, err := e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err != nil {
		t.Fatal(err)
	}
	// Every cluster is written exactly once over both runs; the five done are not touched.
	if res.Finished != 5 || res.Ops != 3 || sim.Stats().Calls != n {
		t.Errorf("resume: %d finished, %d joins, %d writes in all; want 5, 3, %d", res.Finished, res.Ops, sim.Stats().Calls, n)
	}
	entries, _ := ReadJournal(path)
	var second, want []string
	for _, en := range entries[len(first):] {
		second = append(second, en.Event+" "+en.Cluster)
	}
	for _, c := range []string{"c6", "c7", "c8"} {
		begin := "write "
		if written[c] {
			begin = "wait " // written before the kill: only its status is awaited
		}
		want = append(want, "done "+c, begin+c)
	}
	slices.Sort(second)
	slices.Sort(want)
	if !slices.Equal(second, want) {
		t.Errorf("the resumed run journalled %v, want %v", second, want)
	}
}

func TestParseMeshStatus(t *testing.T) {
	t.Parallel()
	agent := `{"cluster-mesh": {"clusters": [{"name": "c2", "ready": true, "connected": true, "status": "etcd: 1/1 connected", "num-failures": 2,
	  "synced": {"nodes": true, "services": true, "identities": true, "endpoints": true}}, {"name": "c3", "status": "Waiting for initial connection to be established"}]}, "kvstore": {}}`
	kvs := `[{"name": "c2", "ready": true, "synced": {"nodes": true, "services": true, "identities": true, "endpoints": true, "service-exports": false}},
	  {"name": "c3", "ready": true, "synced": {"nodes": true, "services": true, "identities": true, "endpoints": true}}]`
	s, err := ParseMeshStatus(strings.NewReader(agent + "\n" + agent + kvs))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Agents) != 2 || len(s.KVStoreMesh) != 1 || s.Agents[0][0].NumFailures != 2 {
		t.Fatalf("parsed %+v", s)
	}
	got := s.Missing([]string{"c2", "c3", "c4"}, true)
	want := []string{
		"c2: KVStoreMesh 1: not synchronised yet",
		"c3: agent 1: not ready (Waiting for initial connection to be established)",
		"c4: agent 1: not configured yet",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Missing:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := s.Missing([]string{"c2"}, false); got != nil {
		t.Errorf("c2 without KVStoreMesh: %v, want ready", got)
	}
	if got := (MeshStatus{Agents: s.Agents}).Missing([]string{"c2"}, true); len(got) != 1 || !strings.Contains(got[0], "no KVStoreMesh status") {
		t.Errorf("KVStoreMesh enabled, none reported: %v", got)
	}
	for _, bad := range []string{`{"kvstore": {}}`, `"ok"`, `{"cluster-mesh": 3}`, `[{"name": 1}]`, `{`} {
		if _, err := ParseMeshStatus(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseMeshStatus(%s): no error", bad)
		}
	}
}

func TestJournalReadsCutLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.record(JournalWrite, "c1", []string{"c2"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := j.record(JournalDone, "c1", []string{"c2"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := j.f.WriteString("2026-12-01T00:00:00Z done c2 "); err != nil { // killed mid-line
		t.Fatal(err)
	}
	j.Close()
	j2, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if !j2.Finished("c1", []string{"c2"}) || j2.Finished("c2", []string{"c1"}) || j2.Finished("c1", []string{"c2", "c3"}) {
		t.Errorf("finished joins after a cut line: %v", j2.done)
	}
	if err := j2.record(JournalWrite, "c1", []string{"c2", "c3"}, fmt.Sprint("detail")); err != nil {
		t.Fatal(err)
	}
	if j2.Finished("c1", []string{"c2"}) {
		t.Error("a new write of c1 left its old join finished")
	}
}

// TestDeclarativeWithoutStatusIsUnverified: without a status reader (--no-wait) a join
// ends once written; the journal and the summary say it was not verified, and a later run
// that waits treats those clusters as written, not done: it waits for them, writing nothing.
func TestDeclarativeWithoutStatusIsUnverified(t *testing.T) {
	t.Parallel()
	const n = 4
	sim := NewSimulated(0, nil)
	path := filepath.Join(t.TempDir(), "apply.journal")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{Parallel: 2, Journal: j}
	res, err := e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != n || res.Unverified != n {
		t.Errorf("%d joins succeeded, %d unverified; want %d, %d", res.Succeeded, res.Unverified, n, n)
	}
	var sum strings.Builder
	if err := WriteSummary(&sum, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), "joins: 4 not verified: written, but Cilium's status was not read") {
		t.Errorf("summary:\n%s", sum.String())
	}
	entries, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Event == JournalDone {
			t.Errorf("journal records %s done without a status read", en.Cluster)
		}
	}
	count := map[string]int{}
	for _, en := range entries {
		count[en.Event]++
	}
	if count[JournalWrite] != n || count[JournalUnverified] != n || MaxInFlight(entries) > 2 {
		t.Errorf("journal: %v (max in flight %d), want %d writes and %d unverified, ≤ 2 in flight", count, MaxInFlight(entries), n, n)
	}
	if !strings.Contains(entries[len(entries)-1].Detail, "not verified") {
		t.Errorf("unverified entry's detail %q", entries[len(entries)-1].Detail)
	}

	// The same run again without status: nothing to write, nothing claimed.
	if res, err = e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...)); err != nil || res.Ops != 0 || res.Unverified != 0 {
		t.Errorf("re-run without status: %+v, %v", res, err)
	}

	// A run that waits: every cluster is only awaited, none written again.
	j2, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	st := newFakeStatus(sim, 2)
	e = &Executor{Parallel: 2, Journal: j2, Status: st, PollInterval: time.Millisecond}
	res, err = e.Declarative(context.Background(), sim, names(n), FullMesh(names(n)...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != n || res.Writes != 0 || res.Finished != 0 || res.Unverified != 0 || sim.Stats().Calls != n {
		t.Errorf("waiting run: %d joins, %d writes, %d finished, %d unverified, %d writes in all; want %d, 0, 0, 0, %d",
			res.Ops, res.Writes, res.Finished, res.Unverified, sim.Stats().Calls, n, n)
	}
	for _, c := range names(n) {
		if st.reads[c] < 2 {
			t.Errorf("%s: %d status reads, want ≥ 2 (ready from read 2)", c, st.reads[c])
		}
		if !j2.Finished(c, withoutSelf(c, names(n))) {
			t.Errorf("%s: not done in the journal after the waiting run", c)
		}
	}
}
