package imagecatalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"
)

// BuilderSpec is the server a build boots.
type BuilderSpec struct {
	// Name is the server's name; it is derived from the inputs hash, so a
	// build interrupted and run again finds its builder.
	Name        string
	BaseImage   string
	MachineType string
	Location    string
	// UserData is the runtime-install user-data. It may hold secrets:
	// never log it.
	UserData []byte
	Labels   map[string]string
}

// BuilderState is a builder server as the provider sees it now.
type BuilderState struct {
	ID     string
	Status string // the provider's word, for progress output
	Labels map[string]string
	// Address is the builder's public address, where its provider reaches
	// it for the report; "" until it has one.
	Address string
}

// BuildAPI is what Build needs of a provider on top of ImageAPI. A builder
// has no credentials of the cloud's, so it cannot label its own server:
// each provider fetches the report from where its builders can leave it
// (Hetzner: over SSH, logging in with a key made for that builder; GCE: a
// guest attribute the builder writes through the metadata server).
type BuildAPI interface {
	ImageAPI
	ImageGetter
	// BootBuilder creates and starts the builder. A builder of the same name
	// that already exists is returned as it is.
	BootBuilder(ctx context.Context, spec BuilderSpec) (BuilderState, error)
	// Builder reads the builder; a missing one wraps ErrNotFound.
	Builder(ctx context.Context, id string) (BuilderState, error)
	// BuilderReport fetches the builder's report: the JSON bootstrap's
	// builder script writes (see DecodeReport). ok is false while the
	// builder has none yet. An error is retried until the build's timeout,
	// unless it wraps ErrBuilderUnusable.
	BuilderReport(ctx context.Context, b BuilderState) (report []byte, ok bool, err error)
	// Snapshot shuts the builder down, images its disk with the
	// description and labels, and returns once the image is available.
	Snapshot(ctx context.Context, builderID, description string, labels map[string]string) (CloudImage, error)
	// DeleteBuilder deletes the builder; one already gone is not an error.
	DeleteBuilder(ctx context.Context, id string) error
}

// ErrBuilderUnusable is wrapped by a BuilderReport error that waiting cannot
// mend (a builder whose report can never be fetched): the build stops.
var ErrBuilderUnusable = errors.New("builder unusable")

// BuildSpec is one image to build: what the name says, where it lives in
// the catalog, what to boot and what to install.
type BuildSpec struct {
	OS        string  `yaml:"os" json:"os"`
	OSVersion string  `yaml:"osVersion" json:"osVersion"`
	K8s       Version `yaml:"-" json:"-"`
	Arch      string  `yaml:"arch" json:"arch"`
	// Provider and Location are the catalog's (Location "" for global
	// images such as Hetzner snapshots).
	Provider string `yaml:"provider" json:"provider"`
	Location string `yaml:"location,omitempty" json:"location,omitempty"`
	// BaseImage, MachineType and BuilderLocation say what the builder is.
	BaseImage       string `yaml:"baseImage" json:"baseImage"`
	MachineType     string `yaml:"machineType" json:"machineType"`
	BuilderLocation string `yaml:"builderLocation,omitempty" json:"builderLocation,omitempty"`
	// Components are the requested versions; DefaultManifest fills in the
	// kernel settings.
	Components map[string]string `yaml:"components" json:"components"`
	// ContainerImages are pulled into the builder's containerd, so nodes of
	// the image have them (the pod sandbox image, say): fully qualified
	// references, by tag or pinned by digest (name:tag@sha256:...). They are
	// inputs of their own (Inputs.ContainerImages), and the build's report
	// must hold each one (VerifyBuild).
	ContainerImages []string `yaml:"containerImages,omitempty" json:"containerImages,omitempty"`
	// UserData is the runtime-install user-data the builder boots with.
	UserData []byte `yaml:"-" json:"-"`
	// Channel is where the build is published; default candidate.
	Channel string `yaml:"channel,omitempty" json:"channel,omitempty"`
}

