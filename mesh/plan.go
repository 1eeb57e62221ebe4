package mesh

import (
	"fmt"
	"slices"
)

// Op is one pairwise operation of a schedule: connect A and B, or, when
// Disconnect is set, disconnect them. Both clusters are written.
type Op struct {
	A          string `json:"a"`
	B          string `json:"b"`
	Disconnect bool   `json:"disconnect,omitempty"`
}

// Pair returns the pair the operation touches.
func (o Op) Pair() Pair { return NewPair(o.A, o.B) }

func (o Op) String() string {
	if o.Disconnect {
		return "disconnect " + o.A + " " + o.B
	}
	return "connect " + o.A + " " + o.B
}

// Methods Plan uses, reported in Schedule.Method.
const (
	MethodNone        = "none"         // nothing to do
	MethodCircle      = "circle"       // full mesh: round-robin circle method
	MethodSplitCircle = "circle-split" // k universal clusters + m others: circle on K_{m+k} minus the other–other pairs
	MethodMisraGries  = "misra-gries"  // any graph: Misra–Gries edge colouring, at most Δ+1 rounds
	MethodDeclarative = "declarative"  // Executor.Declarative: one write per cluster, one round
)

// Schedule is the result of Plan: rounds of disjoint operations. Its JSON shape is
// the contract documented in docs/mesh.md ("prebake mesh plan").
type Schedule struct {
	Rounds     [][]Op `json:"rounds"`
	RoundCount int    `json:"roundCount"`
	PairCount  int    `json:"pairCount"`
	// LowerBound is the largest degree Δ of the needed graph, or n for a full mesh
	// of odd n, where a round holds at most (n−1)/2 pairs.
	LowerBound int `json:"lowerBound"`
	// Method names the algorithm Plan chose. It is not part of the JSON contract.
	Method string `json:"-"`
}

// Plan returns the rounds that take the mesh from current to wanted. Every pair in
// wanted but not in current is connected, every pair in current but not in wanted is
// disconnected, each exactly once, and no cluster appears twice in a round.
//
// Plan is pure and deterministic. It reaches LowerBound for a full mesh, for adding k
// clusters to m when m+k is even, for adding a single cluster, and for removing
// clusters from an even-sized mesh (all are complete split graphs, see docs/mesh.md).
// Elsewhere it needs at most LowerBound+1 rounds.
func Plan(current, wanted *Graph) Schedule {
	ix := newIndex(current, wanted)
	n := len(ix.names)
	s := Schedule{Rounds: [][]Op{}, Method: MethodNone}
	if len(ix.edges) == 0 {
		return s
	}
	deg := make([]int, n)
	for _, e := range ix.edges {
		deg[e[0]]++
		deg[e[1]]++
	}
	delta := slices.Max(deg)
	e := len(ix.edges)
	s.PairCount = e
	s.LowerBound = delta
	if e == n*(n-1)/2 && n%2 == 1 {
		s.LowerBound = n
	}

	// A complete split graph: a set U of universal clusters (adjacent to every
	// other) and the rest R with no pair inside R. A full mesh is the case R = ∅.
	// Every U vertex has degree n−1, so the graph is split iff its pairs are exactly
	// the U–U and U–R pairs.
	u := 0
	universal := make([]bool, n)
	for v, d := range deg {
		if d == n-1 {
			universal[v] = true
			u++
		}
	}
	if u > 0 && e == u*(u-1)/2+u*(n-u) {
		s.Method = MethodSplitCircle
		if u == n {
			s.Method = MethodCircle
		}
		s.Rounds = ix.ops(circle(n, func(a, b int32) bool { return universal[a] || universal[b] }))
	} else {
		s.Method = MethodMisraGries
		// Misra–Gries colours edges in order, so fix the order for determinism.
		slices.SortFunc(ix.edges, compareEdges)
		s.Rounds = ix.ops(misraGries(n, ix.edges, delta))
	}
	s.RoundCount = len(s.Rounds)
	return s
}

// index interns the clusters of the needed graph as ints in canonical name order.
type index struct {
	names      []string
	edges      [][2]int32        // canonical: edges[i][0] < edges[i][1]
	disconnect map[[2]int32]bool // needed pairs that are removals
}

