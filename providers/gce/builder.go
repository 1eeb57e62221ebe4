package gce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce/providerid"
)

// The provider is the image catalog's Compute Engine backend. Images are the
// project's images (global: the catalog's location is ""), an image's id is
// its name, and labels go through LabelKey. Builders are instances without a
// service account, so they can't label themselves: the builder writes its
// report as the guest attribute ReportNamespace/ReportKey through its
// metadata server, and BuilderReport reads it with getGuestAttributes.
var (
	_ imagecatalog.ImageAPI       = (*Provider)(nil)
	_ imagecatalog.ImageGetter    = (*Provider)(nil)
	_ imagecatalog.BuildAPI       = (*Provider)(nil)
	_ imagecatalog.InstanceLister = (*Provider)(nil)
)

// The guest attribute a builder leaves its report in: from inside the VM,
//
//	PUT http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/prebake/report
//	Metadata-Flavor: Google
//
// with the report's JSON as the body. BootBuilder turns guest attributes on
// (metadata enable-guest-attributes=TRUE).
const (
	ReportNamespace = "prebake"
	ReportKey       = "report"
)

// ListImages implements imagecatalog.ImageAPI (see Images.ListImages).
func (p *Provider) ListImages(ctx context.Context, selector map[string]string) ([]imagecatalog.CloudImage, error) {
	return p.images.ListImages(ctx, selector)
}

// GetImage implements imagecatalog.ImageGetter (see Images.GetImage).
func (p *Provider) GetImage(ctx context.Context, id string) (imagecatalog.CloudImage, error) {
	return p.images.GetImage(ctx, id)
}

// SetLabels implements imagecatalog.ImageAPI (see Images.SetLabels).
func (p *Provider) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	return p.images.SetLabels(ctx, id, labels)
}

// SetDeleteProtection implements imagecatalog.ImageAPI: GCE images have
// none, so it does nothing.
func (p *Provider) SetDeleteProtection(ctx context.Context, id string, on bool) error {
	return p.images.SetDeleteProtection(ctx, id, on)
}

// DeleteImage implements imagecatalog.ImageAPI (see Images.DeleteImage).
func (p *Provider) DeleteImage(ctx context.Context, id string) error {
	return p.images.DeleteImage(ctx, id)
}

// ListInstances implements imagecatalog.InstanceLister (see
// Images.ListInstances).
func (p *Provider) ListInstances(ctx context.Context) ([]imagecatalog.Instance, error) {
	return p.images.ListInstances(ctx)
}

// ownership are the labels that make an instance one of the cluster's
// nodes. A builder never carries them, so List (and the autoscaler) never
// counts it.
var ownership = []string{providers.LabelCluster, providers.LabelGroup, providers.LabelMachine}

func (p *Provider) builderID(zone, name string) string {
	return providerid.Format(providerid.Ref{Project: p.o.Project, Zone: zone, Name: name})
}

// builderRef parses a builder id (gce://<project>/<zone>/<name>, what
// BootBuilder returns) of this provider's project.
func (p *Provider) builderRef(id string) (providerid.Ref, error) {
	ref, err := providerid.Parse(id)
	if err != nil {
		return ref, fmt.Errorf("gce builder id: %w", err)
	}
	if ref.Project != p.o.Project {
		return ref, fmt.Errorf("gce builder %s is in project %q; this provider works in %q", id, ref.Project, p.o.Project)
	}
	return ref, nil
}

func (p *Provider) builderState(zone string, in *computepb.Instance) imagecatalog.BuilderState {
	return imagecatalog.BuilderState{ID: p.builderID(zone, in.GetName()), Status: in.GetStatus(), Labels: FromGCE(in.GetLabels())}
}

// getBuilder reads the builder; found is false when there is none. An
// instance of the cluster is refused: a builder's name never names a node.
func (p *Provider) getBuilder(ctx context.Context, zone, name string) (*computepb.Instance, bool, error) {
	in, err := p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: p.o.Project, Zone: zone, Instance: name})
	if isNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("gce: get builder %q in zone %s: %w", name, zone, err)
	}
	if c, ok := FromGCE(in.GetLabels())[providers.LabelCluster]; ok {
		return nil, false, fmt.Errorf("gce: instance %q in zone %s carries %s=%q: it is a cluster's node, not a builder; never build or delete through it (rename the builder or delete the instance by hand)",
			name, zone, LabelKey(providers.LabelCluster), c)
	}
	return in, true, nil
}

