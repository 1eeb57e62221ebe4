package hcloudfake

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// MaxPerPage is the API's largest page.
const MaxPerPage = 50

// defaultPerPage is the API's page size when per_page is absent.
const defaultPerPage = 25

// Options configures a Fake. The zero value is usable.
type Options struct {
	// Token, when set, is the only bearer token accepted.
	Token string
	// Now is the fake's clock; default time.Now.
	Now func() time.Time
	// Initializing and Starting are how long a new server stays in each
	// status before it is running.
	Initializing, Starting time.Duration
	// ActionDelay is how long an action runs before it succeeds; it also
	// delays the disappearance of a deleted server (status "deleting").
	ActionDelay time.Duration
	// RateLimit is the bucket size, refilled evenly over an hour like the
	// real API's 3600 requests/hour; default 3600. A request finding the
	// bucket empty gets a 429.
	RateLimit int
	// PlacementGroupSize is how many servers a spread placement group
	// holds; default 10, like the real API.
	PlacementGroupSize int
}

// Fake is the fake API. Create it with New and Close it when done.
type Fake struct {
	srv *httptest.Server

	// mu guards everything below and opts.ActionDelay.
	mu          sync.Mutex
	opts        Options
	nextID      int64
	servers     map[int64]*server
	actions     map[int64]*action
	images      map[int64]*image
	firewalls   map[int64]*firewall // firewalls.go
	serverTypes []schema.ServerType
	locations   []schema.Location
	datacenters []schema.Datacenter
	faults      []*fault
	actionFails []*actionFault
	calls       map[string]int // "GET /servers" → count
	tokens      float64        // rate-limit bucket
	refilled    time.Time      // when tokens was last brought up to date
}

type server struct {
	schema         schema.Server
	userData       string
	networks       []int64
	firewalls      []int64
	sshKeys        []int64
	placementGroup int64
	started        bool      // powered on: start_after_create, then poweron/poweroff (power.go)
	poweringOn     bool      // a poweron action runs: "starting"
	ignoresACPI    bool      // a shutdown's action succeeds, the server runs on (IgnoreACPI)
	deleteAt       time.Time // zero unless deleting
}

type action struct {
	schema   schema.Action
	finishAt time.Time
	// fail, when set, is the error the action ends with (FailAction).
	fail *ActionError
	// onDone runs once, under f.mu, when the action finishes; failed tells
	// an action that ended in error.
	onDone func(failed bool)
}

type image struct {
	schema schema.Image // a snapshot is "creating" until its action ends
}

// New starts a fake on 127.0.0.1 with the catalogue of DefaultServerTypes,
// DefaultLocations and the system images of DefaultImages.
func New(opts Options) *Fake {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RateLimit <= 0 {
		opts.RateLimit = 3600
	}
	if opts.PlacementGroupSize <= 0 {
		opts.PlacementGroupSize = 10
	}
	f := &Fake{
		opts:        opts,
		nextID:      1000,
		servers:     map[int64]*server{},
		actions:     map[int64]*action{},
		images:      map[int64]*image{},
		serverTypes: DefaultServerTypes(),
		locations:   DefaultLocations(),
		datacenters: DefaultDatacenters(),
		calls:       map[string]int{},
		tokens:      float64(opts.RateLimit),
		refilled:    opts.Now(),
	}
	for _, im := range DefaultImages() {
		f.images[im.ID] = &image{schema: im}
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serveHTTP))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("hcloudfake: listen on 127.0.0.1: %v", err))
	}
	f.srv.Listener = l
	f.srv.Start()
	return f
}

// URL is the API endpoint, for hcloud.WithEndpoint.
func (f *Fake) URL() string { return f.srv.URL }

// Close stops the server.
func (f *Fake) Close() { f.srv.Close() }

// Calls returns how many requests had this method and exact path, such as
// ("GET", "/servers"); ("", "") counts all of them.
func (f *Fake) Calls(method, path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if method == "" && path == "" {
		n := 0
		for _, c := range f.calls {
			n += c
		}
		return n
	}
	return f.calls[method+" "+path]
}

// Live returns how many servers exist and are not being deleted.
func (f *Fake) Live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.opts.Now()
	f.settle(now)
	n := 0
	for _, s := range f.servers {
		if s.deleteAt.IsZero() {
			n++
		}
	}
	return n
}

