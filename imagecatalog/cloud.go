package imagecatalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ImageGetter reads one image. Providers implement it next to ImageAPI; a
// missing image is an error wrapping ErrNotFound.
type ImageGetter interface {
	GetImage(ctx context.Context, id string) (CloudImage, error)
}

// PushLabels makes the cloud labels of the catalog's images of (provider,
// location) match the catalog: DesiredLabels replace the image's prebake.dev/
// labels, and the user's other labels stay. It also turns delete protection
// on for every image a channel points to now, so a freshly promoted image is
// protected before gc first runs (gc alone turns protection off). It changes
// only images whose labels or protection differ, and returns their ids. Call
// it after every change of the catalog, so that sync can rebuild it.
func PushLabels(ctx context.Context, api ImageAPI, c Catalog, provider, location string) (changed []string, err error) {
	cloud, err := api.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("push labels: list images: %w", err)
	}
	byID := map[string]CloudImage{}
	for _, ci := range cloud {
		byID[ci.ID] = ci
	}
	pointed := map[string]bool{}
	for _, ch := range c.Channels {
		pointed[ch.Image] = true
	}
	var errs []error
	for _, im := range c.Images {
		if im.Provider != provider || im.Location != location {
			continue
		}
		ci, ok := byID[im.ID]
		if !ok {
			errs = append(errs, fmt.Errorf("image %s (%s) is in the catalog but not in the cloud: run `prebake images sync` to drop it", im.ID, im.Name))
			continue
		}
		want, err := DesiredLabels(c, im.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		merged := mergeLabels(ci.Labels, want)
		did := false
		if !maps.Equal(merged, ci.Labels) {
			if err := api.SetLabels(ctx, im.ID, merged); err != nil {
				errs = append(errs, fmt.Errorf("image %s: set labels: %w", im.ID, err))
				continue
			}
			slog.InfoContext(ctx, "image labels updated", "image", im.ID)
			did = true
		}
		if pointed[im.ID] && !ci.Protected {
			if err := api.SetDeleteProtection(ctx, im.ID, true); err != nil {
				errs = append(errs, fmt.Errorf("image %s: protect: %w", im.ID, err))
				continue
			}
			did = true
		}
		if did {
			changed = append(changed, im.ID)
		}
	}
	return changed, errors.Join(errs...)
}

// Sync rebuilds the catalog of (provider, location) from the cloud: every
// image with a prebake.dev/image-name label, and the channels their labels
// record (see FromCloud for what is lost).
func Sync(ctx context.Context, api ImageAPI, provider, location string, now time.Time) (Catalog, []error) {
	cloud, err := api.ListImages(ctx, nil)
	if err != nil {
		return Catalog{}, []error{fmt.Errorf("sync: list images: %w", err)}
	}
	var ours []CloudImage
	for _, ci := range cloud {
		if ci.Labels[LabelName] != "" {
			ours = append(ours, ci)
		}
	}
	return FromCloud(ours, provider, location, now)
}

// Replace puts the images and channels of (provider, location) from fresh
// into c, dropping c's own for it: sync's result merged into a catalog that
// may hold other providers and locations.
func Replace(c, fresh Catalog, provider, location string) (Catalog, error) {
	out := Catalog{}
	for _, im := range c.Images {
		if im.Provider != provider || im.Location != location {
			out.Images = append(out.Images, im)
		}
	}
	for _, ch := range c.Channels {
		if ch.Provider != provider || ch.Location != location {
			out.Channels = append(out.Channels, ch)
		}
	}
	fresh = fresh.Clone()
	// Keep rollback records, which labels can't carry, for channels that
	// still exist.
	for i, ch := range fresh.Channels {
		if old, ok := c.Channel(ch.Name, ch.Key); ok {
			fresh.Channels[i].RolledBack = old.RolledBack
		}
	}
	// Keep the container images, which labels can't carry either, for
	// images that still exist: an image never changes.
	for i, im := range fresh.Images {
		if old, ok := c.Image(im.ID); ok && len(im.Manifest.ContainerImages) == 0 {
			fresh.Images[i].Manifest.ContainerImages = cloneMap(old.Manifest.ContainerImages)
		}
	}
	out.Images = append(out.Images, fresh.Images...)
	out.Channels = append(out.Channels, fresh.Channels...)
	out = out.Clone()
	out.sort()
	return out, out.Validate()
}

// PublishRequest says how to publish an image that exists in the cloud.
// Fields left empty come from the image's labels.
type PublishRequest struct {
	ID, Provider, Location string
	Name                   string
	InputsHash             string
	Manifest               *Manifest
	// Verified, when set, records that the image passed verification
	// outside prebake's build (who checked it goes in the reason).
	Verified *Event
}

