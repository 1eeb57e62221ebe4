package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrConflict is what the simulated backend returns when an operation touches a
// cluster that another operation is writing: Helm's "another operation
// (install/upgrade/rollback) is in progress".
var ErrConflict = errors.New("another operation (install/upgrade/rollback) is in progress")

// ErrInjected is the error of an injected failure.
var ErrInjected = errors.New("injected failure")

// Simulated is an in-memory mesh for benchmarks and tests. Every operation takes
// OpTime (a model input, e.g. 15 s of a real "cilium clustermesh connect" scaled
// down) and writes the per-cluster peer lists. It implements Backend and
// DeclarativeBackend, detects two concurrent writes to one cluster, and injects
// failures on request.
type Simulated struct {
	opTime time.Duration

	mu       sync.Mutex          // guards the fields below
	peers    map[string][]string // configured peers per cluster
	busy     map[string]bool     // clusters being written
	fail     map[string]int      // remaining injected failures, by op key
	calls    int
	conflict int
	inFlight int
	maxIn    int
}

// NewSimulated returns a simulated mesh whose clusters are connected as in initial
// (nil for none).
func NewSimulated(opTime time.Duration, initial *Graph) *Simulated {
	s := &Simulated{opTime: opTime, peers: map[string][]string{}, busy: map[string]bool{}, fail: map[string]int{}}
	if initial != nil {
		s.peers = initial.Peers()
	}
	return s
}

// FailNext makes the next n operations on key fail with ErrInjected. The key is
// Op.String() for a pairwise operation ("connect c1 c2") or "set-peers c1".
func (s *Simulated) FailNext(key string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[key] = n
}

// SimulatedStats counts what the backend saw.
type SimulatedStats struct {
	Calls       int // operations attempted
	Conflicts   int // operations refused because a cluster was busy
	MaxInFlight int // most operations running at once
}

// Stats returns the counters.
func (s *Simulated) Stats() SimulatedStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SimulatedStats{Calls: s.calls, Conflicts: s.conflict, MaxInFlight: s.maxIn}
}

// Connections returns the pairs in which each side lists the other.
func (s *Simulated) Connections(context.Context) (*Graph, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := NewGraph()
	for c, ps := range s.peers {
		for _, p := range ps {
			if slices.Contains(s.peers[p], c) {
				g.Add(c, p)
			}
		}
	}
	return g, nil
}

// Peers returns a copy of every cluster's configured peers.
func (s *Simulated) Peers(context.Context) (map[string][]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.peers))
	for c, ps := range s.peers {
		out[c] = slices.Clone(ps)
	}
	return out, nil
}

// Apply connects or disconnects a pair, writing both clusters.
func (s *Simulated) Apply(ctx context.Context, op Op) error {
	return s.write(ctx, op.String(), []string{op.A, op.B}, func() {
		if op.Disconnect {
			s.peers[op.A] = slices.DeleteFunc(s.peers[op.A], func(p string) bool { return p == op.B })
			s.peers[op.B] = slices.DeleteFunc(s.peers[op.B], func(p string) bool { return p == op.A })
			return
		}
		if !slices.Contains(s.peers[op.A], op.B) {
			s.peers[op.A] = append(s.peers[op.A], op.B)
		}
		if !slices.Contains(s.peers[op.B], op.A) {
			s.peers[op.B] = append(s.peers[op.B], op.A)
		}
	})
}

// SetPeers replaces one cluster's peer list.
func (s *Simulated) SetPeers(ctx context.Context, cluster string, peers []string) error {
	return s.write(ctx, "set-peers "+cluster, []string{cluster}, func() {
		s.peers[cluster] = slices.Clone(peers)
	})
}

// write models one operation: it takes the clusters (or fails with ErrConflict),
// waits OpTime, then applies the change.
func (s *Simulated) write(ctx context.Context, key string, clusters []string, apply func()) error {
	s.mu.Lock()
	s.calls++
	for _, c := range clusters {
		if s.busy[c] {
			s.conflict++
			s.mu.Unlock()
			return fmt.Errorf("%s: cluster %q: %w", key, c, ErrConflict)
		}
	}
	if s.fail[key] > 0 {
		s.fail[key]--
		s.mu.Unlock()
		return fmt.Errorf("%s: %w", key, ErrInjected)
	}
	for _, c := range clusters {
		s.busy[c] = true
	}
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	s.mu.Unlock()

	var err error
	if s.opTime > 0 {
		t := time.NewTimer(s.opTime)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			err = ctx.Err()
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	for _, c := range clusters {
		delete(s.busy, c)
	}
	if err != nil {
		return err
	}
	apply()
	return nil
}