// BootBuilder implements imagecatalog.BuildAPI: an instance of the spec's
// name in its zone (spec.Location, else Options.BuilderZone), booted from
// spec.BaseImage (an image or family path, as for groups) with the
// user-data and guest attributes on, an external address (apt needs one),
// no service account, and the spec's labels without the ownership labels.
// It returns once the insert operation is DONE. A builder of the same name
// that already exists is returned as it is.
func (p *Provider) BootBuilder(ctx context.Context, spec imagecatalog.BuilderSpec) (imagecatalog.BuilderState, error) {
	zone := spec.Location
	if zone == "" {
		zone = p.o.BuilderZone
	}
	if zone == "" {
		return imagecatalog.BuilderState{}, fmt.Errorf("gce: builder %q has no zone: set builderLocation in the recipe's image (a zone such as europe-west4-a)", spec.Name)
	}
	if in, found, err := p.getBuilder(ctx, zone, spec.Name); err != nil || found {
		if found {
			return p.builderState(zone, in), nil
		}
		return imagecatalog.BuilderState{}, err
	}
	mt, err := p.MachineType(ctx, spec.MachineType, zone)
	if err != nil {
		return imagecatalog.BuilderState{}, fmt.Errorf("gce: builder %q: %w (set machineType in the recipe)", spec.Name, err)
	}
	op, err := p.instances.Insert(ctx, &computepb.InsertInstanceRequest{Project: p.o.Project, Zone: zone, InstanceResource: p.builderResource(spec, zone, mt)})
	if isConflict(err) {
		// An earlier attempt's insert won, or its answer was lost.
		if in, found, gerr := p.getBuilder(ctx, zone, spec.Name); gerr != nil || found {
			if found {
				return p.builderState(zone, in), nil
			}
			return imagecatalog.BuilderState{}, gerr
		}
	}
	if err == nil {
		err = p.waitZone(ctx, zone, op)
	}
	if err != nil {
		return imagecatalog.BuilderState{}, fmt.Errorf("gce: create builder %q (type %s, image %s, zone %s): %w; check the recipe's baseImage, machineType and builderLocation",
			spec.Name, spec.MachineType, spec.BaseImage, zone, err)
	}
	p.log.Info("gce builder created", "instance", spec.Name, "zone", zone)
	in, found, err := p.getBuilder(ctx, zone, spec.Name)
	if err != nil {
		return imagecatalog.BuilderState{}, err
	}
	if !found {
		return imagecatalog.BuilderState{}, fmt.Errorf("gce builder %q in zone %s: %w right after its insert finished (deleted by someone?)", spec.Name, zone, imagecatalog.ErrNotFound)
	}
	return p.builderState(zone, in), nil
}

// builderResource is the builder's insert body.
func (p *Provider) builderResource(spec imagecatalog.BuilderSpec, zone string, mt providers.MachineType) *computepb.Instance {
	labels := maps.Clone(spec.Labels)
	for _, k := range ownership {
		delete(labels, k)
	}
	ni := &computepb.NetworkInterface{
		AccessConfigs: []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}},
	}
	if p.o.Network != "" {
		ni.Network = proto.String(p.o.Network)
	}
	if p.o.Subnetwork != "" {
		ni.Subnetwork = proto.String(p.o.Subnetwork)
	}
	items := []*computepb.Items{{Key: proto.String(enableGuestAttributes), Value: proto.String("TRUE")}}
	if len(spec.UserData) > 0 {
		items = append(items, &computepb.Items{Key: proto.String("user-data"), Value: proto.String(string(spec.UserData))})
	}
	in := &computepb.Instance{
		Name:        proto.String(spec.Name),
		MachineType: proto.String("zones/" + zone + "/machineTypes/" + spec.MachineType),
		Labels:      ToGCE(labels),
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(spec.BaseImage), DiskSizeGb: proto.Int64(p.o.DiskSizeGB)},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{ni},
		Metadata:          &computepb.Metadata{Items: items},
		// No ServiceAccounts: the builder needs no API access, and its
		// report goes through its metadata server.
	}
	if mt.GPUs > 0 {
		in.Scheduling = &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE")}
	}
	return in
}

