package gcefake

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

type image struct {
	project string
	pb      *computepb.Image
	created time.Time
}

func (im *image) ref() string { return "projects/" + im.project + "/global/images/" + im.pb.GetName() }

// Image is the fake's view of an image of its project, for test
// assertions.
type Image struct {
	Name, Family string
	Labels       map[string]string
	// State is the deprecation state: "", DEPRECATED, OBSOLETE or DELETED.
	State      string
	Status     string // PENDING or READY
	SourceDisk string
	// SourceImage is the image the source disk was created from.
	SourceImage string
	Created     time.Time
}

// Images returns the images of the fake's project, by name.
func (f *Fake) Images() []Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	var out []Image
	for _, im := range f.sortedImages(f.opts.Project) {
		out = append(out, Image{Name: im.pb.GetName(), Family: im.pb.GetFamily(), Labels: maps.Clone(im.pb.GetLabels()),
			State: im.pb.GetDeprecated().GetState(), Status: im.pb.GetStatus(), SourceDisk: im.pb.GetSourceDisk(),
			SourceImage: im.pb.GetSourceImage(), Created: im.created})
	}
	return out
}

func (f *Fake) sortedImages(project string) []*image {
	var out []*image
	for _, im := range f.images {
		if im.project == project {
			out = append(out, im)
		}
	}
	slices.SortFunc(out, func(a, b *image) int { return cmp.Compare(a.pb.GetName(), b.pb.GetName()) })
	return out
}

// resolveImage finds the image a sourceImage names: a full URL,
// "projects/<p>/global/images/<name>", ".../images/family/<family>" or
// "global/images/<name>" in project. f.mu is held.
func (f *Fake) resolveImage(project, ref string) (*image, *apiError) {
	s := ref
	if i := strings.Index(s, "/projects/"); i >= 0 {
		s = s[i+1:]
	}
	p := project
	if rest, ok := strings.CutPrefix(s, "projects/"); ok {
		parts := strings.SplitN(rest, "/", 2)
		if len(parts) != 2 {
			return nil, badRequest("Invalid value for field 'sourceImage': '%s'.", ref)
		}
		p, s = parts[0], parts[1]
	}
	if fam, ok := strings.CutPrefix(s, "global/images/family/"); ok {
		im := f.latestOfFamily(p, fam)
		if im == nil {
			return nil, notFound("projects/" + p + "/global/images/family/" + fam)
		}
		return im, nil
	}
	name, ok := strings.CutPrefix(s, "global/images/")
	if !ok || strings.Contains(name, "/") {
		return nil, badRequest("Invalid value for field 'sourceImage': '%s'. The URL is malformed.", ref)
	}
	im := f.images[p+"/"+name]
	if im == nil {
		return nil, notFound("projects/" + p + "/global/images/" + name)
	}
	return im, nil
}

// latestOfFamily is the newest READY, non-deprecated image of the family.
// f.mu is held.
func (f *Fake) latestOfFamily(project, family string) *image {
	var best *image
	for _, im := range f.images {
		if im.project != project || im.pb.GetFamily() != family || im.pb.GetStatus() != "READY" {
			continue
		}
		if st := im.pb.GetDeprecated().GetState(); st != "" && st != "ACTIVE" {
			continue
		}
		if best == nil || im.created.After(best.created) || (im.created.Equal(best.created) && im.pb.GetName() > best.pb.GetName()) {
			best = im
		}
	}
	return best
}

var (
	labelKeyRE   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValueRE = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
)

// checkLabels applies GCE's label rules: at most 64, keys start with a
// lower-case letter, keys and values only [a-z0-9_-], at most 63 long.
func checkLabels(field string, labels map[string]string) *apiError {
	if len(labels) > 64 {
		return badRequest("Invalid value for field '%s': at most 64 labels are allowed.", field)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !labelKeyRE.MatchString(k) {
			return badRequest("Invalid value for field '%s': ''. Label key '%s' violates format constraints. The key must start with a lowercase character, can only contain lowercase letters, numeric characters, underscores and dashes. The key can be at most 63 characters long. International characters are allowed.", field, k)
		}
		if !labelValueRE.MatchString(labels[k]) {
			return badRequest("Invalid value for field '%s': ''. Label value '%s' violates format constraints. The value can only contain lowercase letters, numeric characters, underscores and dashes. The value can be at most 63 characters long. International characters are allowed.", field, labels[k])
		}
	}
	return nil
}

