package imagecatalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Canary decides whether an image may be promoted: it should boot a node
// from it and join it to a test cluster. Check returns nil when it passed.
type Canary interface {
	Check(ctx context.Context, im Image) error
	// String says what the canary does, for progress and docs.
	String() string
}

// ErrNoCanary is why refresh does not promote without a canary: promoting
// an image nobody booted is how a bad image reaches every new node.
var ErrNoCanary = errors.New("no canary configured")

// CommandCanary runs a command; exit status 0 passes. The image is passed in
// the environment: PREBAKE_IMAGE_ID, PREBAKE_IMAGE_NAME,
// PREBAKE_IMAGE_PROVIDER and PREBAKE_IMAGE_LOCATION. What the command does
// (boot a server, kubeadm join, a smoke test) is up to the operator.
// prebake's own canary, which boots a machine of a node group and waits for
// its Node, is autoscaling/canary.JoinCanary; the CLI wires it in, so this package
// never imports autoscaling.
type CommandCanary struct {
	Command []string
}

func (c CommandCanary) String() string { return "command " + strings.Join(c.Command, " ") }

// Check runs the command.
func (c CommandCanary) Check(ctx context.Context, im Image) error {
	if len(c.Command) == 0 {
		return fmt.Errorf("canary: %w: empty command", ErrNoCanary)
	}
	cmd := exec.CommandContext(ctx, c.Command[0], c.Command[1:]...)
	cmd.Env = append(os.Environ(), "PREBAKE_IMAGE_ID="+im.ID, "PREBAKE_IMAGE_NAME="+im.Name,
		"PREBAKE_IMAGE_PROVIDER="+im.Provider, "PREBAKE_IMAGE_LOCATION="+im.Location)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tail := strings.TrimSpace(out.String())
		if len(tail) > 400 {
			tail = "…" + tail[len(tail)-400:]
		}
		return fmt.Errorf("canary %s for image %s: %w: %s", c, im.ID, err, tail)
	}
	return nil
}

// RefreshOptions tune Refresh.
type RefreshOptions struct {
	Build BuildOptions
	// MaxAge rebuilds an image of unchanged inputs once it is older; 0
	// never does.
	MaxAge time.Duration
	// Canary must pass before the candidate is promoted. nil never
	// promotes (the result says so).
	Canary Canary
	// To is the channel promoted to; default stable. Promotion takes the
	// spec's channel (candidate) as the source.
	To string
}

// RefreshResult is what refresh did for one spec.
type RefreshResult struct {
	Key      Key    `json:"key" yaml:"key"`
	Image    string `json:"image,omitempty" yaml:"image,omitempty"`
	Built    bool   `json:"built" yaml:"built"`
	Promoted bool   `json:"promoted" yaml:"promoted"`
	Why      string `json:"why" yaml:"why"`
	Err      string `json:"error,omitempty" yaml:"error,omitempty"`
}

// Refresh keeps every spec's image current: it builds when no image has the
// spec's inputs (a version, the base image or the script changed) or the one
// that has them is older than MaxAge, and then promotes the candidate to
// stable when the canary passes. A failing spec does not stop the others;
// the error joins every failure.
func Refresh(ctx context.Context, api BuildAPI, store Store, specs []BuildSpec, opts RefreshOptions) ([]RefreshResult, error) {
	opts.Build.defaults()
	if opts.To == "" {
		opts.To = ChannelStable
	}
	var results []RefreshResult
	var errs []error
	for _, spec := range specs {
		r, err := refreshOne(ctx, api, store, spec, opts)
		if err != nil {
			r.Err = err.Error()
			errs = append(errs, err)
		}
		results = append(results, r)
	}
	return results, errors.Join(errs...)
}

func refreshOne(ctx context.Context, api BuildAPI, store Store, spec BuildSpec, opts RefreshOptions) (RefreshResult, error) {
	key := spec.Key()
	res := RefreshResult{Key: key}
	progress := func(format string, args ...any) {
		fmt.Fprintf(opts.Build.Progress, "refresh %s: %s\n", key, fmt.Sprintf(format, args...))
	}
	c, _, err := store.Load(ctx)
	if err != nil {
		return res, err
	}
	hash := InputsHash(spec.Inputs())
	bo := opts.Build
	cur, have := c.FindByInputs(key, hash)
	switch {
	case !have:
		progress("no image has inputs %s: building", hash)
	case opts.MaxAge > 0 && opts.Build.Now().Sub(cur.Created) > opts.MaxAge:
		progress("image %s is %s old, more than --max-age %s: rebuilding", cur.ID, opts.Build.Now().Sub(cur.Created).Round(time.Minute), opts.MaxAge)
		bo.Force = true
	default:
		progress("image %s has the current inputs and is young enough", cur.ID)
	}
	if !have || bo.Force {
		br, err := Build(ctx, api, store, spec, bo)
		if err != nil {
			return res, err
		}
		res.Built, res.Image, res.Why = br.Built, br.Image.ID, br.Why
		if br.DryRun {
			res.Why = "would build: " + br.Why
			return res, nil
		}
		if c, _, err = store.Load(ctx); err != nil {
			return res, err
		}
	}
	cand, ok := c.Channel(spec.channel(), key)
	if !ok || cand.Image == "" {
		res.Why = strings.TrimPrefix(res.Why+"; no "+spec.channel()+" image to promote", "; ")
		return res, nil
	}
	res.Image = cand.Image
	if st, ok := c.Channel(opts.To, key); ok && st.Image == cand.Image {
		res.Why = strings.TrimPrefix(res.Why+"; "+opts.To+" already points to "+cand.Image, "; ")
		return res, nil
	}
	im, _ := c.Image(cand.Image)
	if opts.Canary == nil {
		res.Why = strings.TrimPrefix(fmt.Sprintf("%s; not promoted to %s: %v (give --canary-group or --canary-command)", res.Why, opts.To, ErrNoCanary), "; ")
		progress("%s image %s not promoted: %v", spec.channel(), im.ID, ErrNoCanary)
		return res, nil
	}
	if opts.Build.DryRun {
		res.Why = strings.TrimPrefix(fmt.Sprintf("%s; would run canary %s on %s and promote it to %s if it passes", res.Why, opts.Canary, im.ID, opts.To), "; ")
		return res, nil
	}
	progress("running canary %s on image %s", opts.Canary, im.ID)
	if err := opts.Canary.Check(ctx, im); err != nil {
		res.Why = strings.TrimPrefix(fmt.Sprintf("%s; not promoted to %s: canary failed", res.Why, opts.To), "; ")
		return res, err
	}
	now := opts.Build.Now().UTC()
	c, err = Update(ctx, store, func(c Catalog) (Catalog, error) {
		c, _, err := Promote(c, opts.To, im.ID, now)
		return c, err
	})
	if err != nil {
		return res, err
	}
	if _, err := PushLabels(ctx, api, c, im.Provider, im.Location); err != nil {
		return res, err
	}
	res.Promoted = true
	res.Why = strings.TrimPrefix(fmt.Sprintf("%s; canary passed, promoted %s to %s", res.Why, im.ID, opts.To), "; ")
	progress("canary passed: %s now points to %s", opts.To, im.ID)
	return res, nil
}
