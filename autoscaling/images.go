package autoscaling

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// CatalogSource loads the image catalog document (a file or a ConfigMap).
// The core reloads it on every sync, so a promote or rollback reaches new
// machines within one refresh interval without a restart.
type CatalogSource interface {
	LoadCatalog(ctx context.Context) (imagecatalog.Catalog, error)
}

// EventSink reports facts a cluster operator should see next to the Node,
// such as a group falling back to runtime install. Calls come from a
// goroutine the core owns, never from a CA request.
type EventSink interface {
	ImageFallback(ctx context.Context, f Fallback)
	// ImageMissingContainerImages: a machine boots an image that lacks
	// some of its group's image.containerImages.
	ImageMissingContainerImages(ctx context.Context, m MissingImages)
}

// Fallback reasons, the values of the reason label of
// prebake_image_fallback_total. They are stable.
const (
	// FallbackNoImageAPI: the group names a channel but its provider can't
	// boot custom images (providers.Provider.Images is nil).
	FallbackNoImageAPI = "provider_without_images"
	// FallbackNoCatalog: the group names a channel but no catalog is
	// configured, or it has not loaded.
	FallbackNoCatalog = "catalog_unavailable"
	// FallbackNotFound, FallbackAmbiguous and FallbackDeprecated mirror
	// imagecatalog's resolve errors.
	FallbackNotFound   = "no_image"
	FallbackAmbiguous  = "ambiguous"
	FallbackDeprecated = "deprecated"
)

// Fallback is one machine that takes the runtime-install path although its
// group names an image channel.
type Fallback struct {
	Group   string
	Machine string
	Channel string
	Reason  string // one of the Fallback* constants
	Message string // why, in words: the resolve error
}

// MissingImages is one machine that boots a catalog image lacking some of
// its group's image.containerImages: no image the channel could resolve to
// holds them all. The machine boots that image all the same, and its
// kubelet pulls the missing images as on any node.
type MissingImages struct {
	Group   string
	Machine string
	Channel string
	Image   string   // the catalog image id the machine boots
	Missing []string // the group's references the image does not hold, in the group's order
}

// catalogState is the catalog as last loaded; it is replaced whole.
type catalogState struct {
	catalog imagecatalog.Catalog
	err     error // the last load's error; catalog is then the one before
	loaded  bool  // a load succeeded at least once
	// refused is Options.CheckCatalog's answer for catalog: by group ID, why
	// the group's new machines must not be created against it.
	refused map[string]error
}

// catalogHolder keeps the current catalog for lock-free reads under c.mu.
type catalogHolder struct {
	p atomic.Pointer[catalogState]
}

func (h *catalogHolder) get() *catalogState {
	if s := h.p.Load(); s != nil {
		return s
	}
	return &catalogState{}
}

// reloadCatalog loads the catalog once. A failed load keeps the previous
// catalog: a flaky ConfigMap read must not send every group to runtime
// install.
func (c *Core) reloadCatalog(ctx context.Context) {
	src := c.opts.Catalog
	if src == nil {
		return
	}
	cat, err := src.LoadCatalog(ctx)
	prev := c.catalog.get()
	if err != nil {
		c.metrics.catalogErrors.Inc()
		c.log.Warn("image catalog: load failed; keeping the last good one", "err", err, "loaded", prev.loaded)
		c.catalog.p.Store(&catalogState{catalog: prev.catalog, err: err, loaded: prev.loaded, refused: prev.refused})
		return
	}
	var refused map[string]error
	if c.opts.CheckCatalog != nil {
		refused = c.opts.CheckCatalog(cat)
	}
	for _, id := range c.groupOrder {
		switch now, before := refused[id], prev.refused[id]; {
		case now != nil && (before == nil || now.Error() != before.Error()):
			c.log.Error("image catalog: the group's new machines are refused until the catalog or the group's image.os changes", "group", id, "err", now)
		case now == nil && before != nil:
			c.log.Info("image catalog: the group's machines are no longer refused", "group", id)
		}
	}
	c.catalog.p.Store(&catalogState{catalog: cat, loaded: true, refused: refused})
}

// CodeMixedRenderers is the creation error code of a machine refused because
// Options.CheckCatalog refused its group against the loaded catalog.
const CodeMixedRenderers = "mixed_renderers"

// refusal is why a new machine of g must not be created against the loaded
// catalog (Options.CheckCatalog), or nil.
func (c *Core) refusal(g *group) error {
	return c.catalog.get().refused[g.spec.ID]
}

