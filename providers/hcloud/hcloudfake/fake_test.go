package hcloudfake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"
)

func newFake(t *testing.T, opts Options) (*Fake, *hcloud.Client, *Clock) {
	t.Helper()
	c := NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if opts.Now == nil {
		opts.Now = c.Now
	}
	opts.Token = "test-token"
	f := New(opts)
	t.Cleanup(f.Close)
	client := hcloud.NewClient(
		hcloud.WithEndpoint(f.URL()),
		hcloud.WithToken("test-token"),
		hcloud.WithRetryOpts(hcloud.RetryOpts{BackoffFunc: hcloud.ConstantBackoff(0), MaxRetries: 0}),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(time.Millisecond)}),
	)
	return f, client, c
}

func createOpts(name string, labels map[string]string) hcloud.ServerCreateOpts {
	return hcloud.ServerCreateOpts{
		Name:       name,
		ServerType: &hcloud.ServerType{Name: "cx22"},
		Image:      &hcloud.Image{Name: "ubuntu-24.04"},
		Location:   &hcloud.Location{Name: "fsn1"},
		Labels:     labels,
		UserData:   "#cloud-config\n",
	}
}

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	f, client, clk := newFake(t, Options{Initializing: 10 * time.Second, Starting: 20 * time.Second, ActionDelay: 5 * time.Second})
	ctx := context.Background()
	opts := createOpts("node-a", map[string]string{"prebake.dev/cluster": "c"})
	opts.Networks = []*hcloud.Network{{ID: 7}}
	opts.Firewalls = []*hcloud.ServerCreateFirewall{{Firewall: hcloud.Firewall{ID: 8}}}
	opts.SSHKeys = []*hcloud.SSHKey{{ID: 9}}
	opts.PlacementGroup = &hcloud.PlacementGroup{ID: 11}
	res, _, err := client.Server.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Server.Status != hcloud.ServerStatusInitializing || res.Action.Status != hcloud.ActionStatusRunning || len(res.NextActions) != 1 {
		t.Fatalf("create: status %q, action %q, %d next actions", res.Server.Status, res.Action.Status, len(res.NextActions))
	}
	want := []Server{{
		ID: res.Server.ID, Name: "node-a", Status: "initializing", ServerType: "cx22", Image: "ubuntu-24.04", Location: "fsn1",
		Labels: map[string]string{"prebake.dev/cluster": "c"}, UserData: "#cloud-config\n", IPv4: res.Server.PublicNet.IPv4.IP.String(),
		PrivateIPs: []string{res.Server.PrivateNet[0].IP.String()}, Networks: []int64{7}, Firewalls: []int64{8}, SSHKeys: []int64{9}, PlacementGroup: 11,
	}}
	if diff := cmp.Diff(want, f.Servers()); diff != "" {
		t.Fatalf("servers (-want +got):\n%s", diff)
	}
	for _, step := range []struct {
		advance time.Duration
		status  hcloud.ServerStatus
	}{{9 * time.Second, "initializing"}, {time.Second, "starting"}, {19 * time.Second, "starting"}, {time.Second, "running"}} {
		clk.Advance(step.advance)
		s, _, err := client.Server.GetByID(ctx, res.Server.ID)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != step.status {
			t.Fatalf("after +%v: status %q, want %q", step.advance, s.Status, step.status)
		}
	}
	a, _, err := client.Action.GetByID(ctx, res.Action.ID)
	if err != nil || a.Status != hcloud.ActionStatusSuccess {
		t.Fatalf("create action: %+v, %v", a, err)
	}

	del, _, err := client.Server.DeleteWithResult(ctx, res.Server)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := client.Server.GetByID(ctx, res.Server.ID)
	if err != nil || s == nil || s.Status != hcloud.ServerStatusDeleting {
		t.Fatalf("while deleting: %+v, %v", s, err)
	}
	clk.Advance(5 * time.Second)
	if err := client.Action.WaitFor(ctx, del.Action); err != nil {
		t.Fatal(err)
	}
	s, _, err = client.Server.GetByID(ctx, res.Server.ID)
	if err != nil || s != nil {
		t.Fatalf("after delete: %+v, %v; want nil, nil", s, err)
	}
	if _, err := client.Server.Delete(ctx, res.Server); !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		t.Fatalf("second delete: %v, want not_found", err)
	}
}

