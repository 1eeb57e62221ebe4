package hcloud

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers"
)

// DefaultScanShare is Options.ScanShare's default: full scans may use a
// tenth of the hourly request budget, whatever the fleet's size.
const DefaultScanShare = 0.1

// inventory is the provider's picture of the cluster's servers, which List
// answers from. A full scan (every server carrying the cluster label, 50 a
// page) runs at most once per scanInterval, which the budget sets. Between
// scans only the servers in flight are asked about: the ones Create and
// Delete touched, and the ones a scan saw booting or going, until they
// settle. That is one request per 50 of them, and none when nothing is in
// flight. What no one in prebake touched (a server deleted in the console)
// is seen by the next scan.
type inventory struct {
	// listMu makes Lists run one at a time.
	listMu sync.Mutex

	// mu guards everything below.
	mu sync.Mutex
	// known is the last view of every server of the cluster, by id;
	// scanned is false until the first scan.
	known   map[int64]*hcloud.Server
	scanned bool
	// watch is the servers in flight, by id.
	watch map[int64]watched
	// scannedAt is when the last full scan started; pages is how many
	// pages it took.
	scannedAt time.Time
	pages     int
	// seq numbers the records of Create and Delete, so a List knows which
	// records are newer than what it asked the API.
	seq uint64
}

type watched struct {
	// machine is the server's providers.LabelMachine: refreshes select by
	// it. "" for a server without one, which is got by id instead.
	machine string
	// deleting is set once our delete was accepted: it is watched until
	// it is gone.
	deleting bool
	seq      uint64
}

func newInventory() *inventory {
	return &inventory{known: map[int64]*hcloud.Server{}, watch: map[int64]watched{}}
}

// List implements providers.Provider from the inventory: a full scan when
// the last one is older than the scan interval (or there was none), else a
// refresh of the servers in flight.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	inv := p.inv
	inv.listMu.Lock()
	defer inv.listMu.Unlock()
	now := p.now()
	inv.mu.Lock()
	full := !inv.scanned || now.Sub(inv.scannedAt) >= p.scanInterval(inv.pages)
	seq := inv.seq
	watch := maps.Clone(inv.watch)
	inv.mu.Unlock()
	var err error
	if full {
		err = p.scan(ctx, now, seq)
	} else if len(watch) > 0 {
		err = p.refresh(ctx, watch, seq)
	}
	if err != nil {
		return nil, err
	}
	inv.mu.Lock()
	servers := make([]*hcloud.Server, 0, len(inv.known))
	for _, id := range slices.Sorted(maps.Keys(inv.known)) {
		servers = append(servers, inv.known[id])
	}
	inv.mu.Unlock()
	p.probeStandbys(ctx, servers)
	return p.withoutFailed(ctx, servers), nil
}

// scanInterval is the least time between full scans: pages of 50 servers
// at a share of the hourly budget (RateLimit-Limit, 3,600 by default), so
// 10 s a page by default (200 s at 1,000 servers). 0 with a negative share.
func (p *Provider) scanInterval(pages int) time.Duration {
	if p.scanShare < 0 {
		return 0
	}
	budget := p.budget
	if budget <= 0 {
		budget = p.pacer.budget()
	}
	perPage := time.Duration(float64(time.Hour) / (p.scanShare * float64(budget)))
	return time.Duration(max(pages, 1)) * perPage
}

// inFlight reports whether a server in this status is booting or going:
// the states CA waits on.
func inFlight(s *hcloud.Server) bool { return state(s.Status) != providers.StateRunning }

