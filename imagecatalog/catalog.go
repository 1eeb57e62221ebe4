package imagecatalog

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Errors that callers tell apart with errors.Is.
var (
	ErrNotFound   = errors.New("not found")
	ErrAmbiguous  = errors.New("ambiguous")
	ErrDeprecated = errors.New("deprecated")
	ErrUnverified = errors.New("not verified")
	ErrNoHistory  = errors.New("no history to roll back to")
	ErrExists     = errors.New("already exists")
	ErrConflict   = errors.New("conflict")
)

// Well-known channels; users may define others.
const (
	ChannelCandidate = "candidate"
	ChannelStable    = "stable"
)

// DefaultKeepHistory is how many of a channel's previous images gc keeps
// (N-2 with the current one: two steps of rollback).
const DefaultKeepHistory = 2

var (
	channelName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	inputsHash  = regexp.MustCompile(fmt.Sprintf(`^[0-9a-f]{%d}$`, InputsHashLen))
)

// Key says which images a channel may point to. OS is the release, as in
// the name: ubuntu-2404, so moving a group to another OS release is an
// explicit change of its key, like moving to another k8s minor. Location is
// "" where the provider's images are global (Hetzner snapshots).
type Key struct {
	OS       string `yaml:"os" json:"os"`
	K8sMinor string `yaml:"k8sMinor" json:"k8sMinor"`
	Arch     string `yaml:"arch" json:"arch"`
	Provider string `yaml:"provider" json:"provider"`
	Location string `yaml:"location,omitempty" json:"location,omitempty"`
}

func (k Key) String() string {
	loc := k.Location
	if loc == "" {
		loc = "global"
	}
	return fmt.Sprintf("os=%s k8s=%s arch=%s provider=%s location=%s", k.OS, k.K8sMinor, k.Arch, k.Provider, loc)
}

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Location, b.Location),
		cmp.Compare(a.OS, b.OS), cmp.Compare(a.K8sMinor, b.K8sMinor), cmp.Compare(a.Arch, b.Arch))
}

// Image is one published, immutable image.
type Image struct {
	// ID is the provider's immutable id: the numeric id on Hetzner, the name
	// on GCE. It is what a channel points to and what instances record.
	ID         string    `yaml:"id" json:"id"`
	Name       string    `yaml:"name" json:"name"`
	Provider   string    `yaml:"provider" json:"provider"`
	Location   string    `yaml:"location,omitempty" json:"location,omitempty"`
	InputsHash string    `yaml:"inputsHash" json:"inputsHash"`
	Created    time.Time `yaml:"created" json:"created"`
	Manifest   Manifest  `yaml:"manifest" json:"manifest"`
	// Verified is set when the build's verification passed; promote refuses
	// an image without it.
	Verified   *Event `yaml:"verified,omitempty" json:"verified,omitempty"`
	Deprecated *Event `yaml:"deprecated,omitempty" json:"deprecated,omitempty"`
}

// Event is a dated fact with an optional reason or report.
type Event struct {
	At     time.Time `yaml:"at" json:"at"`
	Reason string    `yaml:"reason,omitempty" json:"reason,omitempty"`
}

// Key is the channel key the image belongs under, from its name.
func (im Image) Key() (Key, error) {
	n, err := ParseName(im.Name)
	if err != nil {
		return Key{}, err
	}
	return Key{OS: n.OSRelease(), K8sMinor: n.K8s.MinorString(), Arch: n.Arch, Provider: im.Provider, Location: im.Location}, nil
}

// Channel is a named pointer for one Key, with the images it pointed to before.
type Channel struct {
	Name string `yaml:"name" json:"name"`
	Key  `yaml:",inline" json:",inline"`
	// Image is the id the channel points to now.
	Image string `yaml:"image" json:"image"`
	// History holds the previous pointers, newest first. Rollback pops it.
	History []Entry `yaml:"history,omitempty" json:"history,omitempty"`
	// RolledBack records each image a rollback moved away from, and why.
	RolledBack []Entry `yaml:"rolledBack,omitempty" json:"rolledBack,omitempty"`
}

// Entry is one image a channel pointed to. At is when the channel moved off
// it (by promote, in History, or by rollback, in RolledBack).
type Entry struct {
	Image  string    `yaml:"image" json:"image"`
	At     time.Time `yaml:"at" json:"at"`
	Reason string    `yaml:"reason,omitempty" json:"reason,omitempty"`
}

