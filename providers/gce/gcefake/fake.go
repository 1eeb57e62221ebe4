package gcefake

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// DefaultProject is the project of a fake whose Options leave it out.
const DefaultProject = "prebake-test"

// maxResults is the API's page size when maxResults is absent or 0, and
// the largest it accepts: "Acceptable values are 0 to 500, inclusive" in
// the list methods' reference; more is a 400.
const maxResults = 500

// Options configures a Fake. The zero value is usable.
type Options struct {
	// Project is the project instances and images live in; default
	// DefaultProject. Images of public projects (ubuntu-os-cloud) are
	// served too, read-only.
	Project string
	// Now is the fake's clock; default time.Now.
	Now func() time.Time
	// Provisioning and Staging are how long a new instance stays in each
	// status before it is RUNNING.
	Provisioning, Staging time.Duration
	// Stopping is how long a deleted instance stays listed as STOPPING.
	Stopping time.Duration
	// OperationDelay is how long an operation runs before it is DONE.
	OperationDelay time.Duration
	// WaitTimeout bounds how long operations.wait blocks (in real time)
	// before it answers with an operation that is not DONE yet; the real
	// API waits up to 2 minutes. Default 2s. With a manual clock, wait
	// answers at once: only the test moves time.
	WaitTimeout time.Duration
	// Zones are the zones that exist; default DefaultZones.
	Zones []string
	// MachineTypes are the machine types sold; default DefaultMachineTypes.
	MachineTypes []MachineType
}

// Request is one logged API request.
type Request struct {
	Method string
	// Path is the URL path, such as
	// /compute/v1/projects/p/zones/z/instances.
	Path  string
	Query url.Values
	// UserAgent and APIClient are the User-Agent and x-goog-api-client
	// headers: the compute client library names itself in both.
	UserAgent string
	APIClient string
	// Instance is "<zone>/<name>" for a request to that instance's
	// metadata server (MetadataURL), "" for the API.
	Instance string
	Status   int
}

// Fake is the fake API. Create it with New and Close it when done.
type Fake struct {
	srv        *httptest.Server
	manualTime bool

	// mu guards everything below.
	mu        sync.Mutex
	opts      Options
	nextID    uint64
	instances map[string]*instance           // "project/zone/name"
	disks     map[string]*disk               // "project/zone/name"
	images    map[string]*image              // "project/name"
	firewalls map[string]*computepb.Firewall // "project/name"
	ops       map[string]*operation
	types     []MachineType
	zones     map[string]bool
	faults    []*fault
	requests  []Request
	// metadataServers are the instances' metadata servers, closed with
	// the fake; closed refuses new ones after Close.
	metadataServers []*httptest.Server
	closed          bool
}

// New starts a fake on 127.0.0.1.
func New(opts Options) *Fake {
	manual := opts.Now != nil
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Project == "" {
		opts.Project = DefaultProject
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 2 * time.Second
	}
	if opts.Zones == nil {
		opts.Zones = DefaultZones()
	}
	if opts.MachineTypes == nil {
		opts.MachineTypes = DefaultMachineTypes()
	}
	f := &Fake{
		manualTime: manual,
		opts:       opts,
		nextID:     4_000_000_000_000_000_000,
		instances:  map[string]*instance{},
		disks:      map[string]*disk{},
		images:     map[string]*image{},
		firewalls:  map[string]*computepb.Firewall{},
		ops:        map[string]*operation{},
		types:      opts.MachineTypes,
		zones:      map[string]bool{},
	}
	for _, z := range opts.Zones {
		f.zones[z] = true
	}
	for _, im := range publicImages(opts.Now()) {
		f.images[im.project+"/"+im.pb.GetName()] = im
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serveHTTP))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("gcefake: listen on 127.0.0.1: %v", err))
	}
	f.srv.Listener = l
	f.srv.Start()
	return f
}

// URL is the endpoint to give the client (option.WithEndpoint).
func (f *Fake) URL() string { return f.srv.URL }

// Close stops the server and the instances' metadata servers.
func (f *Fake) Close() {
	f.mu.Lock()
	f.closed = true
	mds := f.metadataServers
	f.metadataServers = nil
	f.mu.Unlock()
	// Outside f.mu: Close waits for handlers, which take it.
	for _, s := range mds {
		s.Close()
	}
	f.srv.Close()
}

// Project is the fake's project.
func (f *Fake) Project() string { return f.opts.Project }

// Requests returns the request log, oldest first.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

// ResetRequests empties the request log.
func (f *Fake) ResetRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = nil
}

