package hcloud

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// newClockedProvider is a provider and a fake sharing a manual clock.
func newClockedProvider(t *testing.T, o hcloudfake.Options) (*Provider, *hcloudfake.Fake, *hcloudfake.Clock) {
	t.Helper()
	clk := hcloudfake.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	o.Now = clk.Now
	f := newFake(t, o)
	p, err := New(Options{Token: testToken, Endpoint: f.URL(), Cluster: "c", Now: clk.Now,
		RetryBase: time.Millisecond, MaxRetries: -1, Rate: 1000, Burst: 1000, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return p, f, clk
}

// listIDs lists and returns the providerIDs, and the requests List made.
func listIDs(t *testing.T, p *Provider, f *hcloudfake.Fake) ([]string, int) {
	t.Helper()
	before := f.Calls("", "")
	l, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range l {
		ids = append(ids, in.ProviderID)
	}
	return ids, f.Calls("", "") - before
}

// Full scans run at the budget's pace: 10 s a page of 50 at 3,600 requests
// an hour, so 30 s for 120 servers. Between scans a List with nothing in
// flight asks nothing; a server Create made is asked about (one request)
// until it has booted; a server deleted in the console stays listed until
// the next scan, which drops it.
func TestListScansAtTheBudgetsPace(t *testing.T) {
	t.Parallel()
	p, f, clk := newClockedProvider(t, hcloudfake.Options{Initializing: 15 * time.Second})
	ctx := context.Background()
	console := hcloud.NewClient(hcloud.WithEndpoint(f.URL()), hcloud.WithToken(testToken))
	for i := range 120 {
		_, _, err := console.Server.Create(ctx, hcloud.ServerCreateOpts{Name: fmt.Sprint("m-", i), ServerType: &hcloud.ServerType{Name: "cx22"},
			Image: &hcloud.Image{Name: "ubuntu-24.04"}, Labels: map[string]string{providers.LabelCluster: "c", providers.LabelGroup: "g", providers.LabelMachine: fmt.Sprint("m-", i)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(15 * time.Second) // all booted
	ids, n := listIDs(t, p, f)
	if len(ids) != 120 || n != 3 {
		t.Fatalf("first List: %d servers in %d requests, want 120 in 3 pages", len(ids), n)
	}
	if got := p.scanInterval(3); got != 30*time.Second {
		t.Fatalf("scan interval of 3 pages = %v, want 30s", got)
	}

	clk.Advance(10 * time.Second)
	if ids2, n := listIDs(t, p, f); n != 0 || !slices.Equal(ids, ids2) {
		t.Fatalf("List with nothing in flight made %d requests (want 0) and listed %d", n, len(ids2))
	}

	// A server deleted behind our back.
	victim := ids[0]
	var vid int64
	if _, err := fmt.Sscanf(victim, "hcloud://%d", &vid); err != nil {
		t.Fatal(err)
	}
	if _, err := console.Server.Delete(ctx, &hcloud.Server{ID: vid}); err != nil {
		t.Fatal(err)
	}
	// One of ours, booting for 15 s.
	in, err := p.Create(ctx, request("new", "g"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		ids, n := listIDs(t, p, f)
		got = append(got, fmt.Sprintf("%d requests, new %v, victim %v", n, slices.Contains(ids, in.ProviderID), slices.Contains(ids, victim)))
		clk.Advance(10 * time.Second)
	}
	want := []string{
		"1 requests, new true, victim true",  // the new one is booting: asked about
		"1 requests, new true, victim true",  // +10 s: still booting
		"3 requests, new true, victim false", // +20 s, 30 s after the last scan: a full scan drops the victim
		"0 requests, new true, victim false", // +30 s: booted, nothing in flight
	}
	if !slices.Equal(want, got) {
		t.Fatalf("Lists after a console delete and a create:\n got %q\nwant %q", got, want)
	}
}

// The scan pace follows the budget the API reports (RateLimit-Limit): a
// project with twice Hetzner's default scans twice as often.
func TestScanIntervalFollowsTheBudget(t *testing.T) {
	t.Parallel()
	p, f, _ := newClockedProvider(t, hcloudfake.Options{RateLimit: 7200})
	if got := p.scanInterval(20); got != 200*time.Second {
		t.Fatalf("before any answer: %v, want 200s (20 pages at 3,600/h)", got)
	}
	if _, _ = listIDs(t, p, f); p.scanInterval(20) != 100*time.Second {
		t.Fatalf("at 7,200/h: %v, want 100s", p.scanInterval(20))
	}
	p.scanShare = -1
	if got := p.scanInterval(20); got != 0 {
		t.Fatalf("negative share: %v, want 0 (a scan on every List)", got)
	}
}

// blockingTransport holds the answer of the first full scan until release
// is closed, so a test can run a Create or Delete between the scan's answer
// and the inventory's update.
type blockingTransport struct {
	next     http.RoundTripper
	answered chan struct{}
	release  chan struct{}
}

func newBlockingTransport() *blockingTransport {
	return &blockingTransport{next: http.DefaultTransport, answered: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(r)
	if r.Method == http.MethodGet && r.URL.Path == "/servers" && r.URL.Query().Get("label_selector") == providers.LabelCluster+"=c" {
		select {
		case <-b.answered:
		default:
			close(b.answered)
			<-b.release
		}
	}
	return resp, err
}

// A scan's answer can predate a Create or Delete that finishes while it is
// on its way: the inventory keeps their records over it. A server created
// meanwhile is listed, not lost; one deleted meanwhile is listed deleting,
// not running.
func TestRecordsDuringAScanWin(t *testing.T) {
	t.Parallel()
	f := newFake(t, hcloudfake.Options{})
	ctx := context.Background()
	newProvider := func(bt *blockingTransport) *Provider {
		p, err := New(Options{Token: testToken, Endpoint: f.URL(), Cluster: "c", MaxRetries: -1, PollInterval: time.Millisecond,
			HTTPClient: &http.Client{Transport: bt}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	listAround := func(p *Provider, bt *blockingTransport, during func()) []providers.Instance {
		listed := make(chan []providers.Instance, 1)
		go func() {
			l, err := p.List(ctx)
			if err != nil {
				t.Error(err)
			}
			listed <- l
		}()
		<-bt.answered // the scan has its answer
		during()
		close(bt.release)
		return <-listed
	}
	bt := newBlockingTransport()
	p := newProvider(bt)
	var in providers.Instance
	l := listAround(p, bt, func() {
		var err error
		if in, err = p.Create(ctx, request("during", "g")); err != nil {
			t.Error(err)
		}
	})
	if len(l) != 1 || l[0].ProviderID != in.ProviderID {
		t.Fatalf("List around a Create = %+v, want the created server %s", l, in.ProviderID)
	}

	f.SetActionDelay(time.Hour) // the delete runs for the rest of the test
	bt = newBlockingTransport()
	q := newProvider(bt) // a fresh inventory: its first List scans
	l = listAround(q, bt, func() {
		if err := q.Delete(ctx, in.ProviderID); err != nil {
			t.Error(err)
		}
	})
	if len(l) != 1 || l[0].State != providers.StateDeleting {
		t.Fatalf("List around a Delete = %+v, want the server deleting", l)
	}
}
