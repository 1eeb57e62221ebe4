package gcefake

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// What runs "inside" an instance: guest attributes, and each
// instance's own metadata server, which a test talks to as the guest would
// (a builder writing its report).

// enableGuestAttributes is the metadata item that turns guest attributes
// on. The real API also honours it in project metadata; the fake reads only
// the instance's.
const enableGuestAttributes = "enable-guest-attributes"

func guestEnabled(in *instance) bool {
	for _, it := range in.pb.GetMetadata().GetItems() {
		if it.GetKey() == enableGuestAttributes {
			return strings.EqualFold(it.GetValue(), "true")
		}
	}
	return false
}

// getGuestAttributes answers instances.getGuestAttributes: queryPath ""
// (everything), "<namespace>/" or "<namespace>/<key>" in queryValue, and
// variableKey ("<namespace>/<key>") in variableValue. A path with nothing
// under it is 404 notFound, as is every path of an instance whose guest
// attributes are not enabled.
func (f *Fake) getGuestAttributes(project, zone, name string, q url.Values) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	in, aerr := f.liveInstance(project, zone, name)
	if aerr != nil {
		return nil, aerr
	}
	path, key := q.Get("queryPath"), q.Get("variableKey")
	missing := notFound(fmt.Sprintf("projects/%s/zones/%s/instances/%s/guestAttributes/%s", project, zone, name, path+key))
	if !guestEnabled(in) {
		return nil, missing
	}
	res := &computepb.GuestAttributes{Kind: proto.String("compute#guestAttributes"),
		SelfLink: proto.String(in.pb.GetSelfLink() + "/guestAttributes/" + path + key)}
	if key != "" {
		v, ok := in.guest[key]
		if !ok {
			return nil, missing
		}
		res.VariableKey, res.VariableValue = proto.String(key), proto.String(v)
		return res, nil
	}
	res.QueryPath = proto.String(path)
	var items []*computepb.GuestAttributesEntry
	for _, k := range slices.Sorted(maps.Keys(in.guest)) {
		if path != "" && k != path && !strings.HasPrefix(k, strings.TrimSuffix(path, "/")+"/") {
			continue
		}
		ns, kk, _ := strings.Cut(k, "/")
		items = append(items, &computepb.GuestAttributesEntry{Namespace: proto.String(ns), Key: proto.String(kk), Value: proto.String(in.guest[k])})
	}
	if len(items) == 0 {
		return nil, missing
	}
	res.QueryValue = &computepb.GuestAttributesValue{Items: items}
	return res, nil
}

// MetadataURL is the base URL of the metadata server of the instance of
// this name (in any zone), in place of http://metadata.google.internal: a
// test playing the guest PUTs
// MetadataURL(name)+"/computeMetadata/v1/instance/guest-attributes/<ns>/<key>".
// The server starts on 127.0.0.1 on the first call and serves that one
// instance until the fake is closed. It serves:
//   - GET  /computeMetadata/v1/instance/attributes/<key>: a metadata item
//     (user-data among them);
//   - GET, PUT and DELETE /computeMetadata/v1/instance/guest-attributes/<ns>/<key>.
//
// As the real one, it refuses (403) a request without the header
// Metadata-Flavor: Google or with X-Forwarded-For, and guest attributes
// when the instance's metadata lacks enable-guest-attributes=TRUE; it
// answers only while the instance is RUNNING. Faults injected with Fail
// reach it at the path metadata/<zone>/<instance>/<request path>, for
// example Fail("PUT", "metadata/europe-west4-a/b1", 1, ErrUnavailable);
// an HTTP fault answers with its status and message as plain text.
func (f *Fake) MetadataURL(name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	var found []*instance
	for _, in := range f.sortedInstances(f.opts.Project) {
		if in.pb.GetName() == name {
			found = append(found, in)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("gcefake: no instance %q in project %s", name, f.opts.Project)
	case 1:
	default:
		var zones []string
		for _, in := range found {
			zones = append(zones, in.zone)
		}
		return "", fmt.Errorf("gcefake: instance %q exists in zones %v: names are unique per zone only", name, zones)
	}
	in := found[0]
	if in.md == nil {
		if f.closed {
			return "", fmt.Errorf("gcefake: closed")
		}
		srv := httptest.NewUnstartedServer(f.metadataHandler(in.project+"/"+in.zone+"/"+name, in.pb.GetId(), in.zone, name))
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("gcefake: metadata server of %s: %w", name, err)
		}
		srv.Listener = l
		srv.Start()
		in.md = srv
		f.metadataServers = append(f.metadataServers, srv)
	}
	return in.md.URL, nil
}

