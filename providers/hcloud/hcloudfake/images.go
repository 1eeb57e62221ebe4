package hcloudfake

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

func (f *Fake) listImages(w http.ResponseWriter, r *http.Request, now time.Time) {
	q := r.URL.Query()
	sel, err := parseSelector(q.Get("label_selector"))
	if err != nil {
		writeError(w, invalidInput(err.Error()))
		return
	}
	types, archs, statuses, name := q["type"], q["architecture"], q["status"], q.Get("name")
	var out []schema.Image
	for _, id := range slices.Sorted(maps.Keys(f.images)) {
		im := f.images[id].schema
		switch {
		case len(types) > 0 && !slices.Contains(types, im.Type),
			len(archs) > 0 && !slices.Contains(archs, im.Architecture),
			len(statuses) > 0 && !slices.Contains(statuses, im.Status),
			name != "" && (im.Name == nil || *im.Name != name),
			!sel.matches(im.Labels):
			continue
		}
		im.Labels = maps.Clone(im.Labels)
		out = append(out, im)
	}
	if slices.Contains(q["sort"], "created:desc") {
		slices.SortStableFunc(out, func(a, b schema.Image) int { return b.Created.Compare(*a.Created) })
	}
	writePage(w, r, "images", out)
}

func (f *Fake) getImage(w http.ResponseWriter, id int64, _ time.Time) {
	im, ok := f.images[id]
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, schema.ImageGetResponse{Image: im.schema})
}

// createImage snapshots a server: the image is "creating" until the action
// ends.
func (f *Fake) createImage(w http.ResponseWriter, r *http.Request, serverID int64, now time.Time) {
	s, ok := f.servers[serverID]
	if !ok {
		notFound(w)
		return
	}
	var req schema.ServerActionCreateImageRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, APIError{Status: http.StatusBadRequest, Code: "json_error", Message: err.Error()})
		return
	}
	typ := "snapshot"
	if req.Type != nil {
		if *req.Type != "snapshot" && *req.Type != "backup" {
			writeError(w, invalidInput(fmt.Sprintf("type %q must be snapshot or backup", *req.Type)))
			return
		}
		typ = *req.Type
	}
	created := now
	im := &image{schema: schema.Image{
		ID: f.id(), Status: "creating", Type: typ, Created: &created,
		CreatedFrom:  &schema.ImageCreatedFrom{ID: s.schema.ID, Name: s.schema.Name},
		DiskSize:     float32(s.schema.PrimaryDiskSize),
		OSFlavor:     s.schema.Image.OSFlavor,
		Architecture: s.schema.ServerType.Architecture,
		Labels:       map[string]string{},
	}}
	if req.Description != nil {
		im.schema.Description = *req.Description
	}
	if req.Labels != nil {
		if e, bad := checkLabels(*req.Labels); bad {
			writeError(w, e)
			return
		}
		im.schema.Labels = maps.Clone(*req.Labels)
	}
	f.images[im.schema.ID] = im
	a := f.newAction("create_image", now,
		schema.ActionResourceReference{ID: serverID, Type: "server"},
		schema.ActionResourceReference{ID: im.schema.ID, Type: "image"})
	a.onDone = func(failed bool) {
		if failed {
			delete(f.images, im.schema.ID)
			return
		}
		im.schema.Status = "available"
		size := im.schema.DiskSize / 4
		im.schema.ImageSize = &size
	}
	f.settle(now)
	writeJSON(w, http.StatusCreated, schema.ServerActionCreateImageResponse{Action: a.schema, Image: im.schema})
}