func TestWaitForSlowAction(t *testing.T) {
	t.Parallel()
	// The fake's clock decides when a slow action ends: WaitFor must keep
	// polling while it runs and return once the clock passes its delay.
	f, client, clk := newFake(t, Options{})
	f.SetActionDelay(time.Minute)
	res, _, err := client.Server.Create(context.Background(), createOpts("slow", nil))
	if err != nil {
		t.Fatal(err)
	}
	actions := append([]*hcloud.Action{res.Action}, res.NextActions...)
	done := make(chan error, 1)
	go func() { done <- client.Action.WaitFor(context.Background(), actions...) }()
	a, _, err := client.Action.GetByID(context.Background(), res.Action.ID)
	if err != nil || a.Status != hcloud.ActionStatusRunning {
		t.Fatalf("before the delay: action %+v, %v; want running", a, err)
	}
	select {
	case err := <-done:
		t.Fatalf("WaitFor returned (%v) while the action was still running", err)
	default:
	}
	clk.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestListPagesAndSelects(t *testing.T) {
	t.Parallel()
	f, client, _ := newFake(t, Options{})
	ctx := context.Background()
	for i := range 120 {
		labels := map[string]string{"prebake.dev/cluster": "c", "prebake.dev/group": fmt.Sprint("g", i%3)}
		if i%4 == 0 {
			labels["prebake.dev/cluster"] = "other"
		}
		if _, _, err := client.Server.Create(ctx, createOpts(fmt.Sprint("s-", i), labels)); err != nil {
			t.Fatal(err)
		}
	}
	all, err := client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "prebake.dev/cluster=c"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 90 {
		t.Fatalf("listed %d servers of cluster c, want 90", len(all))
	}
	if n := f.Calls("GET", "/servers"); n != 2 {
		t.Fatalf("%d list requests for 90 servers at 50 per page, want 2", n)
	}
	page, resp, err := client.Server.List(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{Page: 2, PerPage: 50}})
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Meta.Pagination
	if len(page) != 50 || p == nil || p.Page != 2 || p.NextPage != 3 || p.PreviousPage != 1 || p.LastPage != 3 || p.TotalEntries != 120 {
		t.Fatalf("page 2: %d items, pagination %+v", len(page), p)
	}
	if _, _, err := client.Server.List(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{PerPage: 51}}); !hcloud.IsError(err, hcloud.ErrorCodeInvalidInput) {
		t.Fatalf("per_page 51: %v, want invalid_input", err)
	}
	for sel, want := range map[string]int{
		"prebake.dev/cluster=c,prebake.dev/group=g1": 30,
		"prebake.dev/cluster!=c":                     30,
		"prebake.dev/group":                          120,
		"!prebake.dev/group":                         0,
		// Set-based requirements, commas inside the parentheses included.
		"prebake.dev/cluster=c,prebake.dev/group in (g0,g2)":   60,
		"prebake.dev/group notin (g0, g2),prebake.dev/cluster": 40,
		"prebake.dev/cluster=c,prebake.dev/group in (g9)":      0,
	} {
		got, err := client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: sel}})
		if err != nil || len(got) != want {
			t.Errorf("selector %q: %d servers, %v; want %d", sel, len(got), err, want)
		}
	}
	for _, bad := range []string{"prebake.dev/group in (g0", "prebake.dev/group in g0)", "prebake.dev/group among (g0)", "(g0)"} {
		if _, err := client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: bad}}); !hcloud.IsError(err, hcloud.ErrorCodeInvalidInput) {
			t.Errorf("selector %q: %v, want invalid_input", bad, err)
		}
	}
	byName, _, err := client.Server.GetByName(ctx, "s-7")
	if err != nil || byName == nil || byName.Name != "s-7" {
		t.Fatalf("GetByName: %+v, %v", byName, err)
	}
	if _, _, err := client.Server.Create(ctx, createOpts("s-7", nil)); !hcloud.IsError(err, hcloud.ErrorCodeUniquenessError) {
		t.Fatalf("duplicate name: %v, want uniqueness_error", err)
	}
}

