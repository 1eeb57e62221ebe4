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

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce/providerid"
)

// ownerFilter is the list filter for everything this cluster owns.
func (p *Provider) ownerFilter() string {
	return fmt.Sprintf("labels.%s = %q", LabelKey(providers.LabelCluster), p.o.Cluster)
}

// List implements providers.Provider: one aggregatedList scan of every zone
// by the cluster label, 500 instances a page.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
		Project: p.o.Project, Filter: proto.String(p.ownerFilter()), MaxResults: proto.Uint32(pageSize),
	})
	var out []providers.Instance
	for {
		pair, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("gce: list instances of cluster %q in project %q: %w", p.o.Cluster, p.o.Project, err)
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		for _, in := range pair.Value.GetInstances() {
			li := p.instance(zone, in)
			if li.Standby.Phase == providers.StandbyWarming && in.GetStatus() == "RUNNING" {
				p.standbyStatus(ctx, zone, in, &li)
			}
			out = append(out, li)
		}
	}
	return out, nil
}

// instance is the core's view of a GCE instance.
func (p *Provider) instance(zone string, in *computepb.Instance) providers.Instance {
	l := FromGCE(in.GetLabels())
	name := l[providers.LabelMachine]
	if name == "" {
		name = in.GetName()
	}
	out := providers.Instance{
		ProviderID: providerid.Format(providerid.Ref{Project: p.o.Project, Zone: zone, Name: in.GetName()}),
		Name:       name,
		Group:      l[providers.LabelGroup],
		State:      state(in.GetStatus()),
		ImageKind:  providers.ImageKind(l[providers.LabelImageKind]),
		Image:      l[providers.LabelImage],
	}
	if t, err := time.Parse(time.RFC3339, in.GetCreationTimestamp()); err == nil {
		out.CreatedAt = t
	}
	if out.ImageKind == "" {
		out.ImageKind = providers.ImageRuntimeInstall
	}
	if out.Standby = standbyOf(in); out.Standby.Phase != providers.StandbyNone && out.State == providers.StateDeleting {
		// A standby STOPPING or SUSPENDING is being parked, not deleted.
		out.State = providers.StateRunning
	}
	out.Error = interruptedTake(in, p.o.Now())
	return out
}

// state maps an instance status to the lifecycle CA sees. STOPPING is what
// a delete shows first; a stopped (TERMINATED), suspended or repairing
// instance still exists, and whether its node is healthy is CA's call.
func state(s string) providers.InstanceState {
	switch s {
	case "PROVISIONING", "STAGING", "PENDING":
		return providers.StateCreating
	case "STOPPING", "DEPROVISIONING":
		return providers.StateDeleting
	}
	return providers.StateRunning
}

// ProviderID implements providers.Provider: the name is ours, so the id is
// known before the instance exists.
func (p *Provider) ProviderID(req providers.CreateRequest) (string, bool) {
	return providerid.Format(providerid.Ref{Project: p.o.Project, Zone: req.Location, Name: req.Name}), true
}

// Create implements providers.Provider. It returns once the insert
// operation is DONE, since stockouts and quota show only there; the boot is
// followed through List.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	if req.Location == "" {
		return providers.Instance{}, fmt.Errorf("gce: instance %q (group %q) has no zone: set the group's location", req.Name, req.Group)
	}
	if n := len(req.UserData); n > maxUserData {
		return providers.Instance{}, &userDataTooLargeError{name: req.Name, group: req.Group, size: n}
	}
	if in, found, err := p.byName(ctx, req.Location, req.Name); err != nil || found {
		return in, err
	}
	mt, err := p.MachineType(ctx, req.MachineType, req.Location)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("gce: create %q (group %q): %w", req.Name, req.Group, err)
	}
	kind := req.ImageKind
	if kind == "" {
		kind = providers.ImageRuntimeInstall
	}
	labels := map[string]string{
		providers.LabelCluster:   p.o.Cluster,
		providers.LabelGroup:     req.Group,
		providers.LabelMachine:   req.Name,
		providers.LabelImageKind: string(kind),
	}
	// The core resolved the group's channel in the image catalog at
	// IncreaseSize (or fell back to runtime install and said why).
	image := req.Image
	source := p.bootImage(image, mt.Arch)
	if image != "" {
		labels[providers.LabelImage] = image
	}
	if req.Standby != "" {
		if !slices.Contains(standbyStates, req.Standby) {
			return providers.Instance{}, fmt.Errorf("gce: create standby %q (group %q): %w: state %q; the gce provider parks standbys stopped or suspended", req.Name, req.Group, providers.ErrStandbyUnsupported, req.Standby)
		}
		labels[providers.LabelStandby] = string(req.Standby)
	}
	body := p.instanceResource(req, mt, source, ToGCE(labels))
	op, err := p.instances.Insert(ctx, &computepb.InsertInstanceRequest{Project: p.o.Project, Zone: req.Location, InstanceResource: body})
	if isConflict(err) {
		// An earlier attempt won the race, or its answer was lost: that
		// instance is the one.
		if in, found, lerr := p.byName(ctx, req.Location, req.Name); lerr != nil || found {
			return in, lerr
		}
	}
	if err == nil {
		err = p.waitZone(ctx, req.Location, op)
	}
	if err != nil {
		return providers.Instance{}, fmt.Errorf("gce: create instance %q (group %q, type %s, zone %s): %w",
			req.Name, req.Group, req.MachineType, req.Location, err)
	}
	p.log.Info("gce instance created", "group", req.Group, "instance", req.Name, "providerID", p.mustID(req))
	out := providers.Instance{
		ProviderID: p.mustID(req), Name: req.Name, Group: req.Group, State: providers.StateCreating,
		Image: image, ImageKind: kind, CreatedAt: p.o.Now(),
	}
	if req.Standby != "" {
		out.Standby = providers.Standby{State: req.Standby, Phase: providers.StandbyWarming}
	}
	return out, nil
}