var (
	labelName   = regexp.MustCompile(`^[a-z0-9A-Z]([-a-z0-9_.A-Z]*[a-z0-9A-Z])?$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// checkLabels applies the API's label rules (https://docs.hetzner.cloud/,
// "Labels"): a key is an optional DNS subdomain prefix and "/", then a name
// of at most 63 characters, alphanumeric at both ends with '-', '_' and '.'
// between; the prefix hetzner.cloud/ is reserved; a value is empty or like
// a name. The real API refuses anything else with 400 invalid_input,
// "invalid input in field 'labels'", and a details.fields entry for labels
// ("invalid label key" or "invalid label value", as quoted in
// hetznercloud/terraform-provider-hcloud#345 and #521), so a client that
// builds bad labels fails here too, wherever it sends them.
func checkLabels(labels map[string]string) (APIError, bool) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !validLabelKey(k) {
			return invalidLabels("invalid label key"), true
		}
		if v := labels[k]; v != "" && (len(v) > 63 || !labelName.MatchString(v)) {
			return invalidLabels("invalid label value"), true
		}
	}
	return APIError{}, false
}

func validLabelKey(k string) bool {
	name := k
	if i := strings.LastIndex(k, "/"); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if len(prefix) > 253 || !labelPrefix.MatchString(prefix) || prefix == "hetzner.cloud" {
			return false
		}
	}
	return len(name) <= 63 && labelName.MatchString(name)
}

func invalidLabels(why string) APIError {
	return APIError{Status: http.StatusBadRequest, Code: "invalid_input", Message: "invalid input in field 'labels'",
		Fields: []FieldError{{Name: "labels", Messages: []string{why}}}}
}

func (f *Fake) updateImage(w http.ResponseWriter, r *http.Request, id int64, _ time.Time) {
	im, ok := f.images[id]
	if !ok {
		notFound(w)
		return
	}
	var req schema.ImageUpdateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, APIError{Status: http.StatusBadRequest, Code: "json_error", Message: err.Error()})
		return
	}
	if im.schema.Type == "system" {
		writeError(w, APIError{Status: http.StatusForbidden, Code: "forbidden", Message: "system images can't be changed"})
		return
	}
	if req.Labels != nil {
		if e, bad := checkLabels(*req.Labels); bad {
			writeError(w, e)
			return
		}
	}
	if req.Description != nil {
		im.schema.Description = *req.Description
	}
	if req.Type != nil {
		if *req.Type != "snapshot" {
			writeError(w, invalidInput("type can only be changed to snapshot"))
			return
		}
		im.schema.Type = *req.Type
	}
	if req.Labels != nil {
		im.schema.Labels = maps.Clone(*req.Labels)
	}
	writeJSON(w, http.StatusOK, schema.ImageUpdateResponse{Image: im.schema})
}

func (f *Fake) deleteImage(w http.ResponseWriter, id int64) {
	im, ok := f.images[id]
	if !ok {
		notFound(w)
		return
	}
	switch {
	case im.schema.Type == "system":
		writeError(w, APIError{Status: http.StatusForbidden, Code: "forbidden", Message: "system images can't be deleted"})
		return
	case im.schema.Protection.Delete:
		writeError(w, APIError{Status: http.StatusLocked, Code: "protected", Message: fmt.Sprintf("image %d is protected against deletion", id)})
		return
	}
	delete(f.images, id)
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) changeImageProtection(w http.ResponseWriter, r *http.Request, id int64, now time.Time) {
	im, ok := f.images[id]
	if !ok {
		notFound(w)
		return
	}
	var req schema.ImageActionChangeProtectionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, APIError{Status: http.StatusBadRequest, Code: "json_error", Message: err.Error()})
		return
	}
	if req.Delete != nil {
		im.schema.Protection.Delete = *req.Delete
	}
	a := f.newAction("change_protection", now, schema.ActionResourceReference{ID: id, Type: "image"})
	// Protection changes take effect at once; only the action is reported
	// as running for ActionDelay (none when it is 0).
	f.settle(now)
	writeJSON(w, http.StatusCreated, schema.ImageActionChangeProtectionResponse{Action: a.schema})
}

// DefaultServerTypes is the fake's catalogue: shared x86 (cx, cpx), shared
// Arm (cax) and dedicated (ccx), with prices in EUR per location. As in the
// real list, a type's prices are an array with one entry per location, and
// the entries may differ: cpx31 costs more in ash than in Europe (the
// figures are the fake's own). Gross is net with VAT added (19% here, as
// for a German account); prebake reads net.
func DefaultServerTypes() []schema.ServerType {
	locs := DefaultLocations()
	price := func(net string) schema.Price {
		v, err := strconv.ParseFloat(net, 64)
		if err != nil {
			panic(err)
		}
		return schema.Price{Net: net, Gross: strconv.FormatFloat(v*1.19, 'f', 4, 64)}
	}
	// hourly is the net price per hour in every location but those of
	// except, which have their own.
	mk := func(id int64, name, cpuType, arch string, cores int, mem float32, disk int, hourly string, except map[string]string, only ...string) schema.ServerType {
		t := schema.ServerType{
			ID: id, Name: name, Description: name, Cores: cores, Memory: mem, Disk: disk,
			StorageType: "local", CPUType: cpuType, Architecture: arch, Category: "shared",
		}
		if cpuType == "dedicated" {
			t.Category = "dedicated"
		}
		for _, l := range locs {
			if len(only) > 0 && !slices.Contains(only, l.Name) {
				continue
			}
			t.Locations = append(t.Locations, schema.ServerTypeLocation{ID: l.ID, Name: l.Name, Available: true, Recommended: true})
			net := hourly
			if v, ok := except[l.Name]; ok {
				net = v
			}
			t.Prices = append(t.Prices, schema.PricingServerTypePrice{Location: l.Name, PriceHourly: price(net)})
		}
		return t
	}
	return []schema.ServerType{
		mk(104, "cx22", "shared", "x86", 2, 4, 40, "0.0060", nil),
		mk(105, "cx32", "shared", "x86", 4, 8, 80, "0.0113", nil),
		mk(7, "cpx31", "shared", "x86", 4, 8, 160, "0.0242", map[string]string{"ash": "0.0277"}),
		mk(45, "cax11", "shared", "arm", 2, 4, 40, "0.0060", nil, "fsn1", "nbg1", "hel1"),
		mk(96, "ccx13", "dedicated", "x86", 2, 8, 80, "0.0232", nil),
	}
}

// DefaultLocations are the fake's locations.
func DefaultLocations() []schema.Location {
	return []schema.Location{
		{ID: 1, Name: "fsn1", Description: "Falkenstein DC Park 1", Country: "DE", City: "Falkenstein", NetworkZone: "eu-central"},
		{ID: 2, Name: "nbg1", Description: "Nuremberg DC Park 1", Country: "DE", City: "Nuremberg", NetworkZone: "eu-central"},
		{ID: 3, Name: "hel1", Description: "Helsinki DC Park 1", Country: "FI", City: "Helsinki", NetworkZone: "eu-central"},
		{ID: 4, Name: "ash", Description: "Ashburn, VA", Country: "US", City: "Ashburn, VA", NetworkZone: "us-east"},
	}
}

// DefaultDatacenters are one datacenter per location.
func DefaultDatacenters() []schema.Datacenter {
	var out []schema.Datacenter
	types := DefaultServerTypes()
	for i, l := range DefaultLocations() {
		dc := schema.Datacenter{ID: int64(i + 1), Name: l.Name + "-dc" + strconv.Itoa(i+1), Description: l.Description, Location: l,
			ServerTypes: &schema.DatacenterServerTypes{}}
		for _, t := range types {
			if slices.ContainsFunc(t.Locations, func(tl schema.ServerTypeLocation) bool { return tl.Name == l.Name }) {
				dc.ServerTypes.Supported = append(dc.ServerTypes.Supported, t.ID)
				dc.ServerTypes.Available = append(dc.ServerTypes.Available, t.ID)
			}
		}
		out = append(out, dc)
	}
	return out
}

// DefaultImages are the system images, for x86 and arm.
func DefaultImages() []schema.Image {
	created := time.Date(2024, 4, 25, 0, 0, 0, 0, time.UTC)
	mk := func(id int64, name, flavor, version, arch string) schema.Image {
		return schema.Image{
			ID: id, Status: "available", Type: "system", Name: &name, Description: name,
			DiskSize: 5, Created: &created, OSFlavor: flavor, OSVersion: &version,
			Architecture: arch, RapidDeploy: true, Labels: map[string]string{},
		}
	}
	return []schema.Image{
		mk(161547269, "ubuntu-24.04", "ubuntu", "24.04", "x86"),
		mk(161547270, "ubuntu-24.04", "ubuntu", "24.04", "arm"),
		mk(114690387, "debian-12", "debian", "12", "x86"),
		mk(114690389, "debian-12", "debian", "12", "arm"),
	}
}
