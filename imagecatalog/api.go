package imagecatalog

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Label keys this package writes on cloud images. The values fit both
// Hetzner's and GCE's value rules (at most 63 characters of [a-z0-9_-]). The
// keys use the project's prebake.dev/ form, which GCE does not allow in keys:
// a GCE adapter maps them as it does providers' labels. prebake.dev/image on
// instances is providers.LabelImage; this leaf package does not import it.
const (
	LabelName       = "prebake.dev/image-name"
	LabelInputsHash = "prebake.dev/inputs-hash"
	LabelOS         = "prebake.dev/os"
	LabelK8s        = "prebake.dev/k8s"
	LabelArch       = "prebake.dev/arch"
	LabelVerified   = "prebake.dev/verified"
)

// CloudImage is an image as a provider's API reports it.
type CloudImage struct {
	ID          string
	Description string
	Labels      map[string]string
	Protected   bool // delete protection is on
	Created     time.Time
}

// ImageAPI is the part of a provider's image API the catalog needs. The
// provider packages implement it; imagecatalog owns it.
type ImageAPI interface {
	// ListImages returns the provider's custom images (snapshots) that
	// carry every label in selector; a nil selector lists them all.
	ListImages(ctx context.Context, selector map[string]string) ([]CloudImage, error)
	// SetLabels replaces the image's labels.
	SetLabels(ctx context.Context, id string, labels map[string]string) error
	// SetDeleteProtection turns delete protection on or off. A provider
	// without it returns nil.
	SetDeleteProtection(ctx context.Context, id string, on bool) error
	// DeleteImage deletes the image. An image already gone is not an error.
	DeleteImage(ctx context.Context, id string) error
}

// Instance is a live machine and the image id it booted from.
type Instance struct {
	ID    string
	Image string
}

// InstanceLister lists the live instances, through the provider's List, so
// gc sees what is running right now rather than what the catalog believes.
type InstanceLister interface {
	ListInstances(ctx context.Context) ([]Instance, error)
}

// Labels are the cloud labels of a published image: what its name says, its
// inputs hash and whether it passed verification. They let a catalog be
// rebuilt from the cloud and a build find an image for its inputs.
func Labels(im Image) (map[string]string, error) {
	n, err := ParseName(im.Name)
	if err != nil {
		return nil, err
	}
	l := map[string]string{
		LabelName: im.Name, LabelInputsHash: im.InputsHash,
		LabelOS: n.OSRelease(), LabelK8s: fmt.Sprintf("%d-%d-%d", n.K8s.Major, n.K8s.Minor, n.K8s.Patch), LabelArch: n.Arch,
	}
	if im.Verified != nil {
		l[LabelVerified] = "true"
	}
	return l, nil
}

// GC plans over the catalog with the instances live right now, then applies
// the plan through api: delete protection on for channel images, off for the
// rest, then deletes. It returns the catalog without the deleted images, even
// when it stops at an error part way, so the caller can save what happened.
func GC(ctx context.Context, api ImageAPI, lister InstanceLister, c Catalog, opts GCOptions) (Catalog, GCPlan, error) {
	instances, err := lister.ListInstances(ctx)
	if err != nil {
		return c, GCPlan{}, fmt.Errorf("gc: list instances: %w", err)
	}
	inUse := map[string]bool{}
	for id := range opts.InUse {
		inUse[id] = true
	}
	for _, in := range instances {
		if in.Image != "" {
			inUse[in.Image] = true
		}
	}
	opts.InUse = inUse
	plan, err := PlanGC(c, opts)
	if err != nil {
		return c, plan, err
	}
	deleted, err := ApplyGC(ctx, api, plan)
	out, ferr := Forget(c, deleted)
	if ferr != nil { // PlanGC never deletes a channel's image; this is a bug
		return c, plan, fmt.Errorf("gc: %w", ferr)
	}
	return out, plan, err
}

// ApplyGC carries out a plan and returns the ids it deleted.
func ApplyGC(ctx context.Context, api ImageAPI, plan GCPlan) (deleted []string, err error) {
	for _, id := range plan.Protect {
		if err := api.SetDeleteProtection(ctx, id, true); err != nil {
			return deleted, fmt.Errorf("gc: protect image %s: %w", id, err)
		}
	}
	for _, id := range plan.Unprotect {
		if err := api.SetDeleteProtection(ctx, id, false); err != nil {
			return deleted, fmt.Errorf("gc: unprotect image %s: %w", id, err)
		}
	}
	for _, id := range plan.Delete {
		if err := api.DeleteImage(ctx, id); err != nil {
			return deleted, fmt.Errorf("gc: delete image %s: %w", id, err)
		}
		slog.InfoContext(ctx, "image deleted", "image", id)
		deleted = append(deleted, id)
	}
	return deleted, nil
}