// resolveImage picks the image a new machine of g boots from. It is pure
// over the loaded catalog and cheap, so IncreaseSize can call it under c.mu.
// The zero image with a non-empty fallback reason means runtime install
// although the group asked for a channel; missing is set when the image
// lacks some of the group's container images.
func (c *Core) resolveImage(g *group) (image string, kind providers.ImageKind, fb *Fallback, missing *MissingImages) {
	ch := g.spec.ImageChannel
	if ch == "" {
		return "", providers.ImageRuntimeInstall, nil, nil
	}
	fail := func(reason, msg string) (string, providers.ImageKind, *Fallback, *MissingImages) {
		return "", providers.ImageRuntimeInstall, &Fallback{Group: g.spec.ID, Channel: ch, Reason: reason, Message: msg}, nil
	}
	if !g.provider.Capabilities().BootsImages {
		return fail(FallbackNoImageAPI, fmt.Sprintf("provider %q can't boot custom images", g.provider.Name()))
	}
	st := c.catalog.get()
	if c.opts.Catalog == nil {
		return fail(FallbackNoCatalog, "no image catalog is configured (set imageCatalog in the config)")
	}
	if !st.loaded {
		msg := "the image catalog has not loaded yet"
		if st.err != nil {
			msg += ": " + st.err.Error()
		}
		return fail(FallbackNoCatalog, msg)
	}
	id, lacks, err := imagecatalog.ResolvePreferring(st.catalog, g.imageQuery(), g.spec.ImageContainerImages)
	if err != nil {
		reason := FallbackNotFound
		switch {
		case errors.Is(err, imagecatalog.ErrAmbiguous):
			reason = FallbackAmbiguous
		case errors.Is(err, imagecatalog.ErrDeprecated):
			reason = FallbackDeprecated
		}
		return fail(reason, err.Error())
	}
	if len(lacks) > 0 {
		missing = &MissingImages{Group: g.spec.ID, Channel: ch, Image: id, Missing: lacks}
	}
	return id, providers.ImagePrebaked, nil, missing
}

// familyOf is the OS family of a new machine of g booting image ("" for
// the runtime-install path): the catalog's for an image; else the group's
// image.os; else, for a group with a channel, the family of the channels
// its query matches (a Flatcar-only channel falls back as Flatcar, whose
// runtime path the renderer then refuses, rather than as a Debian node
// configured with cloud-init); else Debian or Ubuntu, the providers' base
// images. Before the catalog first loads, a group without image.os is
// taken as Debian or Ubuntu.
func (c *Core) familyOf(g *group, image string) imagecatalog.Family {
	cat := c.catalog.get().catalog
	if image == "" && g.spec.ImageOS == "" && g.spec.ImageChannel != "" {
		if f, ok := imagecatalog.ChannelFamily(cat, g.imageQuery()); ok {
			return f
		}
	}
	f, err := imagecatalog.ChooseFamily(cat, image, g.spec.ImageOS)
	if err != nil {
		// An image resolved from this catalog is in it; keep the
		// group's family if a reload dropped it since.
		f, _ = imagecatalog.ChooseFamily(imagecatalog.Catalog{}, "", g.spec.ImageOS)
	}
	return f
}

// manifestOf is the catalog's manifest of image, the zero Manifest for ""
// (runtime install) or an image a reload dropped since it resolved.
func (c *Core) manifestOf(image string) imagecatalog.Manifest {
	if image == "" {
		return imagecatalog.Manifest{}
	}
	im, _ := c.catalog.get().catalog.Image(image)
	return im.Manifest
}

// imageQuery is the catalog query for a group: its channel, its provider,
// the arch of its machine type, and the OS release and k8s minor when the
// group pins them. Location matches any: an image that exists for several
// locations under one channel is ambiguous, and resolve says so.
func (g *group) imageQuery() imagecatalog.Query {
	or := func(s string) string {
		if s == "" {
			return imagecatalog.Any
		}
		return s
	}
	arch := g.machineType.Arch
	if arch == "" {
		arch = "amd64"
	}
	return imagecatalog.Query{Channel: g.spec.ImageChannel, Key: imagecatalog.Key{
		OS: or(g.spec.ImageOS), K8sMinor: or(g.spec.ImageK8sMinor), Arch: arch,
		Provider: g.provider.Name(), Location: imagecatalog.Any,
	}}
}

// reportFallback counts a fallback and hands it to the event sink from a
// goroutine the core owns, off the request path.
func (c *Core) reportFallback(ctx context.Context, fb Fallback) {
	c.metrics.imageFallbacks.WithLabelValues(fb.Group, fb.Reason).Inc()
	c.log.Warn("image fallback: runtime install", "group", fb.Group, "instance", fb.Machine,
		"channel", fb.Channel, "reason", fb.Reason, "why", fb.Message)
	if c.opts.Events == nil {
		return
	}
	c.wg.Go(func() { c.opts.Events.ImageFallback(ctx, fb) })
}

// reportMissingImages counts a machine whose image lacks some of its
// group's container images and hands it to the event sink from a goroutine
// the core owns, off the request path.
func (c *Core) reportMissingImages(ctx context.Context, m MissingImages) {
	c.metrics.missingContainerImages.WithLabelValues(m.Group).Inc()
	c.log.Warn("image lacks container images of the group; the kubelet pulls them", "group", m.Group, "instance", m.Machine,
		"channel", m.Channel, "image", m.Image, "missing", m.Missing)
	if c.opts.Events == nil {
		return
	}
	c.wg.Go(func() { c.opts.Events.ImageMissingContainerImages(ctx, m) })
}

// eventCtx is the context event senders run under: Start's, so Shutdown
// stops them; Background before Start (tests that drive a bare core).
func (c *Core) eventCtx() context.Context {
	if p := c.runCtx.Load(); p != nil {
		return *p
	}
	return context.Background()
}