const guestPrefix = "/computeMetadata/v1/instance/guest-attributes/"

// metadataHandler serves the metadata server of the instance at key with
// this id (a later instance of the same name is another instance).
func (f *Fake) metadataHandler(key string, id uint64, zone, name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			f.mu.Lock()
			f.requests = append(f.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
				UserAgent: r.Header.Get("User-Agent"), Instance: zone + "/" + name, Status: rec.status})
			f.mu.Unlock()
		}()
		rec.Header().Set("Metadata-Flavor", "Google")
		rec.Header().Set("Content-Type", "application/text")
		f.mu.Lock()
		ft, faulted := f.takeFault(r.Method, "metadata/"+zone+"/"+name+r.URL.Path)
		f.mu.Unlock()
		if faulted && ft.HTTPStatus != 0 {
			http.Error(rec, ft.Message, ft.HTTPStatus)
			return
		}
		if r.Header.Get("Metadata-Flavor") != "Google" || r.Header.Get("X-Forwarded-For") != "" {
			http.Error(rec, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
			return
		}
		var body []byte
		if r.Method == http.MethodPut {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(rec, err.Error(), http.StatusBadRequest)
				return
			}
			body = b
		}
		status, out := f.metadata(key, id, r.Method, r.URL.Path, body)
		if status != http.StatusOK {
			http.Error(rec, out, status)
			return
		}
		_, _ = io.WriteString(rec, out)
	}
}

// metadata answers one metadata server request: the status and body.
func (f *Fake) metadata(key string, id uint64, method, path string, body []byte) (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	in := f.instances[key]
	if in == nil || in.pb.GetId() != id {
		return http.StatusServiceUnavailable, "gcefake: the instance is gone"
	}
	if st := f.status(in); st != "RUNNING" {
		return http.StatusServiceUnavailable, "gcefake: the instance is " + st + "; nothing runs in it"
	}
	if item, ok := strings.CutPrefix(path, "/computeMetadata/v1/instance/attributes/"); ok && method == http.MethodGet {
		for _, it := range in.pb.GetMetadata().GetItems() {
			if it.GetKey() == item {
				return http.StatusOK, it.GetValue()
			}
		}
		return http.StatusNotFound, "not found"
	}
	attr, ok := strings.CutPrefix(path, guestPrefix)
	ns, k, two := strings.Cut(attr, "/")
	if !ok || !two || ns == "" || k == "" || strings.Contains(k, "/") {
		return http.StatusNotFound, "not found"
	}
	if !guestEnabled(in) {
		return http.StatusForbidden, "Guest attributes endpoint access is disabled."
	}
	switch method {
	case http.MethodGet:
		v, ok := in.guest[attr]
		if !ok {
			return http.StatusNotFound, "not found"
		}
		return http.StatusOK, v
	case http.MethodPut:
		if in.guest == nil {
			in.guest = map[string]string{}
		}
		in.guest[attr] = string(body)
		return http.StatusOK, ""
	case http.MethodDelete:
		delete(in.guest, attr)
		return http.StatusOK, ""
	}
	return http.StatusMethodNotAllowed, "method not allowed"
}