// Catalog is the whole model. Operations take a Catalog and return a new
// one; they never modify their argument.
type Catalog struct {
	Images   []Image   `yaml:"images" json:"images"`
	Channels []Channel `yaml:"channels" json:"channels"`
}

// Clone returns a deep copy.
func (c Catalog) Clone() Catalog {
	out := Catalog{Images: slices.Clone(c.Images), Channels: slices.Clone(c.Channels)}
	for i := range out.Images {
		im := &out.Images[i]
		im.Manifest.Components = cloneMap(im.Manifest.Components)
		im.Manifest.Sysctls = cloneMap(im.Manifest.Sysctls)
		im.Manifest.Modules = slices.Clone(im.Manifest.Modules)
		im.Manifest.ContainerImages = cloneMap(im.Manifest.ContainerImages)
		if im.Verified != nil {
			v := *im.Verified
			im.Verified = &v
		}
		if im.Deprecated != nil {
			d := *im.Deprecated
			im.Deprecated = &d
		}
	}
	for i := range out.Channels {
		out.Channels[i].History = slices.Clone(out.Channels[i].History)
		out.Channels[i].RolledBack = slices.Clone(out.Channels[i].RolledBack)
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Image returns the image with the id, if the catalog has it.
func (c Catalog) Image(id string) (Image, bool) {
	i := c.imageIndex(id)
	if i < 0 {
		return Image{}, false
	}
	return c.Images[i], true
}

func (c Catalog) imageIndex(id string) int {
	return slices.IndexFunc(c.Images, func(im Image) bool { return im.ID == id })
}

func (c Catalog) channelIndex(name string, k Key) int {
	return slices.IndexFunc(c.Channels, func(ch Channel) bool { return ch.Name == name && ch.Key == k })
}

// Channel returns the channel with the name and key, if there is one.
func (c Catalog) Channel(name string, k Key) (Channel, bool) {
	i := c.channelIndex(name, k)
	if i < 0 {
		return Channel{}, false
	}
	return c.Channels[i], true
}

// FindByInputs returns the newest live (not deprecated) image built from the
// inputs hash for the key, so a build of the same inputs can stop early.
// (There are several when refresh rebuilt an image past its max age.)
func (c Catalog) FindByInputs(k Key, hash string) (Image, bool) {
	var found Image
	ok := false
	for _, im := range c.Images {
		if ik, err := im.Key(); err == nil && ik == k && im.InputsHash == hash && im.Deprecated == nil &&
			(!ok || im.Created.After(found.Created)) {
			found, ok = im, true
		}
	}
	return found, ok
}

// sort puts images and channels in the document's order: images by key, then
// build time and id; channels by key, then name.
func (c *Catalog) sort() {
	slices.SortStableFunc(c.Images, func(a, b Image) int {
		ak, _ := a.Key()
		bk, _ := b.Key()
		return cmp.Or(compareKeys(ak, bk), a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	slices.SortStableFunc(c.Channels, func(a, b Channel) int {
		return cmp.Or(compareKeys(a.Key, b.Key), cmp.Compare(a.Name, b.Name))
	})
}

// Validate checks the catalog's own consistency: valid names and manifests,
// unique ids and names, channels that point at known images of their key.
func (c Catalog) Validate() error {
	var errs []error
	ids := map[string]bool{}
	names := map[string]string{}
	for _, im := range c.Images {
		where := fmt.Sprintf("image %q", im.ID)
		switch {
		case im.ID == "":
			errs = append(errs, fmt.Errorf("image %q: no id", im.Name))
			continue
		case ids[im.ID]:
			errs = append(errs, fmt.Errorf("%s: %w: the id appears twice", where, ErrExists))
			continue
		case im.Provider == "":
			errs = append(errs, fmt.Errorf("%s: no provider", where))
		case !inputsHash.MatchString(im.InputsHash):
			errs = append(errs, fmt.Errorf("%s: inputs hash %q is not %d lower-case hex digits (see InputsHash)", where, im.InputsHash, InputsHashLen))
		}
		ids[im.ID] = true
		n, err := ParseName(im.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		nk := im.Provider + "/" + im.Location + "/" + im.Name
		if other, dup := names[nk]; dup {
			errs = append(errs, fmt.Errorf("%s: %w: name %s is also image %q; names are immutable and never reused", where, ErrExists, im.Name, other))
		}
		names[nk] = im.ID
		if err := im.Manifest.ValidateFor(Family(n.OS)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	type chKey struct {
		name string
		k    Key
	}
	seen := map[chKey]bool{}
	for _, ch := range c.Channels {
		where := fmt.Sprintf("channel %s (%s)", ch.Name, ch.Key)
		if !channelName.MatchString(ch.Name) {
			errs = append(errs, fmt.Errorf("%s: name must be lower-case letters, digits and dashes", where))
		}
		if seen[chKey{ch.Name, ch.Key}] {
			errs = append(errs, fmt.Errorf("%s: appears twice", where))
		}
		seen[chKey{ch.Name, ch.Key}] = true
		if ch.Image == "" {
			continue
		}
		im, ok := c.Image(ch.Image)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: points to image %q, which the catalog lacks", where, ch.Image))
			continue
		}
		if k, err := im.Key(); err == nil && k != ch.Key {
			errs = append(errs, fmt.Errorf("%s: points to image %q of another key (%s)", where, im.ID, k))
		}
	}
	return errors.Join(errs...)
}

// Publish adds an image. It does not point any channel at it.
func Publish(c Catalog, im Image) (Catalog, error) {
	if _, ok := c.Image(im.ID); ok {
		return c, fmt.Errorf("publish %q: %w", im.ID, ErrExists)
	}
	out := c.Clone()
	out.Images = append(out.Images, im)
	if err := out.Validate(); err != nil {
		return c, fmt.Errorf("publish %q: %w", im.ID, err)
	}
	out.sort()
	return out, nil
}

// Promote points the channel for the image's key at the image, pushing the
// previous pointer onto the history. It refuses an image that has not passed
// verification or is deprecated. Promoting the current image changes nothing.
func Promote(c Catalog, channel, id string, now time.Time) (Catalog, bool, error) {
	im, ok := c.Image(id)
	if !ok {
		return c, false, fmt.Errorf("promote %q to %s: image %w in the catalog", id, channel, ErrNotFound)
	}
	switch {
	case !channelName.MatchString(channel):
		return c, false, fmt.Errorf("promote %q: channel name %q must be lower-case letters, digits and dashes", id, channel)
	case im.Verified == nil:
		return c, false, fmt.Errorf("promote %s (%s) to %s: %w: build and verify it first", id, im.Name, channel, ErrUnverified)
	case im.Deprecated != nil:
		return c, false, fmt.Errorf("promote %s (%s) to %s: %w since %s (%s)", id, im.Name, channel, ErrDeprecated,
			im.Deprecated.At.Format(time.RFC3339), im.Deprecated.Reason)
	}
	k, err := im.Key()
	if err != nil {
		return c, false, fmt.Errorf("promote %q: %w", id, err)
	}
	out := c.Clone()
	i := out.channelIndex(channel, k)
	if i < 0 {
		out.Channels = append(out.Channels, Channel{Name: channel, Key: k, Image: id})
		out.sort()
		return out, true, nil
	}
	ch := &out.Channels[i]
	if ch.Image == id {
		return c, false, nil
	}
	if ch.Image != "" {
		ch.History = append([]Entry{{Image: ch.Image, At: now}}, ch.History...)
	}
	ch.Image = id
	return out, true, nil
}

// Rollback moves the channel back one step in its history and records the
// image it moved away from with the reason.
func Rollback(c Catalog, channel string, k Key, reason string, now time.Time) (Catalog, error) {
	where := fmt.Sprintf("rollback %s (%s)", channel, k)
	if strings.TrimSpace(reason) == "" {
		return c, fmt.Errorf("%s: give a reason; it is recorded in the catalog", where)
	}
	i := c.channelIndex(channel, k)
	if i < 0 {
		return c, fmt.Errorf("%s: channel %w", where, ErrNotFound)
	}
	ch := c.Channels[i]
	if len(ch.History) == 0 {
		return c, fmt.Errorf("%s: %w (it points to %q)", where, ErrNoHistory, ch.Image)
	}
	prev := ch.History[0].Image
	im, ok := c.Image(prev)
	switch {
	case !ok:
		return c, fmt.Errorf("%s: previous image %q is %w in the catalog (deleted?)", where, prev, ErrNotFound)
	case im.Deprecated != nil:
		return c, fmt.Errorf("%s: previous image %s (%s) is %w: %s", where, prev, im.Name, ErrDeprecated, im.Deprecated.Reason)
	}
	out := c.Clone()
	och := &out.Channels[i]
	och.RolledBack = append(och.RolledBack, Entry{Image: ch.Image, At: now, Reason: reason})
	och.Image = prev
	och.History = och.History[1:]
	return out, nil
}

// Deprecate marks an image so that nothing new resolves to or is promoted to
// it. It is irreversible, like GCE's. A channel that points to it makes
// Resolve fail with ErrDeprecated until it is rolled back or promoted past.
func Deprecate(c Catalog, id, reason string, now time.Time) (Catalog, bool, error) {
	i := c.imageIndex(id)
	if i < 0 {
		return c, false, fmt.Errorf("deprecate %q: image %w in the catalog", id, ErrNotFound)
	}
	if c.Images[i].Deprecated != nil {
		return c, false, nil
	}
	out := c.Clone()
	out.Images[i].Deprecated = &Event{At: now, Reason: reason}
	return out, true, nil
}

// Any, as a Query's key field, matches every value. An empty field matches
// only an empty one (Location is empty for global images).
const Any = "*"

// Query selects channels for Resolve: the channel name and a key whose
// fields may be Any.
type Query struct {
	Channel string
	Key
}

func (q Query) matches(ch Channel) bool {
	f := func(want, got string) bool { return want == Any || want == got }
	return ch.Name == q.Channel && f(q.OS, ch.OS) && f(q.K8sMinor, ch.K8sMinor) && f(q.Arch, ch.Arch) &&
		f(q.Provider, ch.Provider) && f(q.Location, ch.Location)
}

// ResolveError says why a query did not resolve to exactly one image.
type ResolveError struct {
	Query      Query
	Reason     error    // ErrNotFound, ErrAmbiguous or ErrDeprecated
	Candidates []string // ambiguous: each matching channel's image, "id (name) via key"
	Detail     string
}

func (e *ResolveError) Error() string {
	msg := fmt.Sprintf("resolve channel %s (%s): %v", e.Query.Channel, e.Query.Key, e.Reason)
	if len(e.Candidates) > 0 {
		msg += ": " + strings.Join(e.Candidates, " and ")
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *ResolveError) Unwrap() error { return e.Reason }

// Resolve returns exactly one image id for the query, or a *ResolveError
// that says why not. It never picks "the newest": a match on two channels
// with different images is an error naming both.
func Resolve(c Catalog, q Query) (string, error) {
	id, _, err := ResolvePreferring(c, q, nil)
	return id, err
}

// ResolvePreferring is Resolve for a group that expects container images
// (image.containerImages). The channels' pointers decide as they do for
// Resolve; the list only breaks a tie that Resolve refuses: when the query
// matches channels that point to different images and exactly one of those
// images (not deprecated) holds every listed image, it is the one. missing
// lists the references the image returned does not hold (see
// Manifest.MissingContainerImages): it is booted all the same, and the
// kubelet pulls them.
func ResolvePreferring(c Catalog, q Query, containerImages []string) (id string, missing []string, err error) {
	var hits []Channel
	for _, ch := range c.Channels {
		if q.matches(ch) && ch.Image != "" {
			hits = append(hits, ch)
		}
	}
	fail := func(reason error, detail string, cands ...string) (string, []string, error) {
		return "", nil, &ResolveError{Query: q, Reason: reason, Candidates: cands, Detail: detail}
	}
	if len(hits) == 0 {
		return fail(ErrNotFound, "no channel with an image matches; publish and promote one (groups fall back to runtime install)")
	}
	id = hits[0].Image
	for _, h := range hits[1:] {
		if h.Image == id {
			continue
		}
		var cands []string
		holders := map[string]bool{}
		for _, h := range hits {
			name := "?"
			im, ok := c.Image(h.Image)
			if ok {
				name = im.Name
				if len(containerImages) > 0 && im.Deprecated == nil && len(im.Manifest.MissingContainerImages(containerImages)) == 0 {
					holders[h.Image] = true
				}
			}
			cands = append(cands, fmt.Sprintf("%s (%s) via %s", h.Image, name, h.Key))
		}
		if len(holders) == 1 {
			for held := range holders {
				return held, nil, nil
			}
		}
		detail := "set the fields that tell them apart"
		if len(containerImages) > 0 {
			detail = fmt.Sprintf("%d of them hold every image of the group's containerImages, so those do not tell them apart either; %s", len(holders), detail)
		}
		return fail(ErrAmbiguous, detail, cands...)
	}
	im, ok := c.Image(id)
	switch {
	case !ok:
		return fail(ErrNotFound, fmt.Sprintf("the channel points to image %q, which the catalog lacks", id))
	case im.Deprecated != nil:
		return fail(ErrDeprecated, fmt.Sprintf("image %s (%s) since %s: %s; roll the channel back or promote another image",
			id, im.Name, im.Deprecated.At.Format(time.RFC3339), im.Deprecated.Reason))
	}
	return id, im.Manifest.MissingContainerImages(containerImages), nil
}

// GCOptions tune PlanGC.
type GCOptions struct {
	// KeepHistory is how many of each channel's previous images to keep.
	KeepHistory int
	// InUse holds the ids of images live instances booted from, as the
	// provider's List reports them.
	InUse map[string]bool
}

// Kept is an image gc keeps and every reason it does.
type Kept struct {
	ID      string   `json:"id" yaml:"id"`
	Reasons []string `json:"reasons" yaml:"reasons"`
}

// GCPlan is what gc will do. Protect and Unprotect set the provider's delete
// protection where it has one: on for channel images (current and history
// window), off for everything else, before Delete runs.
type GCPlan struct {
	Keep      []Kept   `json:"keep" yaml:"keep"`
	Delete    []string `json:"delete" yaml:"delete"`
	Protect   []string `json:"protect" yaml:"protect"`
	Unprotect []string `json:"unprotect" yaml:"unprotect"`
}

// PlanGC decides which catalog images to delete. It never deletes an image a
// channel points to, one in the last KeepHistory of a channel's history, or
// one in opts.InUse. Images the catalog does not know are not its business.
func PlanGC(c Catalog, opts GCOptions) (GCPlan, error) {
	if opts.KeepHistory < 0 {
		return GCPlan{}, fmt.Errorf("gc: keep-history %d must be 0 or more", opts.KeepHistory)
	}
	reasons := map[string][]string{}
	channelImages := map[string]bool{}
	for _, ch := range c.Channels {
		if ch.Image != "" {
			reasons[ch.Image] = append(reasons[ch.Image], fmt.Sprintf("channel %s points to it (%s)", ch.Name, ch.Key))
			channelImages[ch.Image] = true
		}
		for i, h := range ch.History {
			if i >= opts.KeepHistory {
				break
			}
			reasons[h.Image] = append(reasons[h.Image], fmt.Sprintf("step %d of channel %s's history (%s)", i+1, ch.Name, ch.Key))
			channelImages[h.Image] = true
		}
	}
	for id := range opts.InUse {
		reasons[id] = append(reasons[id], "a live instance uses it")
	}
	var p GCPlan
	for _, im := range c.Images {
		if r := reasons[im.ID]; len(r) > 0 {
			p.Keep = append(p.Keep, Kept{ID: im.ID, Reasons: r})
		} else {
			p.Delete = append(p.Delete, im.ID)
		}
		if channelImages[im.ID] {
			p.Protect = append(p.Protect, im.ID)
		} else {
			p.Unprotect = append(p.Unprotect, im.ID)
		}
	}
	return p, nil
}

// Forget removes deleted images from the catalog and from channel histories,
// so a rollback can never move to an image that is gone. Rollback records
// stay as an audit trail. It refuses to forget an image a channel points to.
func Forget(c Catalog, ids []string) (Catalog, error) {
	gone := map[string]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	for _, ch := range c.Channels {
		if gone[ch.Image] {
			return c, fmt.Errorf("forget %q: channel %s (%s) points to it", ch.Image, ch.Name, ch.Key)
		}
	}
	out := c.Clone()
	out.Images = slices.DeleteFunc(out.Images, func(im Image) bool { return gone[im.ID] })
	for i := range out.Channels {
		out.Channels[i].History = slices.DeleteFunc(out.Channels[i].History, func(e Entry) bool { return gone[e.Image] })
	}
	return out, nil
}

// MatchChannels returns the channels the query selects, in document order.
func MatchChannels(c Catalog, q Query) []Channel {
	var out []Channel
	for _, ch := range c.Channels {
		if q.matches(ch) {
			out = append(out, ch)
		}
	}
	return out
}

// PointersTo lists "channel (key)" for every channel that points to the
// image now, and "channel history" for those that keep it in their history.
func PointersTo(c Catalog, id string) []string {
	var out []string
	for _, ch := range c.Channels {
		if ch.Image == id {
			out = append(out, ch.Name)
		}
		for i, h := range ch.History {
			if h.Image == id {
				out = append(out, fmt.Sprintf("%s~%d", ch.Name, i+1))
			}
		}
	}
	return out
}