func newIndex(current, wanted *Graph) *index {
	// Translate ids between the two graphs' name tables.
	wToC := make([]int32, len(wanted.names))
	for i, n := range wanted.names {
		if id, ok := current.ids[n]; ok {
			wToC[i] = id
		} else {
			wToC[i] = -1
		}
	}
	cToW := make([]int32, len(current.names))
	for i, n := range current.names {
		if id, ok := wanted.ids[n]; ok {
			cToW[i] = id
		} else {
			cToW[i] = -1
		}
	}
	var conn, disc []uint64 // keys in wanted's and current's id space
	wTouched := make([]bool, len(wanted.names))
	cTouched := make([]bool, len(current.names))
	for k := range wanted.edges {
		a, b := unpackKey(k)
		if ca, cb := wToC[a], wToC[b]; ca >= 0 && cb >= 0 {
			if _, ok := current.edges[packKey(ca, cb)]; ok {
				continue
			}
		}
		conn = append(conn, k)
		wTouched[a], wTouched[b] = true, true
	}
	for k := range current.edges {
		a, b := unpackKey(k)
		if wa, wb := cToW[a], cToW[b]; wa >= 0 && wb >= 0 {
			if _, ok := wanted.edges[packKey(wa, wb)]; ok {
				continue
			}
		}
		disc = append(disc, k)
		cTouched[a], cTouched[b] = true, true
	}

	// The clusters of the needed graph, in canonical order.
	var names []string
	for i, t := range wTouched {
		if t {
			names = append(names, wanted.names[i])
		}
	}
	for i, t := range cTouched {
		if t && (cToW[i] < 0 || !wTouched[cToW[i]]) {
			names = append(names, current.names[i])
		}
	}
	slices.SortFunc(names, Compare)
	wIdx := make([]int32, len(wanted.names))
	cIdx := make([]int32, len(current.names))
	for i, n := range names {
		if id, ok := wanted.ids[n]; ok {
			wIdx[id] = int32(i)
		}
		if id, ok := current.ids[n]; ok {
			cIdx[id] = int32(i)
		}
	}

	ix := &index{names: names, disconnect: make(map[[2]int32]bool, len(disc))}
	ix.edges = make([][2]int32, 0, len(conn)+len(disc))
	for _, k := range conn {
		a, b := unpackKey(k)
		ix.edges = append(ix.edges, edge(wIdx[a], wIdx[b]))
	}
	for _, k := range disc {
		a, b := unpackKey(k)
		e := edge(cIdx[a], cIdx[b])
		ix.edges = append(ix.edges, e)
		ix.disconnect[e] = true
	}
	return ix
}

func edge(a, b int32) [2]int32 {
	if b < a {
		a, b = b, a
	}
	return [2]int32{a, b}
}

func compareEdges(x, y [2]int32) int {
	if c := cmpInt(int(x[0]), int(y[0])); c != 0 {
		return c
	}
	return cmpInt(int(x[1]), int(y[1]))
}

// ops turns rounds of index pairs into rounds of operations, dropping empty rounds
// and sorting each round canonically.
func (ix *index) ops(rounds [][][2]int32) [][]Op {
	out := make([][]Op, 0, len(rounds))
	for _, r := range rounds {
		if len(r) == 0 {
			continue
		}
		slices.SortFunc(r, compareEdges)
		ops := make([]Op, len(r))
		for i, e := range r {
			ops[i] = Op{A: ix.names[e[0]], B: ix.names[e[1]]}
			if len(ix.disconnect) > 0 {
				ops[i].Disconnect = ix.disconnect[e]
			}
		}
		out = append(out, ops)
	}
	return out
}

// circle is the round-robin circle method on n vertices: fix the last vertex and
// rotate the others. For odd n a phantom vertex gives each vertex one bye. It yields
// n−1 rounds for even n and n for odd n, keeping only the pairs for which keep is
// true. With one universal vertex and odd n, the round of its bye holds only dropped
// pairs, so adding a single cluster still takes Δ rounds.
func circle(n int, keep func(a, b int32) bool) [][][2]int32 {
	m := n
	if m%2 == 1 {
		m++ // vertex n is the bye
	}
	rounds := make([][][2]int32, 0, m-1)
	for r := 0; r < m-1; r++ {
		round := make([][2]int32, 0, m/2)
		add := func(a, b int) {
			if a >= n || b >= n || !keep(int32(a), int32(b)) {
				return
			}
			round = append(round, edge(int32(a), int32(b)))
		}
		add(m-1, r)
		for i := 1; i < m/2; i++ {
			add((r+i)%(m-1), (r-i+m-1)%(m-1))
		}
		rounds = append(rounds, round)
	}
	return rounds
}