// Builder implements imagecatalog.BuildAPI.
func (p *Provider) Builder(ctx context.Context, id string) (imagecatalog.BuilderState, error) {
	ref, err := p.builderRef(id)
	if err != nil {
		return imagecatalog.BuilderState{}, err
	}
	in, found, err := p.getBuilder(ctx, ref.Zone, ref.Name)
	if err != nil {
		return imagecatalog.BuilderState{}, err
	}
	if !found {
		return imagecatalog.BuilderState{}, fmt.Errorf("gce builder %q in zone %s: %w (deleted while building?)", ref.Name, ref.Zone, imagecatalog.ErrNotFound)
	}
	return p.builderState(ref.Zone, in), nil
}

// BuilderReport implements imagecatalog.BuildAPI: the guest attribute
// ReportNamespace/ReportKey, through instances.getGuestAttributes. The API
// answers 404 while the builder has written none: ok is false then. Other
// errors (a 429 or 500 among them) are returned for the caller to retry;
// the client library itself retries 503 and 504.
func (p *Provider) BuilderReport(ctx context.Context, b imagecatalog.BuilderState) ([]byte, bool, error) {
	ref, err := p.builderRef(b.ID)
	if err != nil {
		return nil, false, err
	}
	path := ReportNamespace + "/" + ReportKey
	ga, err := p.instances.GetGuestAttributes(ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: p.o.Project, Zone: ref.Zone, Instance: ref.Name, QueryPath: proto.String(path)})
	if isNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("gce: read the report of builder %q in zone %s (guest attribute %s): %w", ref.Name, ref.Zone, path, err)
	}
	for _, e := range ga.GetQueryValue().GetItems() {
		if e.GetNamespace() == ReportNamespace && e.GetKey() == ReportKey {
			return []byte(e.GetValue()), true, nil
		}
	}
	return nil, false, nil
}

// Snapshot implements imagecatalog.BuildAPI: stop the builder (so its disk
// is consistent), wait until it is TERMINATED, image its boot disk with the
// description and labels, and wait until the image is READY. The image's
// name is the description when that is a valid GCE name (catalog image
// names are), otherwise one derived from it.
func (p *Provider) Snapshot(ctx context.Context, builderID, description string, labels map[string]string) (imagecatalog.CloudImage, error) {
	ref, err := p.builderRef(builderID)
	if err != nil {
		return imagecatalog.CloudImage{}, err
	}
	where := fmt.Sprintf("builder %q in zone %s", ref.Name, ref.Zone)
	op, err := p.instances.Stop(ctx, &computepb.StopInstanceRequest{Project: p.o.Project, Zone: ref.Zone, Instance: ref.Name})
	if err == nil {
		err = p.waitZone(ctx, ref.Zone, op)
	}
	if err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("gce: stop %s: %w", where, err)
	}
	disk, err := p.stoppedBootDisk(ctx, ref)
	if err != nil {
		return imagecatalog.CloudImage{}, err
	}
	name := imageName(description)
	iop, err := p.imagesAPI.Insert(ctx, &computepb.InsertImageRequest{Project: p.o.Project, ImageResource: &computepb.Image{
		Name: proto.String(name), Description: proto.String(description), SourceDisk: proto.String(disk), Labels: ToGCE(labels)}})
	switch {
	case isConflict(err):
		// A retry whose first insert went through: that image is ours if
		// it was made from this disk.
		x, gerr := p.imagesAPI.Get(ctx, &computepb.GetImageRequest{Project: p.o.Project, Image: name})
		if gerr != nil {
			return imagecatalog.CloudImage{}, fmt.Errorf("gce: image %q of %s: %w, and reading it failed: %w", name, where, err, gerr)
		}
		if !sameResource(x.GetSourceDisk(), disk) {
			return imagecatalog.CloudImage{}, fmt.Errorf("gce: image %q of %s: the name is taken by an image of another disk (%s); delete it, or build again for a new name: %w",
				name, where, x.GetSourceDisk(), err)
		}
	case err == nil:
		err = p.waitGlobalProto(ctx, iop.Proto())
		if err != nil {
			return imagecatalog.CloudImage{}, fmt.Errorf("gce: image %q of %s: %w", name, where, err)
		}
	default:
		return imagecatalog.CloudImage{}, fmt.Errorf("gce: image %q of %s (disk %s): %w", name, where, disk, err)
	}
	if err := p.waitImageReady(ctx, name); err != nil {
		return imagecatalog.CloudImage{}, fmt.Errorf("gce: image %q of %s: %w", name, where, err)
	}
	p.log.Info("gce builder imaged", "instance", ref.Name, "zone", ref.Zone, "image", name)
	return p.images.GetImage(ctx, name)
}

