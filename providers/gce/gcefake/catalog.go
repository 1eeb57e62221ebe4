package gcefake

import (
	"slices"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// MachineType is a machine type the fake sells.
type MachineType struct {
	Name     string
	CPUs     int32
	MemoryMB int32
	// Arch is the API's architecture: X86_64 or ARM64.
	Arch             string
	Accelerator      string
	AcceleratorCount int32
	// Zones the type is sold in; nil means every zone.
	Zones []string
}

// DefaultZones are the zones of a fake whose Options leave them out.
func DefaultZones() []string {
	return []string{"europe-west4-a", "europe-west4-b", "us-central1-a", "us-central1-f"}
}

// DefaultMachineTypes is a small real-world catalogue: shared-core and
// general purpose x86, Arm (t2a, c4a), and GPU types with accelerators.
func DefaultMachineTypes() []MachineType {
	return []MachineType{
		{Name: "e2-standard-2", CPUs: 2, MemoryMB: 8192, Arch: "X86_64"},
		{Name: "e2-standard-4", CPUs: 4, MemoryMB: 16384, Arch: "X86_64"},
		{Name: "n2-standard-8", CPUs: 8, MemoryMB: 32768, Arch: "X86_64"},
		{Name: "t2a-standard-4", CPUs: 4, MemoryMB: 16384, Arch: "ARM64", Zones: []string{"europe-west4-a", "us-central1-a", "us-central1-f"}},
		{Name: "c4a-standard-4", CPUs: 4, MemoryMB: 16384, Arch: "ARM64"},
		{Name: "g2-standard-8", CPUs: 8, MemoryMB: 32768, Arch: "X86_64", Accelerator: "nvidia-l4", AcceleratorCount: 1,
			Zones: []string{"europe-west4-a", "us-central1-a"}},
		{Name: "a2-highgpu-1g", CPUs: 12, MemoryMB: 87040, Arch: "X86_64", Accelerator: "nvidia-tesla-a100", AcceleratorCount: 1,
			Zones: []string{"us-central1-a", "us-central1-f"}},
	}
}

func (m MachineType) soldIn(zone string) bool {
	return m.Zones == nil || slices.Contains(m.Zones, zone)
}

func (f *Fake) machineTypePB(project, zone string, m MachineType, id uint64) *computepb.MachineType {
	pb := &computepb.MachineType{
		Kind: proto.String("compute#machineType"), Id: proto.Uint64(id), Name: proto.String(m.Name),
		Description: proto.String(m.Name), GuestCpus: proto.Int32(m.CPUs), MemoryMb: proto.Int32(m.MemoryMB),
		Zone: proto.String(zone), Architecture: proto.String(m.Arch), IsSharedCpu: proto.Bool(false),
		MaximumPersistentDisks: proto.Int32(128), MaximumPersistentDisksSizeGb: proto.Int64(263168),
		SelfLink: proto.String(f.selfLink(project + "/zones/" + zone + "/machineTypes/" + m.Name)),
	}
	if m.AcceleratorCount > 0 {
		pb.Accelerators = []*computepb.Accelerators{{GuestAcceleratorType: proto.String(m.Accelerator), GuestAcceleratorCount: proto.Int32(m.AcceleratorCount)}}
	}
	return pb
}

// Public image projects and families the fake serves read-only.
const (
	UbuntuProject      = "ubuntu-os-cloud"
	UbuntuFamilyAMD64  = "ubuntu-2404-lts-amd64"
	UbuntuFamilyARM64  = "ubuntu-2404-lts-arm64"
	ubuntuImageAMD64   = "ubuntu-2404-noble-amd64-v20261101"
	ubuntuImageARM64   = "ubuntu-2404-noble-arm64-v20261101"
	ubuntuImageAMD64v0 = "ubuntu-2404-noble-amd64-v20261001"
)

func publicImages(now time.Time) []*image {
	mk := func(name, family, arch string, created time.Time, deprecated bool) *image {
		pb := &computepb.Image{
			Kind: proto.String("compute#image"), Name: proto.String(name), Family: proto.String(family),
			Architecture: proto.String(arch), Status: proto.String("READY"), DiskSizeGb: proto.Int64(10),
			CreationTimestamp: proto.String(timestamp(created)), LabelFingerprint: proto.String(fingerprint(nil)),
			SelfLink: proto.String("https://www.googleapis.com/compute/v1/projects/" + UbuntuProject + "/global/images/" + name),
		}
		if deprecated {
			pb.Deprecated = &computepb.DeprecationStatus{State: proto.String("DEPRECATED"),
				Replacement: proto.String("https://www.googleapis.com/compute/v1/projects/" + UbuntuProject + "/global/images/" + ubuntuImageAMD64)}
		}
		return &image{project: UbuntuProject, pb: pb, created: created}
	}
	return []*image{
		mk(ubuntuImageAMD64v0, UbuntuFamilyAMD64, "X86_64", now.Add(-60*24*time.Hour), true),
		mk(ubuntuImageAMD64, UbuntuFamilyAMD64, "X86_64", now.Add(-30*24*time.Hour), false),
		mk(ubuntuImageARM64, UbuntuFamilyARM64, "ARM64", now.Add(-30*24*time.Hour), false),
	}
}

func (f *Fake) getMachineType(project, zone, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.zones[zone] {
		return nil, notFound("projects/" + project + "/zones/" + zone)
	}
	for i, m := range f.types {
		if m.Name == name && m.soldIn(zone) {
			return f.machineTypePB(project, zone, m, uint64(800_000+i)), nil
		}
	}
	return nil, notFound("projects/" + project + "/zones/" + zone + "/machineTypes/" + name)
}

func (f *Fake) listMachineTypes(project, zone string, q map[string][]string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.zones[zone] {
		return nil, notFound("projects/" + project + "/zones/" + zone)
	}
	flt, ferr := parseFilter(first(q["filter"]))
	if ferr != nil {
		return nil, ferr
	}
	var items []*computepb.MachineType
	for i, m := range f.types {
		if !m.soldIn(zone) || !flt.matches(fields{name: m.Name}) {
			continue
		}
		items = append(items, f.machineTypePB(project, zone, m, uint64(800_000+i)))
	}
	from, to, next, err := page(q, len(items))
	if err != nil {
		return nil, err
	}
	res := &computepb.MachineTypeList{Kind: proto.String("compute#machineTypeList"), Items: items[from:to],
		Id:       proto.String("projects/" + project + "/zones/" + zone + "/machineTypes"),
		SelfLink: proto.String(f.selfLink(project + "/zones/" + zone + "/machineTypes"))}
	if next != "" {
		res.NextPageToken = proto.String(next)
	}
	return res, nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