// Calls counts the logged requests with this method whose path ends with
// suffix.
func (f *Fake) Calls(method, suffix string) int {
	n := 0
	for _, r := range f.Requests() {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) {
			n++
		}
	}
	return n
}

// SetOperationDelay changes how long new operations run: slow operations.
func (f *Fake) SetOperationDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opts.OperationDelay = d
}

func (f *Fake) newID() uint64 {
	f.nextID++
	return f.nextID
}

// apiError is an HTTP error answer in the API's JSON error shape.
type apiError struct {
	status  int
	reason  string
	message string
}

func (e *apiError) Error() string { return e.message }

func notFound(resource string) *apiError {
	return &apiError{http.StatusNotFound, "notFound", fmt.Sprintf("The resource '%s' was not found", resource)}
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "invalid", fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"error": map[string]any{
		"code": e.status, "message": e.message,
		"errors": []map[string]string{{"message": e.message, "domain": domainOf(e.reason), "reason": e.reason}},
	}}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(body)
}

func domainOf(reason string) string {
	switch reason {
	case "rateLimitExceeded", "userRateLimitExceeded":
		return "usageLimits"
	}
	return "global"
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.Marshal(m)
	if err != nil {
		writeError(w, &apiError{http.StatusInternalServerError, "backendError", err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write(b)
}

func readProto(r *http.Request, m proto.Message) *apiError {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return badRequest("read body: %v", err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return badRequest("Invalid JSON payload received. %v", err)
	}
	return nil
}

// statusRecorder remembers the status written, for the request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (f *Fake) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		f.mu.Lock()
		f.requests = append(f.requests, Request{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
			UserAgent: r.Header.Get("User-Agent"), APIClient: r.Header.Get("x-goog-api-client"), Status: rec.status,
		})
		f.mu.Unlock()
	}()
	rest, ok := strings.CutPrefix(r.URL.Path, "/compute/v1/projects/")
	if !ok {
		writeError(rec, notFound(r.URL.Path))
		return
	}
	parts := strings.Split(rest, "/")
	project, parts := parts[0], parts[1:]

	f.mu.Lock()
	ft, faulted := f.takeFault(r.Method, strings.Join(parts, "/"))
	f.mu.Unlock()
	if faulted && ft.HTTPStatus != 0 {
		if ft.HTTPStatus == http.StatusTooManyRequests || ft.Reason == "rateLimitExceeded" {
			rec.Header().Set("Retry-After", "1")
		}
		writeError(rec, &apiError{ft.HTTPStatus, ft.Reason, ft.Message})
		return
	}
	var opFault *Fault
	if faulted {
		opFault = &ft
	}

	m, p := r.Method, parts
	var res proto.Message
	var err *apiError
	switch {
	case m == http.MethodGet && match(p, "aggregated", "instances"):
		res, err = f.aggregatedInstances(project, r.URL.Query())
	case m == http.MethodGet && match(p, "zones", "*", "instances"):
		res, err = f.listInstances(project, p[1], r.URL.Query())
	case m == http.MethodPost && match(p, "zones", "*", "instances"):
		in := &computepb.Instance{}
		if err = readProto(r, in); err == nil {
			res, err = f.insertInstance(project, p[1], in, opFault)
		}
	case m == http.MethodGet && match(p, "zones", "*", "instances", "*"):
		res, err = f.getInstance(project, p[1], p[3])
	case m == http.MethodDelete && match(p, "zones", "*", "instances", "*"):
		res, err = f.deleteInstance(project, p[1], p[3])
	case m == http.MethodPost && match(p, "zones", "*", "instances", "*", "*"):
		var ok bool
		if res, err, ok = f.lifecycleRoute(r, project, p[1], p[3], p[4], opFault); !ok {
			err = &apiError{http.StatusNotFound, "notFound", fmt.Sprintf("gcefake: no route for %s %s", m, r.URL.Path)}
		}
	case m == http.MethodGet && match(p, "zones", "*", "instances", "*", "getGuestAttributes"):
		res, err = f.getGuestAttributes(project, p[1], p[3], r.URL.Query())
	case m == http.MethodGet && match(p, "zones", "*", "operations", "*"):
		res, err = f.getOperation(project, "zones/"+p[1], p[3])
	case m == http.MethodPost && match(p, "zones", "*", "operations", "*", "wait"):
		res, err = f.waitOperation(r, project, "zones/"+p[1], p[3])
	case m == http.MethodGet && match(p, "global", "operations", "*"):
		res, err = f.getOperation(project, "global", p[2])
	case m == http.MethodPost && match(p, "global", "operations", "*", "wait"):
		res, err = f.waitOperation(r, project, "global", p[2])
	case m == http.MethodGet && match(p, "zones", "*", "machineTypes"):
		res, err = f.listMachineTypes(project, p[1], r.URL.Query())
	case m == http.MethodGet && match(p, "zones", "*", "machineTypes", "*"):
		res, err = f.getMachineType(project, p[1], p[3])
	case m == http.MethodGet && match(p, "global", "images"):
		res, err = f.listImages(project, r.URL.Query())
	case m == http.MethodPost && match(p, "global", "images"):
		im := &computepb.Image{}
		if err = readProto(r, im); err == nil {
			res, err = f.insertImage(project, im, opFault, r.URL.Query().Get("forceCreate") == "true")
		}
	case m == http.MethodGet && match(p, "global", "images", "family", "*"):
		res, err = f.imageFromFamily(project, p[3])
	case m == http.MethodGet && match(p, "global", "images", "*"):
		res, err = f.getImage(project, p[2])
	case m == http.MethodDelete && match(p, "global", "images", "*"):
		res, err = f.deleteImage(project, p[2])
	case m == http.MethodPost && match(p, "global", "images", "*", "setLabels"):
		req := &computepb.GlobalSetLabelsRequest{}
		if err = readProto(r, req); err == nil {
			res, err = f.setImageLabels(project, p[2], req)
		}
	case m == http.MethodPost && match(p, "global", "images", "*", "deprecate"):
		req := &computepb.DeprecationStatus{}
		if err = readProto(r, req); err == nil {
			res, err = f.deprecateImage(project, p[2], req)
		}
	case m == http.MethodGet && match(p, "global", "firewalls", "*"):
		res, err = f.getFirewall(project, p[2])
	case m == http.MethodPost && match(p, "global", "firewalls"):
		fw := &computepb.Firewall{}
		if err = readProto(r, fw); err == nil {
			res, err = f.insertFirewall(project, fw, opFault)
		}
	case m == http.MethodPut && match(p, "global", "firewalls", "*"):
		fw := &computepb.Firewall{}
		if err = readProto(r, fw); err == nil {
			res, err = f.updateFirewall(project, p[2], fw, opFault)
		}
	case m == http.MethodDelete && match(p, "global", "firewalls", "*"):
		res, err = f.deleteFirewall(project, p[2])
	default:
		err = &apiError{http.StatusNotFound, "notFound", fmt.Sprintf("gcefake: no route for %s %s", m, r.URL.Path)}
	}
	if err != nil {
		writeError(rec, err)
		return
	}
	writeProto(rec, res)
}

// match reports whether path segments p fit pattern, "*" matching one
// non-empty segment.
func match(p []string, pattern ...string) bool {
	if len(p) != len(pattern) {
		return false
	}
	for i, s := range pattern {
		if p[i] == "" || (s != "*" && s != p[i]) {
			return false
		}
	}
	return true
}

// page cuts items to one page: maxResults (0 to 500; default 500) from the
// offset in pageToken.
func page(q url.Values, n int) (from, to int, next string, err *apiError) {
	size := maxResults
	if s := q.Get("maxResults"); s != "" {
		v, perr := strconv.Atoi(s)
		switch {
		case perr != nil || v < 0:
			return 0, 0, "", badRequest("Invalid value for field 'maxResults': '%s'. Must be a non-negative integer.", s)
		case v > maxResults:
			return 0, 0, "", badRequest("Invalid value for field 'maxResults': '%s'. Must be less than or equal to %d", s, maxResults)
		case v > 0:
			size = v
		}
	}
	if t := q.Get("pageToken"); t != "" {
		v, perr := strconv.Atoi(strings.TrimPrefix(t, "offset-"))
		if perr != nil || v < 0 || !strings.HasPrefix(t, "offset-") {
			return 0, 0, "", badRequest("Invalid value for field 'pageToken': '%s'.", t)
		}
		from = min(v, n)
	}
	to = min(from+size, n)
	if to < n {
		next = "offset-" + strconv.Itoa(to)
	}
	return from, to, next, nil
}

// selfLink is the URL the real API names a resource by; clients must not
// follow it, so it is the real host, not the fake's.
func (f *Fake) selfLink(path string) string {
	return "https://www.googleapis.com/compute/v1/projects/" + path
}

func timestamp(t time.Time) string {
	return t.Format("2006-01-02T15:04:05.000-07:00")
}