// scan lists every server of the cluster and makes that the inventory.
// Records newer than seq (the inventory's when the scan started) win over
// what the scan saw: they may be newer than its answer.
func (p *Provider) scan(ctx context.Context, started time.Time, seq uint64) error {
	servers, err := p.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{
		ListOpts: hcloud.ListOpts{LabelSelector: providers.LabelCluster + "=" + p.cluster, PerPage: perPage},
	})
	if err != nil {
		return fmt.Errorf("hcloud: list servers of cluster %q: %w", p.cluster, err)
	}
	inv := p.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	known := make(map[int64]*hcloud.Server, len(servers))
	for _, s := range servers {
		known[s.ID] = s
	}
	for id, w := range inv.watch {
		s, listed := known[id]
		switch {
		case w.seq > seq:
			if old, ok := inv.known[id]; ok {
				known[id] = old
			} else {
				delete(known, id) // recorded gone since
			}
		case !listed:
			delete(inv.watch, id) // gone
		case !inFlight(s) && !w.deleting:
			delete(inv.watch, id) // settled
		}
	}
	for id, s := range known {
		if _, ok := inv.watch[id]; !ok && inFlight(s) {
			inv.watch[id] = watched{machine: s.Labels[providers.LabelMachine], seq: seq}
		}
	}
	inv.known, inv.scanned, inv.scannedAt, inv.pages = known, true, started, (len(servers)+perPage-1)/perPage
	return nil
}

// refresh asks about the servers in flight only: by their machine label,
// 50 to a request, and by id for any without one. A server the answer
// lacks is gone; one that has settled is no longer watched.
func (p *Provider) refresh(ctx context.Context, watch map[int64]watched, seq uint64) error {
	var names []string
	var byID []int64
	for _, id := range slices.Sorted(maps.Keys(watch)) {
		if m := watch[id].machine; m != "" {
			names = append(names, m)
		} else {
			byID = append(byID, id)
		}
	}
	got := map[int64]*hcloud.Server{}
	for chunk := range slices.Chunk(names, perPage) {
		sel := fmt.Sprintf("%s=%s,%s in (%s)", providers.LabelCluster, p.cluster, providers.LabelMachine, strings.Join(chunk, ","))
		servers, err := p.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: sel, PerPage: perPage}})
		if err != nil {
			return fmt.Errorf("hcloud: list the %d servers in flight of cluster %q: %w", len(chunk), p.cluster, err)
		}
		for _, s := range servers {
			got[s.ID] = s
		}
	}
	for _, id := range byID {
		s, resp, err := p.client.Server.GetByID(ctx, id)
		if err != nil {
			return fmt.Errorf("hcloud: get server %d in flight: %w", id, wrapStatus(err, resp))
		}
		if s != nil && s.Labels[providers.LabelCluster] == p.cluster {
			got[id] = s
		}
	}
	inv := p.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for id := range watch {
		w, still := inv.watch[id]
		if !still || w.seq > seq {
			continue // recorded since: newer than this answer
		}
		s, ok := got[id]
		switch {
		case !ok:
			delete(inv.known, id)
			delete(inv.watch, id) // gone
		case !inFlight(s) && !w.deleting:
			inv.known[id] = s
			delete(inv.watch, id) // settled
		default:
			inv.known[id] = s
		}
	}
	return nil
}

// recordCreated puts a server Create made (or found) into the inventory,
// watched until it has booted.
func (p *Provider) recordCreated(s *hcloud.Server, machine string) {
	inv := p.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.seq++
	inv.known[s.ID] = s
	inv.watch[s.ID] = watched{machine: machine, seq: inv.seq}
}

// recordChanged puts what a Park or Resume got back of server s into the
// inventory: its labels or its power changed, which a refresh of the
// servers in flight only would not see. It is watched, so the next List
// asks about it once more (and on while it is in flight), and a scan
// answered before the change can't undo it.
func (p *Provider) recordChanged(s *hcloud.Server) {
	inv := p.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.seq++
	inv.known[s.ID] = s
	w := inv.watch[s.ID]
	inv.watch[s.ID] = watched{machine: s.Labels[providers.LabelMachine], deleting: w.deleting, seq: inv.seq}
}

// recordDeleted marks a server whose delete was accepted (or that is
// already deleting) as deleting, watched until it is gone; gone true
// drops it at once, and the next List makes sure.
func (p *Provider) recordDeleted(s *hcloud.Server, gone bool) {
	inv := p.inv
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.seq++
	w := watched{machine: s.Labels[providers.LabelMachine], deleting: true, seq: inv.seq}
	inv.watch[s.ID] = w
	if gone {
		delete(inv.known, s.ID)
		return
	}
	v := *s
	v.Status = hcloud.ServerStatusDeleting
	inv.known[s.ID] = &v
}