// Server is a test's view of one server.
type Server struct {
	ID         int64
	Name       string
	Status     string
	ServerType string
	Image      string // name, or id for snapshots
	Location   string
	Labels     map[string]string
	UserData   string
	IPv4       string // the public address; the fake's are in 192.0.2.0/24, TEST-NET-1, never dialled
	// PrivateIPs are its addresses in Networks, in the same order (10.<index>.0.x).
	PrivateIPs     []string
	Networks       []int64
	Firewalls      []int64
	SSHKeys        []int64
	PlacementGroup int64
}

// Servers returns every server, deleting ones included, by id.
func (f *Fake) Servers() []Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.opts.Now()
	f.settle(now)
	out := make([]Server, 0, len(f.servers))
	for _, id := range slices.Sorted(maps.Keys(f.servers)) {
		s := f.servers[id]
		v := f.view(s, now)
		img := ""
		if v.Image != nil {
			if v.Image.Name != nil {
				img = *v.Image.Name
			} else {
				img = strconv.FormatInt(v.Image.ID, 10)
			}
		}
		var private []string
		for _, n := range v.PrivateNet {
			private = append(private, n.IP)
		}
		out = append(out, Server{
			ID: id, Name: v.Name, Status: v.Status, ServerType: v.ServerType.Name, Image: img,
			Location: v.Location.Name, Labels: maps.Clone(v.Labels), UserData: s.userData, IPv4: v.PublicNet.IPv4.IP, PrivateIPs: private,
			Networks: slices.Clone(s.networks), Firewalls: slices.Clone(s.firewalls),
			SSHKeys: slices.Clone(s.sshKeys), PlacementGroup: s.placementGroup,
		})
	}
	return out
}

func (f *Fake) id() int64 {
	f.nextID++
	return f.nextID
}

// settle finishes due actions and removes servers whose deletion is done.
func (f *Fake) settle(now time.Time) {
	for _, a := range f.actions {
		if a.schema.Status == "running" && !now.Before(a.finishAt) {
			a.schema.Status = "success"
			a.schema.Progress = 100
			if a.fail != nil {
				a.schema.Status = "error"
				a.schema.Error = &schema.ActionError{Code: a.fail.Code, Message: a.fail.Message}
			}
			fin := a.finishAt
			a.schema.Finished = &fin
			if a.onDone != nil {
				a.onDone(a.fail != nil)
				a.onDone = nil
			}
		}
	}
	for id, s := range f.servers {
		if !s.deleteAt.IsZero() && !now.Before(s.deleteAt) {
			delete(f.servers, id)
		}
	}
}

// view is the server as the API shows it now.
func (f *Fake) view(s *server, now time.Time) schema.Server {
	v := s.schema
	v.Labels = maps.Clone(s.schema.Labels)
	age := now.Sub(v.Created)
	switch {
	case !s.deleteAt.IsZero():
		v.Status = "deleting"
	case age < f.opts.Initializing:
		v.Status = "initializing"
	case s.poweringOn:
		v.Status = "starting"
	case !s.started:
		v.Status = "off"
	case age < f.opts.Initializing+f.opts.Starting:
		v.Status = "starting"
	default:
		v.Status = "running"
	}
	return v
}

func (f *Fake) newAction(command string, now time.Time, res ...schema.ActionResourceReference) *action {
	a := &action{
		schema: schema.Action{
			ID: f.id(), Status: "running", Command: command, Started: now,
			Resources: res,
		},
		finishAt: now.Add(f.opts.ActionDelay),
		fail:     f.takeActionFault(command),
	}
	if a.schema.Resources == nil {
		a.schema.Resources = []schema.ActionResourceReference{}
	}
	f.actions[a.schema.ID] = a
	return a
}

// rateLimit takes one token, refilling the bucket evenly over an hour, and
// sets the RateLimit headers. It reports whether a token was left.
func (f *Fake) rateLimit(w http.ResponseWriter, now time.Time) bool {
	limit := float64(f.opts.RateLimit)
	perToken := time.Hour / time.Duration(f.opts.RateLimit)
	if el := now.Sub(f.refilled); el > 0 {
		f.tokens = min(limit, f.tokens+float64(el)/float64(perToken))
		f.refilled = now
	}
	ok := f.tokens >= 1
	if ok {
		f.tokens--
	}
	reset := now.Add(time.Duration((limit - f.tokens) * float64(perToken)))
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(f.opts.RateLimit))
	h.Set("RateLimit-Remaining", strconv.Itoa(int(f.tokens)))
	h.Set("RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	return ok
}