// maxUserData is GCE's limit on one metadata value, which user-data is:
// 262144 bytes (the Metadata resource's reference,
// https://cloud.google.com/compute/docs/reference/rest/v1/Metadata).
const maxUserData = 256 << 10

// userDataTooLargeError is user-data the API would refuse, caught before
// the insert so the error names the cause rather than "items[0]".
type userDataTooLargeError struct {
	name, group string
	size        int
}

func (e *userDataTooLargeError) Error() string {
	return fmt.Sprintf("gce: user-data of instance %q (group %q) is %d bytes; GCE takes at most %d bytes in a metadata value: shorten the group's userDataFile or bootstrap files",
		e.name, e.group, e.size, maxUserData)
}

func (p *Provider) mustID(req providers.CreateRequest) string {
	id, _ := p.ProviderID(req)
	return id
}

// instanceResource is the insert body: one boot disk from source, one
// network interface, the labels, and user-data as metadata.
func (p *Provider) instanceResource(req providers.CreateRequest, mt providers.MachineType, source string, labels map[string]string) *computepb.Instance {
	ni := &computepb.NetworkInterface{}
	if p.o.Network != "" {
		ni.Network = proto.String(p.o.Network)
	}
	if p.o.Subnetwork != "" {
		ni.Subnetwork = proto.String(p.o.Subnetwork)
	}
	if p.o.ExternalIP {
		ni.AccessConfigs = []*computepb.AccessConfig{{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}}
	}
	in := &computepb.Instance{
		Name:        proto.String(req.Name),
		MachineType: proto.String("zones/" + req.Location + "/machineTypes/" + req.MachineType),
		Labels:      labels,
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(source), DiskSizeGb: proto.Int64(p.o.DiskSizeGB)},
		}},
		NetworkInterfaces: []*computepb.NetworkInterface{ni},
	}
	if p.o.WireGuardFirewall {
		in.Tags = &computepb.Tags{Items: []string{p.WireGuardTag()}}
	}
	var items []*computepb.Items
	if len(req.UserData) > 0 {
		items = append(items, &computepb.Items{Key: proto.String("user-data"), Value: proto.String(string(req.UserData))})
	}
	if req.Standby != "" {
		// The standby reports its status as a guest attribute (standby.go).
		items = append(items, &computepb.Items{Key: proto.String(enableGuestAttributes), Value: proto.String("TRUE")})
	}
	if len(items) > 0 {
		in.Metadata = &computepb.Metadata{Items: items}
	}
	if mt.GPUs > 0 {
		// GPU machines can't live-migrate: GCE refuses them unless host
		// maintenance terminates them.
		in.Scheduling = &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE")}
	}
	if p.o.ServiceAccount != "" {
		in.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(p.o.ServiceAccount),
			Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}}}
	}
	return in
}

// byName finds our instance with this name in zone.
func (p *Provider) byName(ctx context.Context, zone, name string) (providers.Instance, bool, error) {
	in, err := p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: p.o.Project, Zone: zone, Instance: name})
	if isNotFound(err) {
		return providers.Instance{}, false, nil
	}
	if err != nil {
		return providers.Instance{}, false, fmt.Errorf("gce: look up instance %q in %s: %w", name, zone, err)
	}
	if FromGCE(in.GetLabels())[providers.LabelCluster] != p.o.Cluster {
		return providers.Instance{}, false, &foreignError{ref: providerid.Ref{Project: p.o.Project, Zone: zone, Name: name}, labels: maps.Clone(in.GetLabels())}
	}
	return p.instance(zone, in), true, nil
}

// foreignError is an instance whose name we want but that is not ours.
type foreignError struct {
	ref    providerid.Ref
	labels map[string]string
}

func (e *foreignError) Error() string {
	return fmt.Sprintf("gce: instance %s exists but is not owned by this cluster (label %s=%q); rename or delete it, or use another cluster name",
		providerid.Format(e.ref), LabelKey(providers.LabelCluster), e.labels[LabelKey(providers.LabelCluster)])
}

// Delete implements providers.Provider. An instance that is gone is not an
// error; an instance that is not ours is refused. It returns once the
// delete is accepted; List shows the instance as deleting until it is gone.
func (p *Provider) Delete(ctx context.Context, id string) error {
	ref, err := providerid.Parse(id)
	if err != nil {
		return err
	}
	if ref.Project != p.o.Project {
		return fmt.Errorf("gce: refusing to delete %s: it is in project %q, this provider manages %q", id, ref.Project, p.o.Project)
	}
	in, err := p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name})
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gce: get instance %s: %w", id, err)
	}
	l := FromGCE(in.GetLabels())
	if l[providers.LabelCluster] != p.o.Cluster {
		return fmt.Errorf("gce: refusing to delete %s: it is not owned by cluster %q", id, p.o.Cluster)
	}
	if state(in.GetStatus()) == providers.StateDeleting {
		return nil
	}
	if _, err := p.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name}); err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("gce: delete instance %s: %w", id, err)
	}
	p.log.Info("gce instance deleted", "group", l[providers.LabelGroup], "instance", ref.Name, "providerID", id)
	return nil
}