func TestCatalogue(t *testing.T) {
	t.Parallel()
	_, client, _ := newFake(t, Options{})
	ctx := context.Background()
	st, _, err := client.ServerType.GetByName(ctx, "cax11")
	if err != nil || st == nil {
		t.Fatalf("server type: %+v, %v", st, err)
	}
	if st.Cores != 2 || st.Memory != 4 || st.Disk != 40 || st.Architecture != hcloud.ArchitectureARM || len(st.Pricings) == 0 || st.Pricings[0].Hourly.Net == "" {
		t.Fatalf("cax11 = %+v", st)
	}
	if st, _, err := client.ServerType.GetByName(ctx, "nope"); err != nil || st != nil {
		t.Fatalf("unknown server type: %+v, %v; want nil, nil", st, err)
	}
	locs, err := client.Location.All(ctx)
	if err != nil || len(locs) != 4 {
		t.Fatalf("locations: %d, %v", len(locs), err)
	}
	dc, _, err := client.Datacenter.GetByName(ctx, "fsn1-dc1")
	if err != nil || dc == nil || dc.Location.Name != "fsn1" {
		t.Fatalf("datacenter: %+v, %v", dc, err)
	}
	if _, _, err := client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "x", ServerType: &hcloud.ServerType{Name: "cax11"},
		Image: &hcloud.Image{Name: "ubuntu-24.04"}, Location: &hcloud.Location{Name: "ash"}}); !hcloud.IsError(err, hcloud.ErrorCodeInvalidInput) {
		t.Fatalf("type not sold in location: %v, want invalid_input", err)
	}
}