// ImageForPublish is the catalog image for ci: the request's fields, then
// the image's labels. It refuses when the result is not a valid image (no
// name, hash or manifest).
func ImageForPublish(ci CloudImage, req PublishRequest) (Image, error) {
	im := Image{ID: ci.ID, Provider: req.Provider, Location: req.Location, Created: ci.Created.UTC(),
		Name: ci.Labels[LabelName], InputsHash: ci.Labels[LabelInputsHash]}
	if m, ok, err := ManifestFromLabels(ci.Labels); err == nil && ok {
		im.Manifest = m
	}
	if ci.Labels[LabelVerified] == "true" {
		im.Verified = &Event{At: im.Created, Reason: "from cloud labels"}
	}
	if req.Name != "" {
		im.Name = req.Name
	}
	if req.InputsHash != "" {
		im.InputsHash = req.InputsHash
	}
	if req.Manifest != nil {
		im.Manifest = *req.Manifest
	}
	if req.Verified != nil {
		im.Verified = req.Verified
	}
	var errs []error
	var family Family
	if im.Name == "" {
		errs = append(errs, fmt.Errorf("no name: give --name or label the image %s", LabelName))
	} else if n, err := ParseName(im.Name); err != nil {
		errs = append(errs, err)
	} else {
		family = Family(n.OS)
	}
	if im.InputsHash == "" {
		errs = append(errs, fmt.Errorf("no inputs hash: give --inputs-hash or label the image %s", LabelInputsHash))
	}
	if err := im.Manifest.ValidateFor(family); err != nil {
		errs = append(errs, fmt.Errorf("%w (give --manifest FILE or label the image %s*)", err, labelPkgPrefix))
	}
	if err := errors.Join(errs...); err != nil {
		return Image{}, fmt.Errorf("publish image %s: %w", ci.ID, err)
	}
	return im, nil
}

// ImageFromCloud rebuilds a catalog image from its cloud labels, for sync.
// provider and location are the catalog's names for where it lives.
func ImageFromCloud(ci CloudImage, provider, location string) (Image, error) {
	l := ci.Labels
	im := Image{ID: ci.ID, Name: l[LabelName], Provider: provider, Location: location, InputsHash: l[LabelInputsHash], Created: ci.Created.UTC()}
	m, ok, err := ManifestFromLabels(l)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ci.ID, err)
	}
	if !ok {
		return Image{}, fmt.Errorf("image %s (%s) has no %s* labels: publish it again with a manifest", ci.ID, im.Name, labelPkgPrefix)
	}
	im.Manifest = m
	if l[LabelVerified] == "true" {
		im.Verified = &Event{At: im.Created, Reason: "from cloud labels"}
	}
	if l[LabelDeprecated] == "true" {
		im.Deprecated = &Event{At: im.Created, Reason: "from cloud labels"}
	}
	return im, nil
}

// FromCloud rebuilds a catalog from the labels of every image the provider
// lists with a prebake.dev/image-name label: the images and, from channel
// labels, the channels with their history. What labels can't hold is lost:
// rollback records, reasons and exact times (the image's creation time
// stands in). Images that can't be read are returned as errors next to the
// rest, so one bad image doesn't hide the others.
func FromCloud(ims []CloudImage, provider, location string, now time.Time) (Catalog, []error) {
	var c Catalog
	var errs []error
	type pos struct {
		name string
		key  Key
	}
	steps := map[pos]map[int]string{}
	for _, ci := range ims {
		im, err := ImageFromCloud(ci, provider, location)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next, err := Publish(c, im)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c = next
		k, _ := im.Key()
		for lk, lv := range ci.Labels {
			name, found := strings.CutPrefix(lk, labelChannelPrefix)
			if !found {
				continue
			}
			step := 0
			if lv != channelCurrent {
				n, err := strconv.Atoi(strings.TrimPrefix(lv, channelHistoryPrefix))
				if !strings.HasPrefix(lv, channelHistoryPrefix) || err != nil || n < 1 {
					errs = append(errs, fmt.Errorf("image %s: label %s=%q: want %q or %sN", ci.ID, lk, lv, channelCurrent, channelHistoryPrefix))
					continue
				}
				step = n
			}
			p := pos{name, k}
			if steps[p] == nil {
				steps[p] = map[int]string{}
			}
			if other, dup := steps[p][step]; dup {
				errs = append(errs, fmt.Errorf("channel %s (%s): images %s and %s both claim step %d; fix one's %s label", name, k, other, ci.ID, step, lk))
				continue
			}
			steps[p][step] = ci.ID
		}
	}
	for p, byStep := range steps {
		cur, ok := byStep[0]
		if !ok {
			errs = append(errs, fmt.Errorf("channel %s (%s): images carry history labels but none is current", p.name, p.key))
			continue
		}
		ch := Channel{Name: p.name, Key: p.key, Image: cur}
		for _, s := range slices.Sorted(maps.Keys(byStep)) {
			if s > 0 {
				ch.History = append(ch.History, Entry{Image: byStep[s], At: now})
			}
		}
		c.Channels = append(c.Channels, ch)
	}
	c.sort()
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errs
}