// Key is the channel key the spec's images belong under.
func (s BuildSpec) Key() Key {
	n := Name{OS: s.OS, OSVersion: s.OSVersion, K8s: s.K8s, Arch: s.Arch}
	return Key{OS: n.OSRelease(), K8sMinor: s.K8s.MinorString(), Arch: s.Arch, Provider: s.Provider, Location: s.Location}
}

// Family is the OS family of the spec's images.
func (s BuildSpec) Family() Family { return Family(s.OS) }

// Manifest is the requested manifest (ManifestFor the spec's family).
func (s BuildSpec) Manifest() Manifest { return ManifestFor(s.Family(), s.Components) }

// Inputs are what the spec's image depends on. The user-data counts through
// its hash, so a new install script means a new image. The container images
// count on their own, whatever user-data pulls them (InputsHash sorts them).
func (s BuildSpec) Inputs() Inputs {
	sum := sha256.Sum256(s.UserData)
	return Inputs{BaseImage: s.BaseImage, Manifest: s.Manifest(), ScriptVersion: "user-data-sha256:" + hex.EncodeToString(sum[:]),
		ContainerImages: slices.Clone(s.ContainerImages)}
}

func (s BuildSpec) channel() string {
	if s.Channel == "" {
		return ChannelCandidate
	}
	return s.Channel
}

// BuildOptions tune Build.
type BuildOptions struct {
	// Poll is how often the builder is read while it works; default 10s.
	Poll time.Duration
	// Timeout bounds the wait for the builder's report, measured on Now;
	// default 30m.
	Timeout time.Duration
	// Force builds even when an image of the same inputs exists (refresh
	// uses it when that image is older than its max age).
	Force bool
	// DryRun says what would be built and builds nothing.
	DryRun bool
	// Progress receives one line per step and per poll; nil discards.
	Progress io.Writer
	// Now defaults to time.Now; it names the image and measures Timeout.
	Now func() time.Time
}