func (f *Fake) serveHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.opts.Now()
	f.calls[r.Method+" "+r.URL.Path]++
	if f.opts.Token != "" && r.Header.Get("Authorization") != "Bearer "+f.opts.Token {
		writeError(w, APIError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "unable to authenticate"})
		return
	}
	if !f.rateLimit(w, now) {
		writeError(w, ErrRateLimited)
		return
	}
	if e, ok := f.takeFault(r); ok {
		if e.Status == http.StatusTooManyRequests {
			w.Header().Set("RateLimit-Remaining", "0")
		}
		writeError(w, e)
		return
	}
	f.settle(now)
	f.route(w, r, now)
}

func (f *Fake) route(w http.ResponseWriter, r *http.Request, now time.Time) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// The client may be pointed at ".../v1"; accept both.
	if len(parts) > 0 && parts[0] == "v1" {
		parts = parts[1:]
	}
	switch {
	case len(parts) == 1 && parts[0] == "servers" && r.Method == http.MethodGet:
		f.listServers(w, r, now)
	case len(parts) == 1 && parts[0] == "servers" && r.Method == http.MethodPost:
		f.createServer(w, r, now)
	case len(parts) == 2 && parts[0] == "servers":
		id, ok := parseID(w, parts[1])
		if !ok {
			return
		}
		switch r.Method {
		case http.MethodGet:
			f.getServer(w, id, now)
		case http.MethodDelete:
			f.deleteServer(w, id, now)
		case http.MethodPut:
			f.updateServer(w, r, id, now)
		default:
			notFound(w)
		}
	case len(parts) == 4 && parts[0] == "servers" && parts[2] == "actions" && parts[3] == "create_image" && r.Method == http.MethodPost:
		id, ok := parseID(w, parts[1])
		if ok {
			f.createImage(w, r, id, now)
		}
	case len(parts) == 4 && parts[0] == "servers" && parts[2] == "actions" && powerCommands[parts[3]] != "" && r.Method == http.MethodPost:
		id, ok := parseID(w, parts[1])
		if ok {
			f.powerServer(w, id, parts[3], now)
		}
	case len(parts) == 1 && parts[0] == "actions" && r.Method == http.MethodGet:
		f.listActions(w, r)
	case len(parts) == 2 && parts[0] == "actions" && r.Method == http.MethodGet:
		id, ok := parseID(w, parts[1])
		if !ok {
			return
		}
		a, found := f.actions[id]
		if !found {
			notFound(w)
			return
		}
		writeJSON(w, http.StatusOK, schema.ActionGetResponse{Action: a.schema})
	case len(parts) == 1 && parts[0] == "server_types" && r.Method == http.MethodGet:
		f.listServerTypes(w, r)
	case len(parts) == 2 && parts[0] == "server_types" && r.Method == http.MethodGet:
		getByID(w, parts[1], f.serverTypes, func(t schema.ServerType) int64 { return t.ID }, func(t schema.ServerType) any { return schema.ServerTypeGetResponse{ServerType: t} })
	case len(parts) == 1 && parts[0] == "locations" && r.Method == http.MethodGet:
		items := filterName(r, f.locations, func(l schema.Location) string { return l.Name })
		writePage(w, r, "locations", items)
	case len(parts) == 2 && parts[0] == "locations" && r.Method == http.MethodGet:
		getByID(w, parts[1], f.locations, func(l schema.Location) int64 { return l.ID }, func(l schema.Location) any { return schema.LocationGetResponse{Location: l} })
	case len(parts) == 1 && parts[0] == "datacenters" && r.Method == http.MethodGet:
		items := filterName(r, f.datacenters, func(d schema.Datacenter) string { return d.Name })
		writePage(w, r, "datacenters", items)
	case len(parts) == 2 && parts[0] == "datacenters" && r.Method == http.MethodGet:
		getByID(w, parts[1], f.datacenters, func(d schema.Datacenter) int64 { return d.ID }, func(d schema.Datacenter) any { return schema.DatacenterGetResponse{Datacenter: d} })
	case len(parts) == 1 && parts[0] == "images" && r.Method == http.MethodGet:
		f.listImages(w, r, now)
	case len(parts) == 2 && parts[0] == "images":
		id, ok := parseID(w, parts[1])
		if !ok {
			return
		}
		switch r.Method {
		case http.MethodGet:
			f.getImage(w, id, now)
		case http.MethodPut:
			f.updateImage(w, r, id, now)
		case http.MethodDelete:
			f.deleteImage(w, id)
		default:
			notFound(w)
		}
	case len(parts) == 4 && parts[0] == "images" && parts[2] == "actions" && parts[3] == "change_protection" && r.Method == http.MethodPost:
		id, ok := parseID(w, parts[1])
		if ok {
			f.changeImageProtection(w, r, id, now)
		}
	default:
		if !f.routeFirewalls(w, r, parts, now) {
			notFound(w)
		}
	}
}

