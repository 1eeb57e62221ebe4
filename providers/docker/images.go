package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/providerid"
)

// The provider is the image catalog's Docker backend. A catalog image is a
// tag of Options.ImageRepository: its id is the tag (the image's name, such
// as prebake-debian-12-k8s-1-35-4-amd64-20261201t1504), which fits a label
// value as the machines' prebake.dev/image must. The catalog is global to
// the engine: its location is "".
//
// A Docker image's labels are part of its config, so they can't change
// without a new image. The catalog's labels do change (channels, promote,
// deprecation), so each catalog image may have a label record: a tiny image
// (one empty layer) tagged <repository>-labels:<id>, whose labels are the
// image's current labels, marked LabelLabelsOf=<id>. SetLabels
// writes a new record and removes the old one; ListImages and GetImage read
// a record's labels in place of the image's own. Docker has no delete
// protection: SetDeleteProtection does nothing (gc never deletes a channel's
// image in any case).
var (
	_ imagecatalog.ImageAPI       = (*Provider)(nil)
	_ imagecatalog.ImageGetter    = (*Provider)(nil)
	_ imagecatalog.InstanceLister = (*Provider)(nil)
)

// tagPattern is what a Docker tag may be, and so a catalog image id.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func (p *Provider) imageRef(id string) string  { return p.repo + ":" + id }
func (p *Provider) recordRepo() string         { return p.repo + "-labels" }
func (p *Provider) recordRef(id string) string { return p.recordRepo() + ":" + id }

func checkID(id string) error {
	if !tagPattern.MatchString(id) {
		return fmt.Errorf("docker image id %q is not a catalog image id: want the image's tag (its name, such as prebake-debian-12-k8s-1-35-4-amd64-20261201t1504)", id)
	}
	return nil
}

// checkImage is nil when the engine has the image ref; catalogID names it
// in the error when it is a catalog image.
func (p *Provider) checkImage(ctx context.Context, ref, catalogID string) error {
	_, err := p.engine.ImageInspect(ctx, ref)
	switch {
	case cerrdefs.IsNotFound(err):
		return &imageNotFoundError{ref: ref, catalogID: catalogID}
	case err != nil:
		return fmt.Errorf("inspect image %s: %w", ref, err)
	}
	return nil
}

// tagOf returns the tag of ref when ref is a tag of repo.
func tagOf(repo, ref string) (string, bool) {
	tag, ok := strings.CutPrefix(ref, repo+":")
	return tag, ok && tag != ""
}

// records returns the label records by catalog image id.
func (p *Provider) records(ctx context.Context) (map[string]map[string]string, error) {
	recs, err := p.engine.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", p.recordRepo()))})
	if err != nil {
		return nil, fmt.Errorf("docker: list label records (%s): %w", p.recordRepo(), err)
	}
	out := map[string]map[string]string{}
	for _, r := range recs {
		for _, ref := range r.RepoTags {
			if id, ok := tagOf(p.recordRepo(), ref); ok && r.Labels[LabelLabelsOf] == id {
				out[id] = recordLabels(r.Labels)
			}
		}
	}
	return out, nil
}

// recordLabels are a record's labels without its marker.
func recordLabels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	if out == nil {
		out = map[string]string{}
	}
	delete(out, LabelLabelsOf)
	delete(out, LabelLabelsRepository)
	return out
}

// removeImage removes ref; an image already gone is not an error. Two removals of one image
// at once (Cleanup and a relabel, say) can fail the later one with "unrecognized image ID"
// and a 500, not a 404: an image that is gone when looked at again counts as removed.
func (p *Provider) removeImage(ctx context.Context, ref string) error {
	_, err := p.engine.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if _, ierr := p.engine.ImageInspect(ctx, ref); cerrdefs.IsNotFound(ierr) {
		return nil
	}
	return err
}