func TestImages(t *testing.T) {
	t.Parallel()
	_, client, clk := newFake(t, Options{ActionDelay: time.Minute})
	ctx := context.Background()
	arm, err := client.Image.AllWithOpts(ctx, hcloud.ImageListOpts{Type: []hcloud.ImageType{hcloud.ImageTypeSystem}, Architecture: []hcloud.Architecture{hcloud.ArchitectureARM}})
	if err != nil || len(arm) != 2 {
		t.Fatalf("arm system images: %d, %v", len(arm), err)
	}
	res, _, err := client.Server.Create(ctx, createOpts("builder", nil))
	if err != nil {
		t.Fatal(err)
	}
	desc := "prebaked"
	snap, _, err := client.Server.CreateImage(ctx, res.Server, &hcloud.ServerCreateImageOpts{Type: hcloud.ImageTypeSnapshot, Description: &desc, Labels: map[string]string{"prebake.dev/channel": "stable"}})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Image.Status != hcloud.ImageStatusCreating {
		t.Fatalf("new snapshot status %q", snap.Image.Status)
	}
	opts := createOpts("from-snap", nil)
	opts.Image = &hcloud.Image{ID: snap.Image.ID}
	if _, _, err := client.Server.Create(ctx, opts); !hcloud.IsError(err, hcloud.ErrorCodeInvalidInput) {
		t.Fatalf("boot from a snapshot still creating: %v, want invalid_input", err)
	}
	clk.Advance(time.Minute)
	found, err := client.Image.AllWithOpts(ctx, hcloud.ImageListOpts{ListOpts: hcloud.ListOpts{LabelSelector: "prebake.dev/channel=stable"},
		Type: []hcloud.ImageType{hcloud.ImageTypeSnapshot}, Architecture: []hcloud.Architecture{hcloud.ArchitectureX86}})
	if err != nil || len(found) != 1 || found[0].Status != hcloud.ImageStatusAvailable || found[0].Description != "prebaked" {
		t.Fatalf("snapshots by label: %+v, %v", found, err)
	}
	if _, _, err := client.Server.Create(ctx, opts); err != nil {
		t.Fatalf("boot from snapshot: %v", err)
	}
	newDesc := "retired"
	up, _, err := client.Image.Update(ctx, found[0], hcloud.ImageUpdateOpts{Description: &newDesc, Labels: map[string]string{"prebake.dev/channel": "old"}})
	if err != nil || up.Description != "retired" || up.Labels["prebake.dev/channel"] != "old" {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if _, _, err := client.Image.ChangeProtection(ctx, up, hcloud.ImageChangeProtectionOpts{Delete: hcloud.Ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Image.Delete(ctx, up); !hcloud.IsError(err, hcloud.ErrorCodeProtected) {
		t.Fatalf("delete protected: %v, want protected", err)
	}
	if _, _, err := client.Image.ChangeProtection(ctx, up, hcloud.ImageChangeProtectionOpts{Delete: hcloud.Ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Image.Delete(ctx, up); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if im, _, err := client.Image.GetByID(ctx, up.ID); err != nil || im != nil {
		t.Fatalf("deleted image: %+v, %v", im, err)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  APIError
		code hcloud.ErrorCode
	}{
		{ErrResourceUnavailable, hcloud.ErrorCodeResourceUnavailable},
		{ErrResourceLimitExceeded, hcloud.ErrorCodeResourceLimitExceeded},
		{ErrPlacement, hcloud.ErrorCodePlacementError},
		{ErrServerError, hcloud.ErrorCodeServerError},
		{ErrUnavailable, "unavailable"},
		{ErrRateLimited, hcloud.ErrorCodeRateLimitExceeded},
	} {
		t.Run(tc.err.Code, func(t *testing.T) {
			t.Parallel()
			f, client, _ := newFake(t, Options{})
			f.Fail(http.MethodPost, "/servers", 1, tc.err)
			_, resp, err := client.Server.Create(context.Background(), createOpts("x", nil))
			if !hcloud.IsError(err, tc.code) {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			if resp.StatusCode != tc.err.Status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.err.Status)
			}
			if tc.err.Status == http.StatusTooManyRequests && (resp.Meta.Ratelimit.Remaining != 0 || resp.Meta.Ratelimit.Limit != 3600 || resp.Meta.Ratelimit.Reset.IsZero()) {
				t.Fatalf("429 rate limit meta %+v", resp.Meta.Ratelimit)
			}
			if len(f.Servers()) != 0 {
				t.Fatal("a failed create left a server")
			}
			if _, _, err := client.Server.Create(context.Background(), createOpts("x", nil)); err != nil {
				t.Fatalf("the fault outlived its count: %v", err)
			}
		})
	}
}

func TestRateLimitBucket(t *testing.T) {
	t.Parallel()
	_, client, clk := newFake(t, Options{RateLimit: 3})
	ctx := context.Background()
	var resp *hcloud.Response
	var err error
	for range 3 {
		if _, resp, err = client.Location.List(ctx, hcloud.LocationListOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	if resp.Meta.Ratelimit.Remaining != 0 || resp.Meta.Ratelimit.Limit != 3 {
		t.Fatalf("after 3 of 3: %+v", resp.Meta.Ratelimit)
	}
	if _, _, err := client.Location.List(ctx, hcloud.LocationListOpts{}); !hcloud.IsError(err, hcloud.ErrorCodeRateLimitExceeded) {
		t.Fatalf("4th request: %v, want rate_limit_exceeded", err)
	}
	clk.Advance(20 * time.Minute) // one token per 20 minutes
	if _, _, err := client.Location.List(ctx, hcloud.LocationListOpts{}); err != nil {
		t.Fatalf("after refill: %v", err)
	}
}

func TestPlacementGroupFull(t *testing.T) {
	t.Parallel()
	_, client, _ := newFake(t, Options{PlacementGroupSize: 2})
	ctx := context.Background()
	var err error
	for i := range 3 {
		opts := createOpts(fmt.Sprint("pg-", i), nil)
		opts.PlacementGroup = &hcloud.PlacementGroup{ID: 5}
		_, _, err = client.Server.Create(ctx, opts)
	}
	if !hcloud.IsError(err, hcloud.ErrorCodePlacementError) {
		t.Fatalf("third server in a group of 2: %v, want placement_error", err)
	}
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	f, _, _ := newFake(t, Options{})
	client := hcloud.NewClient(hcloud.WithEndpoint(f.URL()), hcloud.WithToken("wrong"))
	_, _, err := client.Server.List(context.Background(), hcloud.ServerListOpts{})
	if !hcloud.IsError(err, hcloud.ErrorCodeUnauthorized) {
		t.Fatalf("err = %v, want unauthorized", err)
	}
	var apiErr hcloud.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("%T is not hcloud.Error", err)
	}
}

// Shutdown and poweroff run as actions; the server is off when they end, as
// an image build needs before create_image.
func TestShutdownAndPoweroff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, client, clk := newFake(t, Options{ActionDelay: 5 * time.Second})
	for _, stop := range []struct {
		name    string
		command string
		call    func(*hcloud.Server) (*hcloud.Action, *hcloud.Response, error)
	}{
		{"shutdown", "shutdown_server", func(s *hcloud.Server) (*hcloud.Action, *hcloud.Response, error) {
			return client.Server.Shutdown(ctx, s)
		}},
		{"poweroff", "stop_server", func(s *hcloud.Server) (*hcloud.Action, *hcloud.Response, error) {
			return client.Server.Poweroff(ctx, s)
		}},
	} {
		res, _, err := client.Server.Create(ctx, createOpts("s-"+stop.name, nil))
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
		a, _, err := stop.call(res.Server)
		if err != nil {
			t.Fatalf("%s: %v", stop.name, err)
		}
		if a.Command != stop.command || a.Status != hcloud.ActionStatusRunning {
			t.Errorf("%s action = %s %s, want %s running", stop.name, a.Command, a.Status, stop.command)
		}
		s, _, _ := client.Server.GetByID(ctx, res.Server.ID)
		if s.Status != hcloud.ServerStatusRunning {
			t.Errorf("%s: status %s while the action runs, want running", stop.name, s.Status)
		}
		clk.Advance(5 * time.Second)
		s, _, _ = client.Server.GetByID(ctx, res.Server.ID)
		if s.Status != hcloud.ServerStatusOff {
			t.Errorf("%s: status %s after the action, want off", stop.name, s.Status)
		}
	}
	if _, _, err := client.Server.Shutdown(ctx, &hcloud.Server{ID: 999999}); !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		t.Errorf("shutdown of a missing server: %v, want not_found", err)
	}
}

// Labels that break the API's rules are refused, as the real API does,
// wherever they are sent: creating a server, updating a server or an image.
// The answer is the API's: 400 invalid_input "invalid input in field
// 'labels'" with a details.fields entry for labels. A refused create makes
// no server.
func TestLabelRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, client, _ := newFake(t, Options{})
	good := map[string]string{"prebake.dev/pkg-kubelet": "1_d34_d2-1_d1", "empty": "", "k": strings.Repeat("v", 63),
		"prebake.dev/" + strings.Repeat("k", 63): "x"}
	res, _, err := client.Server.Create(ctx, createOpts("s", good))
	if err != nil {
		t.Fatalf("create with valid labels: %v", err)
	}
	img, _, err := client.Server.CreateImage(ctx, res.Server, &hcloud.ServerCreateImageOpts{Type: hcloud.ImageTypeSnapshot, Labels: good})
	if err != nil {
		t.Fatal(err)
	}
	isLabelError := func(err error, resp *hcloud.Response) bool {
		var e hcloud.Error
		if !errors.As(err, &e) || e.Code != hcloud.ErrorCodeInvalidInput || e.Message != "invalid input in field 'labels'" ||
			resp == nil || resp.StatusCode != http.StatusBadRequest {
			return false
		}
		d, ok := e.Details.(hcloud.ErrorDetailsInvalidInput)
		return ok && len(d.Fields) == 1 && d.Fields[0].Name == "labels" && len(d.Fields[0].Messages) == 1
	}
	for i, bad := range []map[string]string{
		{"prebake.dev/pkg-kubelet": "1.34.2-1.1~"},
		{"prebake.dev/pkg-kubelet": "1:1.0"},
		{"-bad": "x"},
		{"Bad_Prefix/x": "y"},
		{"prebake.dev/" + strings.Repeat("k", 64): "x"},
		{"k": strings.Repeat("v", 64)},
		{"hetzner.cloud/x": "y"},
		{"": "x"},
	} {
		if _, resp, err := client.Server.Create(ctx, createOpts(fmt.Sprint("bad-", i), bad)); !isLabelError(err, resp) {
			t.Errorf("create with labels %v: %v, want 400 invalid_input on labels", bad, err)
		}
		if _, resp, err := client.Image.Update(ctx, img.Image, hcloud.ImageUpdateOpts{Labels: bad}); !isLabelError(err, resp) {
			t.Errorf("image labels %v: %v, want 400 invalid_input on labels", bad, err)
		}
		if _, resp, err := client.Server.Update(ctx, res.Server, hcloud.ServerUpdateOpts{Labels: bad}); !isLabelError(err, resp) {
			t.Errorf("server labels %v: %v, want 400 invalid_input on labels", bad, err)
		}
	}
	if n := len(f.Servers()); n != 1 {
		t.Fatalf("%d servers, want only the one with valid labels", n)
	}
}

// A sold-out server type is answered one way, the real API's: 412
// resource_unavailable "error during placement", the same as the injected
// ErrResourceUnavailable. A type never sold in a location is an input
// error instead, and the lists show the stock.
func TestSoldOutIsResourceUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, client, _ := newFake(t, Options{})
	f.SoldOut("cx22", "fsn1", true)
	create := func(name, typ, loc string) (*hcloud.Response, error) {
		o := createOpts(name, nil)
		o.ServerType, o.Location = &hcloud.ServerType{Name: typ}, &hcloud.Location{Name: loc}
		_, resp, err := client.Server.Create(ctx, o)
		return resp, err
	}
	answer := func(resp *hcloud.Response, err error) string {
		var e hcloud.Error
		if !errors.As(err, &e) || resp == nil {
			return fmt.Sprint(err)
		}
		return fmt.Sprintf("%d %s %s", resp.StatusCode, e.Code, e.Message)
	}
	soldOut := answer(create("a", "cx22", "fsn1"))
	f.Fail(http.MethodPost, "/servers", 1, ErrResourceUnavailable)
	injected := answer(create("b", "cx22", "nbg1"))
	want := "412 resource_unavailable error during placement"
	if soldOut != want || injected != want {
		t.Fatalf("sold out: %q; injected: %q; want both %q", soldOut, injected, want)
	}
	if got := answer(create("c", "cax11", "ash")); !strings.HasPrefix(got, "400 invalid_input") {
		t.Errorf("a type never sold in the location: %q, want 400 invalid_input", got)
	}
	st, _, err := client.ServerType.GetByName(ctx, "cx22")
	if err != nil {
		t.Fatal(err)
	}
	avail := map[string]bool{}
	for _, l := range st.Locations {
		avail[l.Location.Name] = l.Available
	}
	dc, _, err := client.Datacenter.GetByName(ctx, "fsn1-dc1")
	if err != nil || dc == nil {
		t.Fatalf("datacenter fsn1-dc1: %v", err)
	}
	if avail["fsn1"] || !avail["nbg1"] || slices.ContainsFunc(dc.ServerTypes.Available, func(s *hcloud.ServerType) bool { return s.ID == st.ID }) {
		t.Errorf("lists after SoldOut: cx22 availability %v, fsn1-dc1 available %v", avail, dc.ServerTypes.Available)
	}
	f.SoldOut("cx22", "fsn1", false)
	if resp, err := create("d", "cx22", "fsn1"); err != nil {
		t.Fatalf("create once back in stock: %s", answer(resp, err))
	}
	if n := len(f.Servers()); n != 1 {
		t.Fatalf("%d servers, want the one made once back in stock", n)
	}
}

// An injected action failure: the request is accepted, and the action
// ends in status "error" with the error given. A failed create_server
// leaves its server behind, off; a failed snapshot leaves no image. The
// fault is used up: the next create succeeds.
func TestFailAction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, client, clk := newFake(t, Options{ActionDelay: 5 * time.Second})
	f.FailAction("create_server", 1, ErrActionUnknown)
	res, _, err := client.Server.Create(ctx, createOpts("s1", nil))
	if err != nil {
		t.Fatalf("a create whose action will fail is answered as usual: %v", err)
	}
	if res.Action.Status != hcloud.ActionStatusRunning {
		t.Fatalf("create action %+v, want running", res.Action)
	}
	clk.Advance(5 * time.Second)
	err = client.Action.WaitFor(ctx, append([]*hcloud.Action{res.Action}, res.NextActions...)...)
	var ae hcloud.ActionError
	if !errors.As(err, &ae) || ae.Code != "unknown_error" || ae.Message != "Unknown Error" {
		t.Fatalf("WaitFor = %v, want the action's unknown_error", err)
	}
	for _, a := range append([]*hcloud.Action{res.Action}, res.NextActions...) {
		got, _, err := client.Action.GetByID(ctx, a.ID)
		if err != nil || got.Status != hcloud.ActionStatusError || got.ErrorCode != "unknown_error" {
			t.Errorf("action %s = %+v, %v; want status error, code unknown_error", a.Command, got, err)
		}
	}
	if s := f.Servers(); len(s) != 1 || s[0].Status != "off" {
		t.Fatalf("servers after the failed create: %+v, want one, off", s)
	}
	ok, _, err := client.Server.Create(ctx, createOpts("s2", nil))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := client.Action.WaitFor(ctx, ok.Action); err != nil {
		t.Fatalf("the next create: %v", err)
	}

	f.FailAction("create_image", 1, ErrActionUnknown)
	snap, _, err := client.Server.CreateImage(ctx, ok.Server, &hcloud.ServerCreateImageOpts{Type: hcloud.ImageTypeSnapshot})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := client.Action.WaitFor(ctx, snap.Action); !errors.As(err, &ae) {
		t.Fatalf("snapshot WaitFor = %v, want an action error", err)
	}
	if im, _, err := client.Image.GetByID(ctx, snap.Image.ID); err != nil || im != nil {
		t.Fatalf("image of a failed snapshot: %+v, %v; want none", im, err)
	}
}
