package mesh

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// Pair is an undirected connection between two clusters. Pairs built by NewPair
// are canonical: A sorts before B (see Less).
type Pair struct {
	A string `json:"a"`
	B string `json:"b"`
}

// NewPair returns the canonical pair of a and b.
func NewPair(a, b string) Pair {
	if Less(b, a) {
		a, b = b, a
	}
	return Pair{A: a, B: b}
}

func (p Pair) String() string { return p.A + "<->" + p.B }

// Graph is a set of undirected connections between clusters. The zero value is
// not usable; use NewGraph or FullMesh.
//
// Names are interned, and a pair is kept as two packed ints, so that Plan compares
// graphs of 130k pairs with cheap integer hashing.
type Graph struct {
	ids   map[string]int32
	names []string
	edges map[uint64]struct{} // packKey(lower id, higher id)
}

// NewGraph returns a graph holding the given pairs.
func NewGraph(pairs ...Pair) *Graph {
	g := newGraph(0, len(pairs))
	for _, p := range pairs {
		g.Add(p.A, p.B)
	}
	return g
}

func newGraph(names, edges int) *Graph {
	return &Graph{ids: make(map[string]int32, names), edges: make(map[uint64]struct{}, edges)}
}

// FullMesh returns the complete graph on names.
func FullMesh(names ...string) *Graph {
	g := newGraph(len(names), len(names)*(len(names)-1)/2)
	ids := make([]int32, len(names))
	for i, n := range names {
		ids[i] = g.intern(n)
	}
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[i] != ids[j] {
				g.edges[packKey(ids[i], ids[j])] = struct{}{}
			}
		}
	}
	return g
}

func (g *Graph) intern(name string) int32 {
	if id, ok := g.ids[name]; ok {
		return id
	}
	id := int32(len(g.names))
	g.ids[name] = id
	g.names = append(g.names, name)
	return id
}

func packKey(a, b int32) uint64 {
	if b < a {
		a, b = b, a
	}
	return uint64(uint32(a))<<32 | uint64(uint32(b))
}

func unpackKey(k uint64) (int32, int32) { return int32(uint32(k >> 32)), int32(uint32(k)) }

// Add connects a and b. A self-loop is ignored: Cilium ignores a cluster's own entry.
func (g *Graph) Add(a, b string) {
	if a == b {
		return
	}
	g.edges[packKey(g.intern(a), g.intern(b))] = struct{}{}
}

// Remove disconnects a and b.
func (g *Graph) Remove(a, b string) {
	ia, oka := g.ids[a]
	ib, okb := g.ids[b]
	if oka && okb {
		delete(g.edges, packKey(ia, ib))
	}
}

// Has reports whether a and b are connected.
func (g *Graph) Has(a, b string) bool {
	ia, oka := g.ids[a]
	ib, okb := g.ids[b]
	if !oka || !okb {
		return false
	}
	_, ok := g.edges[packKey(ia, ib)]
	return ok
}

// Len is the number of connections.
func (g *Graph) Len() int { return len(g.edges) }

// Pairs returns the connections in canonical order.
func (g *Graph) Pairs() []Pair {
	out := make([]Pair, 0, len(g.edges))
	for k := range g.edges {
		a, b := unpackKey(k)
		out = append(out, NewPair(g.names[a], g.names[b]))
	}
	slices.SortFunc(out, comparePairs)
	return out
}

// Peers returns every cluster's peers, each list in canonical order.
func (g *Graph) Peers() map[string][]string {
	out := make(map[string][]string)
	for k := range g.edges {
		a, b := unpackKey(k)
		out[g.names[a]] = append(out[g.names[a]], g.names[b])
		out[g.names[b]] = append(out[g.names[b]], g.names[a])
	}
	for _, ps := range out {
		slices.SortFunc(ps, Compare)
	}
	return out
}

// Clone returns an independent copy.
func (g *Graph) Clone() *Graph {
	return &Graph{ids: maps.Clone(g.ids), names: slices.Clone(g.names), edges: maps.Clone(g.edges)}
}

func comparePairs(x, y Pair) int {
	if c := Compare(x.A, y.A); c != 0 {
		return c
	}
	return Compare(x.B, y.B)
}

// GeneratedNames returns the synthetic cluster names c1..cN.
func GeneratedNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "c" + strconv.Itoa(i+1)
	}
	return out
}

// Less reports whether cluster name a sorts before b (see Compare).
func Less(a, b string) bool { return Compare(a, b) < 0 }

// Compare orders cluster names naturally, so c2 sorts before c10: runs of digits
// compare by value, everything else byte by byte. Ties (c01 vs c1) fall back to
// byte order, so the order is total.
func Compare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			x, y := trimZeros(a[si:i]), trimZeros(b[sj:j])
			if len(x) != len(y) {
				return cmpInt(len(x), len(y))
			}
			if x != y {
				if x < y {
					return -1
				}
				return 1
			}
			continue
		}
		if a[i] != b[j] {
			return cmpInt(int(a[i]), int(b[j]))
		}
		i++
		j++
	}
	switch {
	case i < len(a):
		return 1
	case j < len(b):
		return -1
	}
	if a < b {
		return -1
	} else if a > b {
		return 1
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}

func cmpInt(x, y int) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// String lists the pairs, for test failures.
func (g *Graph) String() string { return fmt.Sprint(g.Pairs()) }