// ListImages implements imagecatalog.ImageAPI: the tags of the image
// repository whose labels (the record's, where there is one) carry every
// label in selector.
func (p *Provider) ListImages(ctx context.Context, selector map[string]string) ([]imagecatalog.CloudImage, error) {
	ims, err := p.engine.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", p.repo))})
	if err != nil {
		return nil, fmt.Errorf("docker: list images of %s: %w", p.repo, err)
	}
	recs, err := p.records(ctx)
	if err != nil {
		return nil, err
	}
	var out []imagecatalog.CloudImage
	for _, im := range ims {
		for _, ref := range im.RepoTags {
			id, ok := tagOf(p.repo, ref)
			if !ok {
				continue
			}
			labels, ok := recs[id]
			if !ok {
				labels = maps.Clone(im.Labels)
			}
			if !matches(labels, selector) {
				continue
			}
			out = append(out, imagecatalog.CloudImage{ID: id, Description: id, Labels: maps.Clone(labels), Created: time.Unix(im.Created, 0).UTC()})
		}
	}
	slices.SortFunc(out, func(a, b imagecatalog.CloudImage) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// GetImage implements imagecatalog.ImageGetter.
func (p *Provider) GetImage(ctx context.Context, id string) (imagecatalog.CloudImage, error) {
	if err := checkID(id); err != nil {
		return imagecatalog.CloudImage{}, err
	}
	im, err := p.engine.ImageInspect(ctx, p.imageRef(id))
	switch {
	case cerrdefs.IsNotFound(err):
		return imagecatalog.CloudImage{}, fmt.Errorf("docker image %s: %w", p.imageRef(id), imagecatalog.ErrNotFound)
	case err != nil:
		return imagecatalog.CloudImage{}, fmt.Errorf("docker: inspect image %s: %w", p.imageRef(id), err)
	}
	var labels map[string]string
	if im.Config != nil {
		labels = maps.Clone(im.Config.Labels)
	}
	rec, err := p.engine.ImageInspect(ctx, p.recordRef(id))
	switch {
	case err == nil && rec.Config != nil && rec.Config.Labels[LabelLabelsOf] == id:
		labels = recordLabels(rec.Config.Labels)
	case err != nil && !cerrdefs.IsNotFound(err):
		return imagecatalog.CloudImage{}, fmt.Errorf("docker: inspect label record %s: %w", p.recordRef(id), err)
	}
	if labels == nil {
		labels = map[string]string{}
	}
	created, _ := time.Parse(time.RFC3339Nano, im.Created)
	return imagecatalog.CloudImage{ID: id, Description: id, Labels: labels, Created: created.UTC()}, nil
}

// SetLabels implements imagecatalog.ImageAPI: it writes the image's label
// record anew.
func (p *Provider) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	if _, err := p.GetImage(ctx, id); err != nil {
		return err
	}
	return p.writeRecord(ctx, id, labels)
}

// writeRecord makes the label record of id hold labels: a new record image
// takes the tag, and the old one is removed.
func (p *Provider) writeRecord(ctx context.Context, id string, labels map[string]string) error {
	old, err := p.engine.ImageInspect(ctx, p.recordRef(id))
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: inspect label record %s: %w", p.recordRef(id), err)
	}
	if err := p.importRecord(ctx, id, labels); err != nil {
		return err
	}
	if old.ID != "" {
		if err := p.removeImage(ctx, old.ID); err != nil {
			// Cleanup removes it later: it carries its repository's label.
			p.log.Warn("old label record not removed", "image", id, "record", old.ID, "err", err)
		}
	}
	return nil
}

// importRecord makes a new label record of id holding labels and tags it; a record that
// held the tag before is left untagged.
func (p *Provider) importRecord(ctx context.Context, id string, labels map[string]string) error {
	all := maps.Clone(labels)
	if all == nil {
		all = map[string]string{}
	}
	all[LabelLabelsOf] = id
	all[LabelLabelsRepository] = p.repo
	change, err := labelChange(all)
	if err != nil {
		return fmt.Errorf("docker: labels of image %s: %w", id, err)
	}
	var empty bytes.Buffer
	if err := tar.NewWriter(&empty).Close(); err != nil {
		return err
	}
	rc, err := p.engine.ImageImport(ctx, image.ImportSource{Source: &empty, SourceName: "-"}, p.recordRef(id),
		image.ImportOptions{Changes: []string{change}, Message: "prebake: labels of " + p.imageRef(id)})
	if err == nil {
		err = readStream(rc)
	}
	if err != nil {
		return fmt.Errorf("docker: write label record %s: %w", p.recordRef(id), err)
	}
	return nil
}

