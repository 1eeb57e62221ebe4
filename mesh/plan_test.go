package mesh

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkSchedule verifies the schedule's invariants against the graphs it came from:
// every needed pair exactly once with the right direction, no cluster twice in a
// round, and consistent counts.
func checkSchedule(t *testing.T, current, wanted *Graph, s Schedule) {
	t.Helper()
	need := map[Pair]bool{} // pair -> disconnect
	for _, p := range wanted.Pairs() {
		if !current.Has(p.A, p.B) {
			need[p] = false
		}
	}
	for _, p := range current.Pairs() {
		if !wanted.Has(p.A, p.B) {
			need[p] = true
		}
	}
	seen := map[Pair]bool{}
	for i, r := range s.Rounds {
		if len(r) == 0 {
			t.Errorf("round %d is empty", i+1)
		}
		busy := map[string]bool{}
		for _, op := range r {
			if busy[op.A] || busy[op.B] {
				t.Errorf("round %d: %v: a cluster is already busy in this round", i+1, op)
			}
			busy[op.A], busy[op.B] = true, true
			p := op.Pair()
			if op.A != p.A {
				t.Errorf("round %d: %v is not canonical", i+1, op)
			}
			disc, ok := need[p]
			switch {
			case !ok:
				t.Errorf("round %d: %v is not needed", i+1, op)
			case seen[p]:
				t.Errorf("round %d: %v appears twice", i+1, op)
			case disc != op.Disconnect:
				t.Errorf("round %d: %v has the wrong direction", i+1, op)
			}
			seen[p] = true
		}
	}
	if len(seen) != len(need) {
		t.Errorf("schedule covers %d of %d needed pairs", len(seen), len(need))
	}
	if s.RoundCount != len(s.Rounds) || s.PairCount != len(need) {
		t.Errorf("counts: roundCount %d (rounds %d), pairCount %d (needed %d)", s.RoundCount, len(s.Rounds), s.PairCount, len(need))
	}
	if s.RoundCount < s.LowerBound {
		t.Errorf("roundCount %d below lowerBound %d: the bound is wrong", s.RoundCount, s.LowerBound)
	}
	if s.RoundCount > s.LowerBound+1 {
		t.Errorf("roundCount %d > lowerBound+1 = %d", s.RoundCount, s.LowerBound+1)
	}
}

func TestPlanScenarios(t *testing.T) {
	t.Parallel()
	names := func(from, to int) []string { return GeneratedNames(to)[from:] }
	tests := []struct {
		name             string
		current, wanted  *Graph
		rounds, lower, p int
		method           string
	}{
		{"nothing", NewGraph(), NewGraph(), 0, 0, 0, MethodNone},
		{"already meshed", FullMesh(GeneratedNames(5)...), FullMesh(GeneratedNames(5)...), 0, 0, 0, MethodNone},
		{"full 2", NewGraph(), FullMesh(GeneratedNames(2)...), 1, 1, 1, MethodCircle},
		{"full 3", NewGraph(), FullMesh(GeneratedNames(3)...), 3, 3, 3, MethodCircle},
		{"full 6", NewGraph(), FullMesh(GeneratedNames(6)...), 5, 5, 15, MethodCircle},
		{"full 13", NewGraph(), FullMesh(GeneratedNames(13)...), 13, 13, 78, MethodCircle},
		{"add 1 to 4", FullMesh(GeneratedNames(4)...), FullMesh(GeneratedNames(5)...), 4, 4, 4, MethodSplitCircle},
		{"add 1 to 5", FullMesh(GeneratedNames(5)...), FullMesh(GeneratedNames(6)...), 5, 5, 5, MethodSplitCircle},
		{"add 2 to 4", FullMesh(GeneratedNames(4)...), FullMesh(GeneratedNames(6)...), 5, 5, 9, MethodSplitCircle},
		{"add 10 to 100", FullMesh(GeneratedNames(100)...), FullMesh(GeneratedNames(110)...), 109, 109, 10*100 + 45, MethodSplitCircle},
		{"add 2 to 5 (odd: ≤ Δ+1)", FullMesh(GeneratedNames(5)...), FullMesh(GeneratedNames(7)...), 7, 6, 11, MethodSplitCircle},
		{"remove 1 from 6", FullMesh(GeneratedNames(6)...), FullMesh(GeneratedNames(5)...), 5, 5, 5, MethodSplitCircle},
		{"remove 2 from 8", FullMesh(GeneratedNames(8)...), FullMesh(GeneratedNames(6)...), 7, 7, 13, MethodSplitCircle},
		{"two meshes joined", FullMesh(names(0, 3)...), func() *Graph {
			g := FullMesh(GeneratedNames(3)...)
			g.Add("c4", "c5")
			return g
		}(), 1, 1, 1, MethodCircle},
		// Misra–Gries guarantees Δ+1 only; a path could be done in Δ = 2.
		{"path", NewGraph(), NewGraph(NewPair("a", "b"), NewPair("b", "c"), NewPair("c", "d")), 3, 2, 3, MethodMisraGries},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := Plan(tt.current, tt.wanted)
			checkSchedule(t, tt.current, tt.wanted, s)
			got := []any{s.RoundCount, s.LowerBound, s.PairCount, s.Method}
			want := []any{tt.rounds, tt.lower, tt.p, tt.method}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rounds, lowerBound, pairs, method (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanAcceptance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, existing, rounds, pairs, lower int
	}{
		{511, 0, 511, 130305, 511},
		{512, 0, 511, 130816, 511},
		{511, 510, 510, 510, 510},
		{512, 256, 511, 256*256 + 256*255/2, 511},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-from-%d", tt.n, tt.existing), func(t *testing.T) {
			t.Parallel()
			names := GeneratedNames(tt.n)
			current := FullMesh(names[:tt.existing]...)
			wanted := FullMesh(names...)
			s := Plan(current, wanted)
			checkSchedule(t, current, wanted, s)
			got := [3]int{s.RoundCount, s.PairCount, s.LowerBound}
			if want := [3]int{tt.rounds, tt.pairs, tt.lower}; got != want {
				t.Errorf("roundCount, pairCount, lowerBound = %v, want %v", got, want)
			}
		})
	}
}