func (o *BuildOptions) defaults() {
	if o.Poll <= 0 {
		o.Poll = 10 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// BuildResult is what a build did.
type BuildResult struct {
	Image Image `json:"image" yaml:"image"`
	// Built is false when an image of the same inputs already existed.
	Built bool `json:"built" yaml:"built"`
	// DryRun is true when nothing was done.
	DryRun bool   `json:"dryRun,omitempty" yaml:"dryRun,omitempty"`
	Why    string `json:"why" yaml:"why"`
}

// Build makes the spec's image, unless one of the same inputs exists:
// boot a builder from the base image with the user-data, wait for its
// report, verify it (versions, hygiene), snapshot and label it, delete the
// builder, publish the image and point the spec's channel (candidate) at it.
// The manifest recorded is the one the builder observed. Every write to the
// catalog goes through store's compare-and-swap.
func Build(ctx context.Context, api BuildAPI, store Store, spec BuildSpec, opts BuildOptions) (BuildResult, error) {
	opts.defaults()
	progress := func(format string, args ...any) { fmt.Fprintf(opts.Progress, format+"\n", args...) }
	want := spec.Manifest()
	if err := want.ValidateFor(spec.Family()); err != nil {
		return BuildResult{}, fmt.Errorf("build %s: requested %w", spec.Key(), err)
	}
	key := spec.Key()
	// Check the name before anything costs money.
	if err := (Name{OS: spec.OS, OSVersion: spec.OSVersion, K8s: spec.K8s, Arch: spec.Arch, Built: opts.Now().UTC()}).Validate(); err != nil {
		return BuildResult{}, fmt.Errorf("build %s: %w", key, err)
	}
	hash := InputsHash(spec.Inputs())
	where := fmt.Sprintf("build %s inputs %s", key, hash)

	if !opts.Force {
		if res, found, err := existing(ctx, api, store, spec, hash); err != nil || found {
			if found {
				progress("%s: %s", where, res.Why)
			}
			return res, err
		}
	}
	if opts.DryRun {
		progress("%s: would boot a %s builder from %s and publish to %s", where, spec.MachineType, spec.BaseImage, spec.channel())
		return BuildResult{DryRun: true, Why: "no image of these inputs; would build one"}, nil
	}

	bs := BuilderSpec{
		Name: "prebake-builder-" + spec.Arch + "-" + hash[:16], BaseImage: spec.BaseImage, MachineType: spec.MachineType,
		Location: spec.BuilderLocation, UserData: spec.UserData, Labels: map[string]string{LabelBuilder: hash},
	}
	b, err := api.BootBuilder(ctx, bs)
	if err != nil {
		return BuildResult{}, fmt.Errorf("%s: boot builder %s: %w", where, bs.Name, err)
	}
	progress("%s: builder %s (%s) booting from %s", where, bs.Name, b.ID, spec.BaseImage)
	defer func() {
		// The builder goes even when the build fails or ctx ends: a leaked
		// server costs money. (It carries LabelBuilder for manual cleanup.)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := api.DeleteBuilder(dctx, b.ID); err != nil {
			slog.ErrorContext(ctx, "builder not deleted; delete it by hand", "builder", b.ID, "label", LabelBuilder+"="+hash, "err", err)
			progress("%s: builder %s NOT deleted: %v (delete servers labelled %s=%s)", where, b.ID, err, LabelBuilder, hash)
			return
		}
		progress("%s: builder %s deleted", where, b.ID)
	}()

	report, err := waitForReport(ctx, api, b.ID, opts, func(st BuilderState, el time.Duration) {
		progress("%s: builder %s is %s, waiting for its report (%s)", where, b.ID, st.Status, el.Round(time.Second))
	})
	if err != nil {
		return BuildResult{}, fmt.Errorf("%s: %w", where, err)
	}
	if err := VerifyBuild(spec, report); err != nil {
		return BuildResult{}, fmt.Errorf("%s: builder %s: %w; nothing was published", where, b.ID, err)
	}
	progress("%s: verified: %d components at the requested versions, %d container images, hygiene passed", where, len(want.Components), len(spec.ContainerImages))

	now := opts.Now().UTC()
	name := Name{OS: spec.OS, OSVersion: spec.OSVersion, K8s: spec.K8s, Arch: spec.Arch, Built: now}
	im := Image{
		Name: name.String(), Provider: spec.Provider, Location: spec.Location, InputsHash: hash, Created: now,
		Manifest: report.Observed,
		Verified: &Event{At: now, Reason: fmt.Sprintf("builder report: %d components at the requested versions; hygiene passed", len(want.Components))},
	}
	labels, err := Labels(im)
	if err != nil {
		return BuildResult{}, fmt.Errorf("%s: %w", where, err)
	}
	ml, err := ManifestLabels(im.Manifest)
	if err != nil {
		return BuildResult{}, fmt.Errorf("%s: %w", where, err)
	}
	maps.Copy(labels, ml)
	progress("%s: snapshotting builder %s as %s", where, b.ID, im.Name)
	ci, err := api.Snapshot(ctx, b.ID, im.Name, labels)
	if err != nil {
		return BuildResult{}, fmt.Errorf("%s: snapshot builder %s: %w", where, b.ID, err)
	}
	im.ID = ci.ID
	progress("%s: image %s available", where, im.ID)
	if err := publishAndPoint(ctx, api, store, im, spec.channel(), now); err != nil {
		return BuildResult{Image: im, Built: true}, fmt.Errorf("%s: image %s was created but not published (run `prebake images sync` or publish it): %w", where, im.ID, err)
	}
	progress("%s: published %s (%s) to %s", where, im.ID, im.Name, spec.channel())
	return BuildResult{Image: im, Built: true, Why: "built, verified and published to " + spec.channel()}, nil
}

// existing finds an image of the same inputs: in the catalog, or in the
// cloud (a build whose publish was lost), which is then published.
func existing(ctx context.Context, api BuildAPI, store Store, spec BuildSpec, hash string) (BuildResult, bool, error) {
	key := spec.Key()
	c, _, err := store.Load(ctx)
	if err != nil {
		return BuildResult{}, false, err
	}
	if im, ok := c.FindByInputs(key, hash); ok {
		return BuildResult{Image: im, Why: fmt.Sprintf("image %s (%s) has these inputs; nothing to build", im.ID, im.Name)}, true, nil
	}
	cloud, err := api.ListImages(ctx, map[string]string{LabelInputsHash: hash, LabelArch: spec.Arch})
	if err != nil {
		return BuildResult{}, false, fmt.Errorf("find images of inputs %s: %w", hash, err)
	}
	for _, ci := range cloud {
		if ci.Labels[LabelDeprecated] == "true" {
			continue
		}
		im, err := ImageFromCloud(ci, spec.Provider, spec.Location)
		if err != nil {
			return BuildResult{}, false, err
		}
		if k, err := im.Key(); err != nil || k != key {
			continue
		}
		if err := publishAndPoint(ctx, api, store, im, spec.channel(), time.Now().UTC()); err != nil {
			return BuildResult{}, false, err
		}
		return BuildResult{Image: im, Why: fmt.Sprintf("image %s (%s) in the cloud has these inputs; published it, built nothing", im.ID, im.Name)}, true, nil
	}
	return BuildResult{}, false, nil
}

// publishAndPoint adds im to the catalog (unless there), points channel at
// it and pushes the labels.
func publishAndPoint(ctx context.Context, api ImageAPI, store Store, im Image, channel string, now time.Time) error {
	c, err := Update(ctx, store, func(c Catalog) (Catalog, error) {
		if _, ok := c.Image(im.ID); !ok {
			var err error
			if c, err = Publish(c, im); err != nil {
				return c, err
			}
		}
		c, _, err := Promote(c, channel, im.ID, now)
		return c, err
	})
	if err != nil {
		return err
	}
	_, err = PushLabels(ctx, api, c, im.Provider, im.Location)
	return err
}

func waitForReport(ctx context.Context, api BuildAPI, id string, opts BuildOptions, tick func(BuilderState, time.Duration)) (Report, error) {
	began := opts.Now()
	deadline := began.Add(opts.Timeout)
	// The deadline is kept on opts.Now, so a test's clock decides it; the
	// context's timeout only bounds a call that hangs (with the real clock
	// they are the same instant).
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	t := time.NewTicker(opts.Poll)
	defer t.Stop()
	var lastErr error
	timedOut := func() error {
		err := fmt.Errorf("builder %s gave no report within %s: check its console log; raise --timeout if the install is slow", id, opts.Timeout)
		if lastErr != nil {
			err = fmt.Errorf("%w (last read error: %w)", err, lastErr)
		}
		return err
	}
	since := func() time.Duration { return opts.Now().Sub(began) }
	for {
		// A failed read is retried until the timeout: one 503 must not
		// throw away a half-hour build. A builder that is gone is final.
		st, err := api.Builder(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return Report{}, err
		}
		if err != nil && ctx.Err() == nil {
			lastErr = err
			tick(BuilderState{Status: "unreadable (" + err.Error() + ")"}, since())
		}
		if err == nil {
			data, ok, rerr := api.BuilderReport(ctx, st)
			switch {
			case errors.Is(rerr, ErrBuilderUnusable):
				return Report{}, rerr // the provider's error names the builder
			case rerr != nil && ctx.Err() == nil:
				lastErr = rerr
				tick(BuilderState{Status: st.Status + ", report unreadable (" + rerr.Error() + ")"}, since())
			case rerr == nil && ok:
				r, err := DecodeReport(data)
				if err != nil {
					return Report{}, fmt.Errorf("builder %s: %w", id, err)
				}
				return r, nil
			case rerr == nil:
				tick(st, since())
			}
		}
		if !opts.Now().Before(deadline) {
			return Report{}, timedOut()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return Report{}, timedOut()
			}
			return Report{}, ctx.Err()
		case <-t.C:
		}
	}
}