// fingerprint is a stable digest of labels, as labelFingerprint.
func fingerprint(labels map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(h, "%s=%s\n", k, labels[k])
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)[:8])
}

func imageFields(im *image) fields {
	return fields{name: im.pb.GetName(), status: im.pb.GetStatus(), family: im.pb.GetFamily(), labels: im.pb.GetLabels()}
}

func (f *Fake) listImages(project string, q map[string][]string) (proto.Message, *apiError) {
	flt, ferr := parseFilter(first(q["filter"]))
	if ferr != nil {
		return nil, ferr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	var items []*computepb.Image
	for _, im := range f.sortedImages(project) {
		if flt.matches(imageFields(im)) {
			items = append(items, proto.CloneOf(im.pb))
		}
	}
	from, to, next, err := page(q, len(items))
	if err != nil {
		return nil, err
	}
	res := &computepb.ImageList{Kind: proto.String("compute#imageList"), Items: items[from:to],
		Id: proto.String("projects/" + project + "/global/images"), SelfLink: proto.String(f.selfLink(project + "/global/images"))}
	if next != "" {
		res.NextPageToken = proto.String(next)
	}
	return res, nil
}

func (f *Fake) getImage(project, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	im := f.images[project+"/"+name]
	if im == nil {
		return nil, notFound("projects/" + project + "/global/images/" + name)
	}
	return proto.CloneOf(im.pb), nil
}

func (f *Fake) imageFromFamily(project, family string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	im := f.latestOfFamily(project, family)
	if im == nil {
		return nil, notFound("projects/" + project + "/global/images/family/" + family)
	}
	return proto.CloneOf(im.pb), nil
}

func (f *Fake) ownProject(project, perm string) *apiError {
	if project != f.opts.Project {
		return &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("Required '%s' permission for 'projects/%s'", perm, project)}
	}
	return nil
}