// misraGries colours the edges with at most delta+1 colours (Misra and Gries, "A
// constructive proof of Vizing's theorem", IPL 41, 1992) and returns one round per
// colour.
func misraGries(n int, edges [][2]int32, delta int) [][][2]int32 {
	g := newColouring(n, delta+1)
	adj := make([][]int32, n)
	for _, e := range edges {
		adj[e[0]] = append(adj[e[0]], e[1])
		adj[e[1]] = append(adj[e[1]], e[0])
	}
	mark := make([]int, n) // fan membership, stamped per edge
	for stamp, e := range edges {
		stamp++
		x := e[0]
		// A maximal fan of x starting at e[1]: distinct neighbours where the colour
		// of (x, F[i+1]) is free on F[i].
		fan := []int32{e[1]}
		mark[e[1]] = stamp
		for grown := true; grown; {
			grown = false
			last := fan[len(fan)-1]
			for _, v := range adj[x] {
				if mark[v] == stamp {
					continue
				}
				if c := g.colour(x, v); c >= 0 && g.free(last, c) {
					fan = append(fan, v)
					mark[v] = stamp
					grown = true
					break
				}
			}
		}
		c := g.firstFree(x)
		d := g.firstFree(fan[len(fan)-1])
		g.invert(x, c, d)
		w := -1
		for i, f := range fan {
			if g.free(f, d) && g.isFan(x, fan[:i+1]) {
				w = i
				break
			}
		}
		if w < 0 {
			panic(fmt.Sprintf("mesh: Misra–Gries found no rotation point for edge %v", e))
		}
		for j := 0; j < w; j++ {
			cj := g.colour(x, fan[j+1])
			g.uncolour(x, fan[j+1])
			g.set(x, fan[j], cj)
		}
		g.set(x, fan[w], d)
	}
	rounds := make([][][2]int32, delta+1)
	for _, e := range edges {
		c := g.colour(e[0], e[1])
		rounds[c] = append(rounds[c], e)
	}
	return rounds
}

// colouring is a partial proper edge colouring with k colours.
type colouring struct {
	n, k int
	at   []int32          // at[v*k+c]: the neighbour joined to v by colour c, or -1
	of   map[uint64]int32 // colour of edge (u, v), both directions
}

func newColouring(n, k int) *colouring {
	at := make([]int32, n*k)
	for i := range at {
		at[i] = -1
	}
	return &colouring{n: n, k: k, at: at, of: make(map[uint64]int32)}
}

func (g *colouring) key(u, v int32) uint64 { return uint64(u)<<32 | uint64(uint32(v)) }

func (g *colouring) colour(u, v int32) int {
	if c, ok := g.of[g.key(u, v)]; ok {
		return int(c)
	}
	return -1
}

func (g *colouring) free(v int32, c int) bool { return g.at[int(v)*g.k+c] < 0 }

func (g *colouring) firstFree(v int32) int {
	for c := 0; c < g.k; c++ {
		if g.free(v, c) {
			return c
		}
	}
	panic("mesh: vertex with no free colour: degree exceeds Δ")
}

func (g *colouring) set(u, v int32, c int) {
	g.at[int(u)*g.k+c] = v
	g.at[int(v)*g.k+c] = u
	g.of[g.key(u, v)] = int32(c)
	g.of[g.key(v, u)] = int32(c)
}

func (g *colouring) uncolour(u, v int32) {
	c := g.colour(u, v)
	if c < 0 {
		return
	}
	g.at[int(u)*g.k+c] = -1
	g.at[int(v)*g.k+c] = -1
	delete(g.of, g.key(u, v))
	delete(g.of, g.key(v, u))
}

// invert swaps colours c and d on the maximal c/d path that starts at x. c is free on
// x, so the path leaves x by its d edge.
func (g *colouring) invert(x int32, c, d int) {
	if c == d {
		return
	}
	path := []int32{x}
	for cur, col := x, d; ; {
		next := g.at[int(cur)*g.k+col]
		if next < 0 {
			break
		}
		path = append(path, next)
		cur = next
		if col == d {
			col = c
		} else {
			col = d
		}
	}
	cols := make([]int, len(path)-1)
	for i := range cols {
		cols[i] = g.colour(path[i], path[i+1])
		g.uncolour(path[i], path[i+1])
	}
	for i, col := range cols {
		if col == c {
			col = d
		} else {
			col = c
		}
		g.set(path[i], path[i+1], col)
	}
}

// isFan reports whether fan is a fan of x: (x, fan[0]) is uncoloured and the colour
// of (x, fan[i+1]) is free on fan[i].
func (g *colouring) isFan(x int32, fan []int32) bool {
	if g.colour(x, fan[0]) >= 0 {
		return false
	}
	for i := 0; i+1 < len(fan); i++ {
		c := g.colour(x, fan[i+1])
		if c < 0 || !g.free(fan[i], c) {
			return false
		}
	}
	return true
}