func TestPlanJSONShape(t *testing.T) {
	t.Parallel()
	s := Plan(NewGraph(), FullMesh("c1", "c2", "c3", "c4"))
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rounds":[[{"a":"c1","b":"c4"},{"a":"c2","b":"c3"}],[{"a":"c1","b":"c3"},{"a":"c2","b":"c4"}],[{"a":"c1","b":"c2"},{"a":"c3","b":"c4"}]],"roundCount":3,"pairCount":6,"lowerBound":3}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	empty, _ := json.Marshal(Plan(NewGraph(), NewGraph()))
	if diff := cmp.Diff(`{"rounds":[],"roundCount":0,"pairCount":0,"lowerBound":0}`, string(empty)); diff != "" {
		t.Errorf("empty JSON (-want +got):\n%s", diff)
	}
}

func TestPlanDeterministic(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		cur, want := randomGraphs(rng, 2+rng.IntN(30))
		a, _ := json.Marshal(Plan(cur, want))
		b, _ := json.Marshal(Plan(cur.Clone(), want.Clone()))
		if string(a) != string(b) {
			t.Fatalf("two plans of the same graphs differ:\n%s\n%s", a, b)
		}
	}
}

// randomGraphs returns a random current and wanted graph on n clusters with a
// random density each, so that some pairs are added and some removed.
func randomGraphs(rng *rand.Rand, n int) (current, wanted *Graph) {
	names := GeneratedNames(n)
	current, wanted = NewGraph(), NewGraph()
	pc, pw := rng.Float64(), rng.Float64()
	for i, a := range names {
		for _, b := range names[i+1:] {
			if rng.Float64() < pc {
				current.Add(a, b)
			}
			if rng.Float64() < pw {
				wanted.Add(a, b)
			}
		}
	}
	return current, wanted
}

func TestPlanPropertiesRandomGraphs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(8, 511))
	for i := 0; i < 500; i++ {
		cur, want := randomGraphs(rng, 1+rng.IntN(40))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkSchedule(t, cur, want, Plan(cur, want))
		})
	}
}

func TestPlanPropertiesMisraGriesDense(t *testing.T) {
	t.Parallel()
	// Complete graphs minus a few pairs defeat the circle shortcut and stress the
	// fan rotation of Misra–Gries.
	rng := rand.New(rand.NewPCG(3, 5))
	for i := 0; i < 100; i++ {
		n := 4 + rng.IntN(40)
		want := FullMesh(GeneratedNames(n)...)
		for j := 0; j < 1+rng.IntN(3); j++ {
			want.Remove(fmt.Sprint("c", 1+rng.IntN(n)), fmt.Sprint("c", 1+rng.IntN(n)))
		}
		cur := NewGraph()
		s := Plan(cur, want)
		checkSchedule(t, cur, want, s)
	}
}

func TestPlanPropertiesMeshGrowth(t *testing.T) {
	t.Parallel()
	// Adding k to m and removing r from m: the cases docs/mesh.md lists must reach
	// the lower bound exactly.
	for m := 0; m <= 24; m++ {
		for k := 1; k <= 24; k++ {
			names := GeneratedNames(m + k)
			cur, want := FullMesh(names[:m]...), FullMesh(names...)
			s := Plan(cur, want)
			checkSchedule(t, cur, want, s)
			full := m == 0
			if (full || (m+k)%2 == 0 || k == 1) && s.RoundCount != s.LowerBound {
				t.Errorf("add %d to %d: %d rounds, lowerBound %d", k, m, s.RoundCount, s.LowerBound)
			}
			// Removing k from m+k, the mirror image.
			s = Plan(want, cur)
			checkSchedule(t, want, cur, s)
			if ((m+k)%2 == 0 || k == 1) && s.RoundCount != s.LowerBound {
				t.Errorf("remove %d from %d: %d rounds, lowerBound %d", k, m+k, s.RoundCount, s.LowerBound)
			}
		}
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	got := []string{"c10", "c2", "c1", "b", "c01", "a-3", "a-20"}
	want := []string{"a-3", "a-20", "b", "c01", "c1", "c2", "c10"}
	slicesSort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func slicesSort(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if Less(s[j], s[i]) {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func BenchmarkPlanFullMesh511(b *testing.B) {
	wanted := FullMesh(GeneratedNames(511)...)
	current := NewGraph()
	b.ReportAllocs()
	for b.Loop() {
		if s := Plan(current, wanted); s.RoundCount != 511 {
			b.Fatal(s.RoundCount)
		}
	}
}

func BenchmarkPlanAddOneTo510(b *testing.B) {
	names := GeneratedNames(511)
	current, wanted := FullMesh(names[:510]...), FullMesh(names...)
	for b.Loop() {
		Plan(current, wanted)
	}
}

func BenchmarkPlanMisraGries128(b *testing.B) {
	wanted := FullMesh(GeneratedNames(128)...)
	wanted.Remove("c1", "c2")
	current := NewGraph()
	for b.Loop() {
		Plan(current, wanted)
	}
}