// labelChange is a Dockerfile LABEL instruction setting labels, for the
// engine's import and commit changes. Values are quoted; "$" is escaped, or
// the engine would expand it as a variable.
func labelChange(labels map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString("LABEL")
	quote := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		if k == "" || strings.ContainsAny(k, "\r\n") || strings.ContainsAny(v, "\r\n") {
			return "", fmt.Errorf("label %q=%q: keys must be non-empty and neither may hold a line break", k, v)
		}
		fmt.Fprintf(&b, ` "%s"="%s"`, quote.Replace(k), quote.Replace(v))
	}
	return b.String(), nil
}

// readStream reads an engine progress stream (JSON messages) to its end and
// returns the error it reports, if any.
func readStream(rc io.ReadCloser) error {
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		err := dec.Decode(&m)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("read the engine's answer: %w", err)
		case m.ErrorDetail != nil && m.ErrorDetail.Message != "":
			return errors.New(m.ErrorDetail.Message)
		case m.Error != "":
			return errors.New(m.Error)
		}
	}
}

// SetDeleteProtection implements imagecatalog.ImageAPI: Docker has none, so
// it does nothing.
func (p *Provider) SetDeleteProtection(context.Context, string, bool) error { return nil }

// DeleteImage implements imagecatalog.ImageAPI: the tag goes (and with it
// the image, unless another tag or a container holds it), then its label
// record. An image a container uses is an error; one already gone is not.
func (p *Provider) DeleteImage(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := p.removeImage(ctx, p.imageRef(id)); err != nil {
		return fmt.Errorf("docker: delete image %s: %w", p.imageRef(id), err)
	}
	if err := p.removeImage(ctx, p.recordRef(id)); err != nil {
		return fmt.Errorf("docker: delete label record %s: %w", p.recordRef(id), err)
	}
	p.log.Info("image deleted", "image", id)
	return nil
}

// ListInstances implements imagecatalog.InstanceLister: every container of
// the cluster and the catalog image it booted from.
func (p *Provider) ListInstances(ctx context.Context) ([]imagecatalog.Instance, error) {
	cs, err := p.engine.ContainerList(ctx, containerListOptions(p.clusterFilter()))
	if err != nil {
		return nil, fmt.Errorf("docker: list containers of cluster %q: %w", p.cluster, err)
	}
	out := make([]imagecatalog.Instance, 0, len(cs))
	for _, c := range cs {
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, imagecatalog.Instance{ID: providerid.Format(name), Image: c.Labels[providers.LabelImage]})
	}
	return out, nil
}

// orphanRecords returns the label records of the repository that stand for no
// image: an untagged one (replaced, but not removed), or one whose image is
// gone. Another repository's records, and so another cluster's, are left alone.
func (p *Provider) orphanRecords(ctx context.Context) ([]string, error) {
	var out []string
	dangling, err := p.engine.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("dangling", "true"), filters.Arg("label", LabelLabelsRepository+"="+p.repo))})
	if err != nil {
		return nil, fmt.Errorf("docker: list untagged label records: %w", err)
	}
	for _, d := range dangling {
		out = append(out, d.ID)
	}
	recs, err := p.records(ctx)
	if err != nil {
		return out, err
	}
	for _, id := range slices.Sorted(maps.Keys(recs)) {
		_, err := p.engine.ImageInspect(ctx, p.imageRef(id))
		switch {
		case cerrdefs.IsNotFound(err):
			out = append(out, p.recordRef(id))
		case err != nil:
			return out, fmt.Errorf("docker: inspect image %s: %w", p.imageRef(id), err)
		}
	}
	return out, nil
}

// LabelLabelsOf marks a label record: a tiny image whose labels stand for
// those of the catalog image named by the value, since a Docker image's own
// labels can't change.
const LabelLabelsOf = "prebake.dev/labels-of"

// LabelLabelsRepository names the image repository of a label record's image. An untagged
// (replaced) record has only its labels to say whose it is: Cleanup removes the untagged
// records of its own repository and no other.
const LabelLabelsRepository = "prebake.dev/labels-repository"