func (f *Fake) listServers(w http.ResponseWriter, r *http.Request, now time.Time) {
	sel, err := parseSelector(r.URL.Query().Get("label_selector"))
	if err != nil {
		writeError(w, invalidInput(err.Error()))
		return
	}
	name := r.URL.Query().Get("name")
	statuses := r.URL.Query()["status"]
	// Filter on the stored server; build the (copying) views for one page
	// only: a fleet of thousands is listed 50 at a time.
	var match []*server
	for _, id := range slices.Sorted(maps.Keys(f.servers)) {
		s := f.servers[id]
		if (name != "" && s.schema.Name != name) || !sel.matches(s.schema.Labels) ||
			(len(statuses) > 0 && !slices.Contains(statuses, f.view(s, now).Status)) {
			continue
		}
		match = append(match, s)
	}
	lo, hi, meta, ok := pageOf(w, r, len(match))
	if !ok {
		return
	}
	out := make([]schema.Server, 0, hi-lo)
	for _, s := range match[lo:hi] {
		out = append(out, f.view(s, now))
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": out, "meta": meta})
}

func (f *Fake) getServer(w http.ResponseWriter, id int64, now time.Time) {
	s, ok := f.servers[id]
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, schema.ServerGetResponse{Server: f.view(s, now)})
}

