package gce

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/imagecatalog"
)

// bootImage returns the sourceImage to boot: the catalog image the core
// resolved the group's channel to (on GCE an image's id is its name), or
// the default image for the arch on the runtime-install path.
func (p *Provider) bootImage(image, arch string) string {
	switch {
	case image != "":
		return "projects/" + p.o.Project + "/global/images/" + image
	case arch == "arm64":
		return p.o.ImageArm64
	}
	return p.o.Image
}

// ImageCatalog returns the provider's image API as the image catalog uses
// it (imagecatalog.ImageAPI and imagecatalog.InstanceLister).
func (p *Provider) ImageCatalog() *Images { return p.images }

// Images is the provider's image API. An image's id is its name, which is
// unique in the project and what a sourceImage names.
type Images struct{ p *Provider }

var (
	_ imagecatalog.ImageAPI       = (*Images)(nil)
	_ imagecatalog.ImageGetter    = (*Images)(nil)
	_ imagecatalog.InstanceLister = (*Images)(nil)
)

// ListImages implements imagecatalog.ImageAPI: the project's images that
// carry every label of selector (in project form; mapped here).
func (im *Images) ListImages(ctx context.Context, selector map[string]string) ([]imagecatalog.CloudImage, error) {
	p := im.p
	var conds []string
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		conds = append(conds, fmt.Sprintf("(labels.%s = %q)", LabelKey(k), selector[k]))
	}
	req := &computepb.ListImagesRequest{Project: p.o.Project, MaxResults: proto.Uint32(pageSize)}
	if len(conds) > 0 {
		req.Filter = proto.String(strings.Join(conds, " AND "))
	}
	it := p.imagesAPI.List(ctx, req)
	var out []imagecatalog.CloudImage
	for {
		x, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("gce: list images in project %q: %w", p.o.Project, err)
		}
		out = append(out, cloudImage(x))
	}
	return out, nil
}

// cloudImage is the catalog's view of an image: its id is its name.
func cloudImage(x *computepb.Image) imagecatalog.CloudImage {
	c := imagecatalog.CloudImage{ID: x.GetName(), Description: x.GetDescription(), Labels: FromGCE(x.GetLabels())}
	if t, err := time.Parse(time.RFC3339, x.GetCreationTimestamp()); err == nil {
		c.Created = t
	}
	return c
}

// GetImage implements imagecatalog.ImageGetter: the project's image of
// this name; a missing one wraps imagecatalog.ErrNotFound.
func (im *Images) GetImage(ctx context.Context, id string) (imagecatalog.CloudImage, error) {
	p := im.p
	x, err := p.imagesAPI.Get(ctx, &computepb.GetImageRequest{Project: p.o.Project, Image: id})
	if isNotFound(err) {
		return imagecatalog.CloudImage{}, fmt.Errorf("gce image %q in project %q: %w (see `gcloud compute images list --no-standard-images`)", id, p.o.Project, imagecatalog.ErrNotFound)
	}
	if err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("gce: get image %q in project %q: %w", id, p.o.Project, err)
	}
	return cloudImage(x), nil
}

// SetLabels implements imagecatalog.ImageAPI. setLabels needs the current
// label fingerprint; a concurrent change (412) is retried once with the new
// one.
func (im *Images) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	p := im.p
	var err error
	for range 2 {
		var cur *computepb.Image
		cur, err = p.imagesAPI.Get(ctx, &computepb.GetImageRequest{Project: p.o.Project, Image: id})
		if err != nil {
			return fmt.Errorf("gce: get image %q: %w", id, err)
		}
		var op interface{ Proto() *computepb.Operation }
		op, err = p.imagesAPI.SetLabels(ctx, &computepb.SetLabelsImageRequest{Project: p.o.Project, Resource: id,
			GlobalSetLabelsRequestResource: &computepb.GlobalSetLabelsRequest{LabelFingerprint: cur.LabelFingerprint, Labels: ToGCE(labels)}})
		if isPreconditionFailed(err) {
			continue
		}
		if err == nil {
			err = p.waitGlobalProto(ctx, op.Proto())
		}
		break
	}
	if err != nil {
		return fmt.Errorf("gce: set labels of image %q: %w", id, err)
	}
	return nil
}

// SetDeleteProtection implements imagecatalog.ImageAPI. GCE images have no
// delete protection (only instances do), so this does nothing: the catalog's
// gc plan is what keeps channel images.
func (im *Images) SetDeleteProtection(context.Context, string, bool) error { return nil }

// DeleteImage implements imagecatalog.ImageAPI. An image already gone is
// not an error.
func (im *Images) DeleteImage(ctx context.Context, id string) error {
	p := im.p
	op, err := p.imagesAPI.Delete(ctx, &computepb.DeleteImageRequest{Project: p.o.Project, Image: id})
	if isNotFound(err) {
		return nil
	}
	if err == nil {
		err = p.waitGlobalProto(ctx, op.Proto())
	}
	if err != nil {
		return fmt.Errorf("gce: delete image %q: %w", id, err)
	}
	return nil
}

// Deprecate sets an image's deprecation state: DEPRECATED (still boots, but
// its family skips it), OBSOLETE (refuses new instances), DELETED (marked
// for deletion), or ACTIVE to undo. replacement, when set, names the image
// to use instead. Deprecating a family's newest image rolls the family
// back to the one before.
func (im *Images) Deprecate(ctx context.Context, id, state, replacement string) error {
	p := im.p
	st := &computepb.DeprecationStatus{State: proto.String(state)}
	if replacement != "" {
		st.Replacement = proto.String("projects/" + p.o.Project + "/global/images/" + replacement)
	}
	op, err := p.imagesAPI.Deprecate(ctx, &computepb.DeprecateImageRequest{Project: p.o.Project, Image: id, DeprecationStatusResource: st})
	if err == nil {
		err = p.waitGlobalProto(ctx, op.Proto())
	}
	if err != nil {
		return fmt.Errorf("gce: deprecate image %q as %s: %w", id, state, err)
	}
	return nil
}

// ListInstances implements imagecatalog.InstanceLister through List: the
// image each live instance of the cluster booted from.
func (im *Images) ListInstances(ctx context.Context) ([]imagecatalog.Instance, error) {
	ins, err := im.p.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]imagecatalog.Instance, 0, len(ins))
	for _, in := range ins {
		out = append(out, imagecatalog.Instance{ID: in.ProviderID, Image: in.Image})
	}
	return out, nil
}