// stoppedBootDisk waits until the builder is TERMINATED (the stop
// operation ends when it is, but the status is what images.insert checks)
// and returns its boot disk's URL.
func (p *Provider) stoppedBootDisk(ctx context.Context, ref providerid.Ref) (string, error) {
	where := fmt.Sprintf("builder %q in zone %s", ref.Name, ref.Zone)
	pause := pollPause()
	for {
		if err := pause(ctx); err != nil {
			return "", fmt.Errorf("gce: %s did not stop: %w", where, err)
		}
		in, found, err := p.getBuilder(ctx, ref.Zone, ref.Name)
		if err != nil {
			return "", err
		}
		if !found {
			return "", fmt.Errorf("gce %s: %w while stopping", where, imagecatalog.ErrNotFound)
		}
		if in.GetStatus() != "TERMINATED" {
			continue
		}
		for _, d := range in.GetDisks() {
			if d.GetBoot() && d.GetSource() != "" {
				return d.GetSource(), nil
			}
		}
		return "", fmt.Errorf("gce: %s has no boot disk to image", where)
	}
}

// waitImageReady waits until the image is READY; FAILED is an error.
func (p *Provider) waitImageReady(ctx context.Context, name string) error {
	pause := pollPause()
	for {
		if err := pause(ctx); err != nil {
			return fmt.Errorf("not READY: %w", err)
		}
		x, err := p.imagesAPI.Get(ctx, &computepb.GetImageRequest{Project: p.o.Project, Image: name})
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		switch x.GetStatus() {
		case "READY":
			return nil
		case "FAILED":
			return fmt.Errorf("status FAILED: delete it and build again")
		}
	}
}

// sameResource compares two resource references that may differ in form
// (full URL or relative "projects/..." path).
func sameResource(a, b string) bool {
	rel := func(s string) string {
		if i := strings.Index(s, "projects/"); i >= 0 {
			return s[i:]
		}
		return s
	}
	return a != "" && rel(a) == rel(b)
}

var gceNameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

var notNameChars = regexp.MustCompile(`[^a-z0-9]+`)

// imageName is description when it is a valid GCE resource name, else a
// name made from it: lower-case, runs of other characters as "-", after a
// "prebake-" prefix and before 8 hex digits of its hash, so that
// different descriptions give different names.
func imageName(description string) string {
	if gceNameRE.MatchString(description) {
		return description
	}
	sum := sha256.Sum256([]byte(description))
	suffix := "-" + hex.EncodeToString(sum[:4])
	stem := strings.Trim(notNameChars.ReplaceAllString(strings.ToLower(description), "-"), "-")
	stem = "prebake-" + stem
	if limit := 63 - len(suffix); len(stem) > limit {
		stem = stem[:limit]
	}
	return strings.TrimSuffix(stem, "-") + suffix
}

// DeleteBuilder implements imagecatalog.BuildAPI. It refuses an instance
// of the cluster; one already gone is not an error. It returns once the
// delete is accepted.
func (p *Provider) DeleteBuilder(ctx context.Context, id string) error {
	ref, err := p.builderRef(id)
	if err != nil {
		return err
	}
	if _, found, err := p.getBuilder(ctx, ref.Zone, ref.Name); err != nil || !found {
		return err
	}
	if _, err := p.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: p.o.Project, Zone: ref.Zone, Instance: ref.Name}); err != nil && !isNotFound(err) {
		return fmt.Errorf("gce: delete builder %q in zone %s: %w (delete it by hand: gcloud compute instances delete %s --zone %s)", ref.Name, ref.Zone, err, ref.Name, ref.Zone)
	}
	p.log.Info("gce builder deleted", "instance", ref.Name, "zone", ref.Zone)
	return nil
}