func (f *Fake) createServer(w http.ResponseWriter, r *http.Request, now time.Time) {
	var req schema.ServerCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, APIError{Status: http.StatusBadRequest, Code: "json_error", Message: err.Error()})
		return
	}
	if req.Name == "" {
		writeError(w, invalidInput("name is required"))
		return
	}
	if req.Labels != nil {
		if e, bad := checkLabels(*req.Labels); bad {
			writeError(w, e)
			return
		}
	}
	for _, s := range f.servers {
		if s.schema.Name == req.Name {
			writeError(w, APIError{Status: http.StatusConflict, Code: "uniqueness_error", Message: fmt.Sprintf("server name %q is already used", req.Name)})
			return
		}
	}
	st, ok := f.serverType(req.ServerType)
	if !ok {
		writeError(w, invalidInput(fmt.Sprintf("server_type %v not found", req.ServerType)))
		return
	}
	loc := f.locations[0]
	if req.Location != "" {
		found := false
		for _, l := range f.locations {
			if l.Name == req.Location || strconv.FormatInt(l.ID, 10) == req.Location {
				loc, found = l, true
			}
		}
		if !found {
			writeError(w, invalidInput(fmt.Sprintf("location %q not found", req.Location)))
			return
		}
	}
	i := slices.IndexFunc(st.Locations, func(l schema.ServerTypeLocation) bool { return l.Name == loc.Name })
	switch {
	case i < 0:
		// Never sold there: the API's message (its status for it is not
		// documented; invalid_input is a 400 elsewhere).
		writeError(w, invalidInput("unsupported location for server type"))
		return
	case !st.Locations[i].Available:
		writeError(w, ErrResourceUnavailable)
		return
	}
	im, ok := f.image(req.Image, st.Architecture)
	if !ok {
		writeError(w, invalidInput(fmt.Sprintf("image %v not found for architecture %s", req.Image, st.Architecture)))
		return
	}
	if req.PlacementGroup != 0 {
		n := 0
		for _, s := range f.servers {
			if s.placementGroup == req.PlacementGroup {
				n++
			}
		}
		if n >= f.opts.PlacementGroupSize {
			writeError(w, ErrPlacement)
			return
		}
	}
	labels := map[string]string{}
	if req.Labels != nil {
		labels = maps.Clone(*req.Labels)
	}
	id := f.id()
	imCopy := im.schema
	s := &server{
		schema: schema.Server{
			ID: id, Name: req.Name, Created: now, ServerType: st, Location: loc, Image: &imCopy, Labels: labels,
			PrimaryDiskSize: st.Disk,
			PublicNet: schema.ServerPublicNet{
				IPv4: schema.ServerPublicNetIPv4{ID: id, IP: fmt.Sprintf("192.0.2.%d", id%250+1)},
			},
			PrivateNet: []schema.ServerPrivateNet{},
			Volumes:    []int64{},
		},
		userData:       req.UserData,
		networks:       req.Networks,
		sshKeys:        req.SSHKeys,
		placementGroup: req.PlacementGroup,
		started:        req.StartAfterCreate == nil || *req.StartAfterCreate,
	}
	for _, fw := range req.Firewalls {
		s.firewalls = append(s.firewalls, fw.Firewall)
		s.schema.PublicNet.Firewalls = append(s.schema.PublicNet.Firewalls, schema.ServerFirewall{ID: fw.Firewall, Status: "applied"})
	}
	for i, n := range req.Networks {
		s.schema.PrivateNet = append(s.schema.PrivateNet, schema.ServerPrivateNet{Network: n, IP: fmt.Sprintf("10.%d.0.%d", i, id%250+1)})
	}
	if req.PlacementGroup != 0 {
		s.schema.PlacementGroup = &schema.PlacementGroup{ID: req.PlacementGroup, Type: "spread", Servers: []int64{id}}
	}
	f.servers[id] = s
	ref := schema.ActionResourceReference{ID: id, Type: "server"}
	create := f.newAction("create_server", now, ref)
	// A server whose create failed stays behind, off: what reports of
	// failed creates describe (terraform-provider-hcloud#469: "I can see
	// the server created in console"; kube-hetzner#49: "one of them is
	// off").
	create.onDone = func(failed bool) {
		if failed {
			s.started = false
		}
	}
	resp := schema.ServerCreateResponse{Server: f.view(s, now), Action: create.schema, NextActions: []schema.Action{}}
	if s.started {
		start := f.newAction("start_server", now, ref)
		if create.fail != nil && start.fail == nil {
			start.fail = create.fail // nothing to start
		}
		resp.NextActions = append(resp.NextActions, start.schema)
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (f *Fake) deleteServer(w http.ResponseWriter, id int64, now time.Time) {
	s, ok := f.servers[id]
	if !ok {
		notFound(w)
		return
	}
	a := f.newAction("delete_server", now, schema.ActionResourceReference{ID: id, Type: "server"})
	if s.deleteAt.IsZero() {
		s.deleteAt = a.finishAt
	}
	if !now.Before(s.deleteAt) {
		delete(f.servers, id)
	}
	writeJSON(w, http.StatusOK, schema.ServerDeleteResponse{Action: a.schema})
}

func (f *Fake) updateServer(w http.ResponseWriter, r *http.Request, id int64, now time.Time) {
	s, ok := f.servers[id]
	if !ok {
		notFound(w)
		return
	}
	var req schema.ServerUpdateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, APIError{Status: http.StatusBadRequest, Code: "json_error", Message: err.Error()})
		return
	}
	if req.Name != "" {
		s.schema.Name = req.Name
	}
	if req.Labels != nil {
		if e, bad := checkLabels(*req.Labels); bad {
			writeError(w, e)
			return
		}
		s.schema.Labels = maps.Clone(*req.Labels)
	}
	writeJSON(w, http.StatusOK, schema.ServerUpdateResponse{Server: f.view(s, now)})
}

func (f *Fake) listActions(w http.ResponseWriter, r *http.Request) {
	ids := r.URL.Query()["id"]
	if len(ids) == 0 {
		writeError(w, invalidInput("id is required"))
		return
	}
	var out []schema.Action
	for _, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			writeError(w, invalidInput(fmt.Sprintf("id %q is not a number", s)))
			return
		}
		if a, ok := f.actions[id]; ok {
			out = append(out, a.schema)
		}
	}
	writePage(w, r, "actions", out)
}