func (f *Fake) insertImage(project string, body *computepb.Image, ft *Fault, force bool) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if err := f.ownProject(project, "compute.images.create"); err != nil {
		return nil, err
	}
	name := body.GetName()
	if !nameRE.MatchString(name) {
		return nil, badRequest("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name)
	}
	if f.images[project+"/"+name] != nil {
		return nil, &apiError{http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/global/images/%s' already exists", project, name)}
	}
	if err := checkLabels("resource.labels", body.GetLabels()); err != nil {
		return nil, err
	}
	src := body.GetSourceDisk()
	if src == "" {
		return nil, badRequest("Invalid value for field 'resource.sourceDisk': ''. gcefake creates images from disks only.")
	}
	s := src
	if i := strings.Index(s, "/projects/"); i >= 0 {
		s = s[i+1:]
	}
	dp := project
	if rest, ok := strings.CutPrefix(s, "projects/"); ok {
		dp, s, _ = strings.Cut(rest, "/")
	}
	zd, ok := strings.CutPrefix(s, "zones/")
	zone, dname, ok2 := strings.Cut(zd, "/disks/")
	if !ok || !ok2 {
		return nil, badRequest("Invalid value for field 'resource.sourceDisk': '%s'. The URL is malformed.", src)
	}
	d := f.disks[dp+"/"+zone+"/"+dname]
	if d == nil {
		return nil, notFound("projects/" + dp + "/zones/" + zone + "/disks/" + dname)
	}
	// A disk attached to a stopped (TERMINATED) instance can be imaged; a
	// running one's only with forceCreate, as it may be inconsistent.
	if u := f.instances[d.user]; u != nil && u.power != powerTerminated && !force {
		return nil, &apiError{http.StatusBadRequest, "resourceInUseByAnotherResource",
			fmt.Sprintf("The disk resource 'projects/%s/zones/%s/disks/%s' is already being used by 'projects/%s/zones/%s/instances/%s'; stop the instance or set forceCreate", dp, zone, dname, dp, zone, lastSegment(d.user))}
	}
	now := f.opts.Now()
	pb := proto.CloneOf(body)
	id := f.newID()
	pb.Kind = proto.String("compute#image")
	pb.Id = proto.Uint64(id)
	pb.SelfLink = proto.String(f.selfLink(project + "/global/images/" + name))
	pb.CreationTimestamp = proto.String(timestamp(now))
	pb.Status = proto.String("PENDING")
	pb.SourceDisk = proto.String(f.selfLink(dp + "/zones/" + zone + "/disks/" + dname))
	pb.SourceImage = proto.String(f.selfLink(strings.TrimPrefix(d.sourceImage, "projects/")))
	pb.SourceType = proto.String("RAW")
	pb.DiskSizeGb = proto.Int64(10)
	pb.LabelFingerprint = proto.String(fingerprint(pb.GetLabels()))
	if src, err := f.resolveImage(project, d.sourceImage); err == nil {
		pb.Architecture = proto.String(src.pb.GetArchitecture())
	}
	im := &image{project: project, pb: pb, created: now}
	f.images[project+"/"+name] = im
	op := f.newOperation(project, "global", "insert", pb.GetSelfLink(), id, ft)
	op.onDone = func(failed bool) {
		if failed {
			delete(f.images, project+"/"+name)
			return
		}
		im.pb.Status = proto.String("READY")
	}
	f.settle()
	return proto.CloneOf(op.pb), nil
}

func (f *Fake) setImageLabels(project, name string, req *computepb.GlobalSetLabelsRequest) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if err := f.ownProject(project, "compute.images.setLabels"); err != nil {
		return nil, err
	}
	im := f.images[project+"/"+name]
	if im == nil {
		return nil, notFound("projects/" + project + "/global/images/" + name)
	}
	if req.GetLabelFingerprint() != im.pb.GetLabelFingerprint() {
		return nil, &apiError{http.StatusPreconditionFailed, "conditionNotMet",
			"Labels fingerprint either invalid or resource labels have changed"}
	}
	if err := checkLabels("labels", req.GetLabels()); err != nil {
		return nil, err
	}
	im.pb.Labels = maps.Clone(req.GetLabels())
	im.pb.LabelFingerprint = proto.String(fingerprint(im.pb.GetLabels()))
	op := f.newOperation(project, "global", "setLabels", im.pb.GetSelfLink(), im.pb.GetId(), nil)
	f.settle()
	return proto.CloneOf(op.pb), nil
}

var deprecationStates = []string{"", "ACTIVE", "DEPRECATED", "OBSOLETE", "DELETED"}

func (f *Fake) deprecateImage(project, name string, req *computepb.DeprecationStatus) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if err := f.ownProject(project, "compute.images.deprecate"); err != nil {
		return nil, err
	}
	im := f.images[project+"/"+name]
	if im == nil {
		return nil, notFound("projects/" + project + "/global/images/" + name)
	}
	if !slices.Contains(deprecationStates, req.GetState()) {
		return nil, badRequest("Invalid value for field 'deprecationStatus.state': '%s'. Use ACTIVE, DEPRECATED, OBSOLETE or DELETED.", req.GetState())
	}
	if st := req.GetState(); st == "" || st == "ACTIVE" {
		im.pb.Deprecated = nil
	} else {
		im.pb.Deprecated = proto.CloneOf(req)
	}
	op := f.newOperation(project, "global", "deprecate", im.pb.GetSelfLink(), im.pb.GetId(), nil)
	f.settle()
	return proto.CloneOf(op.pb), nil
}

func (f *Fake) deleteImage(project, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if err := f.ownProject(project, "compute.images.delete"); err != nil {
		return nil, err
	}
	im := f.images[project+"/"+name]
	if im == nil {
		return nil, notFound("projects/" + project + "/global/images/" + name)
	}
	delete(f.images, project+"/"+name)
	op := f.newOperation(project, "global", "delete", im.pb.GetSelfLink(), im.pb.GetId(), nil)
	f.settle()
	return proto.CloneOf(op.pb), nil
}
