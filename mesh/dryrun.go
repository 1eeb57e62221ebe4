package mesh

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// DryRun wraps a DeclarativeBackend: it observes through it but, instead of writing,
// prints each write it would make. Writes take effect in its own view, so a plan run
// through it reports what a real run would do.
type DryRun struct {
	Backend DeclarativeBackend
	Out     io.Writer

	mu    sync.Mutex          // guards peers and Out
	peers map[string][]string // the view after the printed writes; nil until first read
}

func (d *DryRun) load(ctx context.Context) error {
	if d.peers != nil {
		return nil
	}
	p, err := d.Backend.Peers(ctx)
	if err != nil {
		return err
	}
	d.peers = p
	return nil
}

// Peers returns the observed peers with the printed writes applied.
func (d *DryRun) Peers(ctx context.Context) (map[string][]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.load(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(d.peers))
	for c, ps := range d.peers {
		out[c] = append([]string(nil), ps...)
	}
	return out, nil
}

// Connections returns the mutual pairs of Peers.
func (d *DryRun) Connections(ctx context.Context) (*Graph, error) {
	p, err := d.Peers(ctx)
	if err != nil {
		return nil, err
	}
	return mutual(p), nil
}

// SetPeers prints the write.
func (d *DryRun) SetPeers(ctx context.Context, cluster string, peers []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.load(ctx); err != nil {
		return err
	}
	d.peers[cluster] = append([]string(nil), peers...)
	_, err := fmt.Fprintf(d.Out, "dry-run: would set %s peers to [%s]\n", cluster, strings.Join(peers, " "))
	return err
}

// Preflight runs the wrapped backend's checks, if it has any: a dry run shows a refusal.
func (d *DryRun) Preflight(ctx context.Context, writes map[string][]string) error {
	if p, ok := d.Backend.(Preflighter); ok {
		return p.Preflight(ctx, writes)
	}
	return nil
}