func (f *Fake) listServerTypes(w http.ResponseWriter, r *http.Request) {
	items := filterName(r, f.serverTypes, func(t schema.ServerType) string { return t.Name })
	writePage(w, r, "server_types", items)
}

func (f *Fake) serverType(ref schema.IDOrName) (schema.ServerType, bool) {
	for _, t := range f.serverTypes {
		if (ref.ID != 0 && t.ID == ref.ID) || (ref.Name != "" && t.Name == ref.Name) {
			return t, true
		}
	}
	return schema.ServerType{}, false
}

// image finds an available image by id, or by name for this architecture.
func (f *Fake) image(ref schema.IDOrName, arch string) (*image, bool) {
	for _, id := range slices.Sorted(maps.Keys(f.images)) {
		im := f.images[id]
		if im.schema.Status != "available" {
			continue
		}
		if ref.ID != 0 && im.schema.ID == ref.ID {
			return im, im.schema.Architecture == arch
		}
		if ref.Name != "" && im.schema.Name != nil && *im.schema.Name == ref.Name && im.schema.Architecture == arch {
			return im, true
		}
	}
	return nil, false
}

func parseID(w http.ResponseWriter, s string) (int64, bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		writeError(w, invalidInput(fmt.Sprintf("id %q is not a number", s)))
		return 0, false
	}
	return id, true
}

func getByID[T any](w http.ResponseWriter, s string, items []T, id func(T) int64, wrap func(T) any) {
	n, ok := parseID(w, s)
	if !ok {
		return
	}
	for _, it := range items {
		if id(it) == n {
			writeJSON(w, http.StatusOK, wrap(it))
			return
		}
	}
	notFound(w)
}

func filterName[T any](r *http.Request, items []T, name func(T) string) []T {
	want := r.URL.Query().Get("name")
	if want == "" {
		return items
	}
	var out []T
	for _, it := range items {
		if name(it) == want {
			out = append(out, it)
		}
	}
	return out
}

// pageOf reads page and per_page and returns the bounds of the page within
// total items and its meta.pagination, as the API does. On a bad parameter
// it answers the request itself and returns ok=false.
func pageOf(w http.ResponseWriter, r *http.Request, total int) (lo, hi int, meta schema.Meta, ok bool) {
	q := r.URL.Query()
	page, perPage := 1, defaultPerPage
	if s := q.Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, invalidInput(fmt.Sprintf("page %q must be a positive number", s)))
			return 0, 0, meta, false
		}
		page = n
	}
	if s := q.Get("per_page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPerPage {
			writeError(w, invalidInput(fmt.Sprintf("per_page %q must be between 1 and %d", s, MaxPerPage)))
			return 0, 0, meta, false
		}
		perPage = n
	}
	last := max(1, (total+perPage-1)/perPage)
	lo = min(total, (page-1)*perPage)
	hi = min(total, lo+perPage)
	p := &schema.MetaPagination{Page: page, PerPage: perPage, LastPage: last, TotalEntries: total}
	if page > 1 {
		p.PreviousPage = page - 1
	}
	if page < last {
		p.NextPage = page + 1
	}
	return lo, hi, schema.Meta{Pagination: p}, true
}

// writePage answers one page of items under key, with meta.pagination.
func writePage[T any](w http.ResponseWriter, r *http.Request, key string, items []T) {
	lo, hi, meta, ok := pageOf(w, r, len(items))
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{key: append([]T{}, items[lo:hi]...), "meta": meta})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e APIError) {
	details := map[string]any{}
	if len(e.Fields) > 0 {
		details["fields"] = e.Fields
	}
	writeJSON(w, e.Status, map[string]any{"error": map[string]any{"code": e.Code, "message": e.Message, "details": details}})
}

func notFound(w http.ResponseWriter) {
	writeError(w, APIError{Status: http.StatusNotFound, Code: "not_found", Message: "resource not found"})
}

func invalidInput(msg string) APIError {
	return APIError{Status: http.StatusBadRequest, Code: "invalid_input", Message: msg}
}
