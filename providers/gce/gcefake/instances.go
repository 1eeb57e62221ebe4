package gcefake

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

type instance struct {
	project, zone string
	pb            *computepb.Instance
	// pending is true until the insert operation is DONE: get and list
	// show the instance as PROVISIONING meanwhile, as the real API does;
	// a failed insert removes it.
	pending     bool
	created     time.Time
	deleteAt    time.Time // zero unless deleting
	sourceImage string    // the boot disk's image, "projects/p/global/images/n"
	disk        string    // key of the boot disk in f.disks
	// power is where the instance stands in its lifecycle once inserted
	// (lifecycle.go); bootAt is when its latest boot began (the insert's
	// or a start's operation ended), from which a powered-on instance is
	// PROVISIONING, STAGING, then RUNNING.
	power  powerState
	bootAt time.Time
	// guest holds the guest attributes the instance wrote through its
	// metadata server, by "namespace/key".
	guest map[string]string
	// md is the instance's metadata server, started by MetadataURL.
	md *httptest.Server
}

type disk struct {
	project, zone, name string
	sourceImage         string
	user                string // key of the instance using it; "" once detached
}

type operation struct {
	pb      *computepb.Operation
	project string
	scope   string // "zones/<zone>" or "global"
	doneAt  time.Time
	fault   *Fault
	onDone  func(failed bool) // runs once, under f.mu, when the operation ends
}

// Instance is the fake's view of an instance, for test assertions.
type Instance struct {
	Project, Zone, Name string
	MachineType         string // the short name, such as e2-standard-2
	Status              string
	Labels              map[string]string
	// Metadata holds the metadata items, user-data among them.
	Metadata map[string]string
	// UserData is the metadata item user-data: what a test playing the
	// guest (a builder) reads.
	UserData string
	// GuestAttributes are what the guest wrote through its metadata
	// server, by "namespace/key".
	GuestAttributes map[string]string
	// ServiceAccounts are the e-mails of the service accounts it runs as.
	ServiceAccounts []string
	// ExternalNAT is true when an interface has a ONE_TO_ONE_NAT access
	// config (an external address).
	ExternalNAT bool
	// Tags are the network tags firewall rules select instances by.
	Tags        []string
	SourceImage string // "projects/<p>/global/images/<name>"
	Created     time.Time
}

// Instances returns every instance that exists (insert accepted, delete
// not yet finished), sorted by zone and name; one whose insert operation
// still runs is PROVISIONING.
func (f *Fake) Instances() []Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	var out []Instance
	for _, in := range f.sortedInstances("") {
		v := Instance{Project: in.project, Zone: in.zone, Name: in.pb.GetName(), MachineType: lastSegment(in.pb.GetMachineType()),
			Status: f.status(in), Labels: maps.Clone(in.pb.GetLabels()), Metadata: map[string]string{},
			SourceImage: in.sourceImage, Created: in.created, GuestAttributes: maps.Clone(in.guest)}
		for _, it := range in.pb.GetMetadata().GetItems() {
			v.Metadata[it.GetKey()] = it.GetValue()
		}
		v.UserData = v.Metadata["user-data"]
		v.Tags = slices.Clone(in.pb.GetTags().GetItems())
		for _, sa := range in.pb.GetServiceAccounts() {
			v.ServiceAccounts = append(v.ServiceAccounts, sa.GetEmail())
		}
		for _, ni := range in.pb.GetNetworkInterfaces() {
			for _, ac := range ni.GetAccessConfigs() {
				v.ExternalNAT = v.ExternalNAT || ac.GetType() == "ONE_TO_ONE_NAT"
			}
		}
		out = append(out, v)
	}
	return out
}

// settle ends the operations whose time has come and removes the instances
// whose delete finished. f.mu is held.
func (f *Fake) settle() {
	now := f.opts.Now()
	for _, op := range f.ops {
		if op.pb.GetStatus() == computepb.Operation_DONE || now.Before(op.doneAt) {
			continue
		}
		op.pb.Status = computepb.Operation_DONE.Enum()
		op.pb.Progress = proto.Int32(100)
		op.pb.EndTime = proto.String(timestamp(op.doneAt))
		if ft := op.fault; ft != nil && ft.OpCode != "" {
			op.pb.Error = &computepb.Error{Errors: []*computepb.Errors{{Code: proto.String(ft.OpCode), Message: proto.String(ft.Message)}}}
			status := ft.OpHTTPStatus
			if status == 0 {
				status = http.StatusBadRequest
			}
			op.pb.HttpErrorStatusCode = proto.Int32(int32(status))
			op.pb.HttpErrorMessage = proto.String(strings.ToUpper(http.StatusText(status)))
		}
		if op.onDone != nil {
			op.onDone(op.pb.Error != nil)
			op.onDone = nil
		}
	}
	for k, in := range f.instances {
		if !in.deleteAt.IsZero() && !now.Before(in.deleteAt) {
			delete(f.instances, k)
			delete(f.disks, in.disk)
		}
	}
}

// status is the instance's status now. f.mu is held.
func (f *Fake) status(in *instance) string {
	switch {
	case !in.deleteAt.IsZero():
		return "STOPPING"
	case in.pending:
		return "PROVISIONING"
	}
	if st, ok := powerStatus[in.power]; ok {
		return st
	}
	age := f.opts.Now().Sub(in.bootAt)
	switch {
	case age < f.opts.Provisioning:
		return "PROVISIONING"
	case age < f.opts.Provisioning+f.opts.Staging:
		return "STAGING"
	}
	return "RUNNING"
}

// view is the instance as the API returns it. f.mu is held.
func (f *Fake) view(in *instance) *computepb.Instance {
	pb := proto.CloneOf(in.pb)
	pb.Status = proto.String(f.status(in))
	return pb
}

// sortedInstances returns the instances of project ("" for all), by zone
// and name. f.mu is held.
func (f *Fake) sortedInstances(project string) []*instance {
	var out []*instance
	for _, in := range f.instances {
		if project == "" || in.project == project {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b *instance) int {
		return cmp.Or(cmp.Compare(a.zone, b.zone), cmp.Compare(a.pb.GetName(), b.pb.GetName()))
	})
	return out
}

func instanceFields(in *instance, status string) fields {
	return fields{name: in.pb.GetName(), status: status, zone: in.zone, labels: in.pb.GetLabels()}
}

func (f *Fake) aggregatedInstances(project string, q map[string][]string) (proto.Message, *apiError) {
	flt, ferr := parseFilter(first(q["filter"]))
	if ferr != nil {
		return nil, ferr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	var match []*instance
	for _, in := range f.sortedInstances(project) {
		if flt.matches(instanceFields(in, f.status(in))) {
			match = append(match, in)
		}
	}
	from, to, next, err := page(q, len(match))
	if err != nil {
		return nil, err
	}
	items := map[string]*computepb.InstancesScopedList{}
	for _, in := range match[from:to] {
		k := "zones/" + in.zone
		if items[k] == nil {
			items[k] = &computepb.InstancesScopedList{}
		}
		items[k].Instances = append(items[k].Instances, f.view(in))
	}
	for z := range f.zones {
		k := "zones/" + z
		if items[k] == nil {
			items[k] = &computepb.InstancesScopedList{Warning: &computepb.Warning{
				Code:    proto.String("NO_RESULTS_ON_PAGE"),
				Message: proto.String(fmt.Sprintf("There are no results for scope '%s' on this page.", k)),
				Data:    []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(k)}},
			}}
		}
	}
	res := &computepb.InstanceAggregatedList{Kind: proto.String("compute#instanceAggregatedList"),
		Id: proto.String("projects/" + project + "/aggregated/instances"), Items: items,
		SelfLink: proto.String(f.selfLink(project + "/aggregated/instances"))}
	if next != "" {
		res.NextPageToken = proto.String(next)
	}
	return res, nil
}

func (f *Fake) listInstances(project, zone string, q map[string][]string) (proto.Message, *apiError) {
	flt, ferr := parseFilter(first(q["filter"]))
	if ferr != nil {
		return nil, ferr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.zones[zone] {
		return nil, notFound("projects/" + project + "/zones/" + zone)
	}
	f.settle()
	var items []*computepb.Instance
	for _, in := range f.sortedInstances(project) {
		if in.zone == zone && flt.matches(instanceFields(in, f.status(in))) {
			items = append(items, f.view(in))
		}
	}
	from, to, next, err := page(q, len(items))
	if err != nil {
		return nil, err
	}
	res := &computepb.InstanceList{Kind: proto.String("compute#instanceList"), Items: items[from:to],
		Id:       proto.String("projects/" + project + "/zones/" + zone + "/instances"),
		SelfLink: proto.String(f.selfLink(project + "/zones/" + zone + "/instances"))}
	if next != "" {
		res.NextPageToken = proto.String(next)
	}
	return res, nil
}

// liveInstance is the instance as the API sees it (insert accepted, not
// yet gone); 404 notFound otherwise. f.mu must be held.
func (f *Fake) liveInstance(project, zone, name string) (*instance, *apiError) {
	in := f.instances[project+"/"+zone+"/"+name]
	if in == nil {
		return nil, notFound("projects/" + project + "/zones/" + zone + "/instances/" + name)
	}
	return in, nil
}

func (f *Fake) getInstance(project, zone, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	in, aerr := f.liveInstance(project, zone, name)
	if aerr != nil {
		return nil, aerr
	}
	return f.view(in), nil
}

var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (f *Fake) insertInstance(project, zone string, body *computepb.Instance, ft *Fault) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if project != f.opts.Project {
		return nil, &apiError{http.StatusForbidden, "forbidden", fmt.Sprintf("Required 'compute.instances.create' permission for 'projects/%s/zones/%s/instances/%s'", project, zone, body.GetName())}
	}
	if !f.zones[zone] {
		return nil, notFound("projects/" + project + "/zones/" + zone)
	}
	name := body.GetName()
	if !nameRE.MatchString(name) {
		return nil, badRequest("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name)
	}
	key := project + "/" + zone + "/" + name
	if f.instances[key] != nil {
		return nil, &apiError{http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' already exists", project, zone, name)}
	}
	mtName := lastSegment(body.GetMachineType())
	var mt *MachineType
	for i := range f.types {
		if f.types[i].Name == mtName && f.types[i].soldIn(zone) {
			mt = &f.types[i]
		}
	}
	if mt == nil {
		return nil, badRequest("Invalid value for field 'resource.machineType': '%s'. Machine type with name '%s' does not exist in zone '%s'.", body.GetMachineType(), mtName, zone)
	}
	if err := checkLabels("resource.labels", body.GetLabels()); err != nil {
		return nil, err
	}
	var boot *computepb.AttachedDisk
	for _, d := range body.GetDisks() {
		if d.GetBoot() {
			boot = d
		}
	}
	if boot == nil || boot.GetInitializeParams().GetSourceImage() == "" {
		return nil, badRequest("Invalid value for field 'resource.disks': ''. Boot disk must be specified.")
	}
	im, ierr := f.resolveImage(project, boot.GetInitializeParams().GetSourceImage())
	if ierr != nil {
		return nil, ierr
	}
	if st := im.pb.GetDeprecated().GetState(); st == "OBSOLETE" || st == "DELETED" {
		return nil, badRequest("Invalid value for field 'resource.disks[0].initializeParams.sourceImage': '%s'. The referenced image resource is %s.", boot.GetInitializeParams().GetSourceImage(), strings.ToLower(st))
	}
	if err := checkMetadata("resource.metadata", body.GetMetadata().GetItems()); err != nil {
		return nil, err
	}
	for i, tag := range body.GetTags().GetItems() {
		if !rfc1035.MatchString(tag) {
			return nil, badRequest("Invalid value for field 'resource.tags.items[%d]': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", i, tag)
		}
	}

	now := f.opts.Now()
	pb := proto.CloneOf(body)
	id := f.newID()
	pb.Kind = proto.String("compute#instance")
	pb.Id = proto.Uint64(id)
	pb.Zone = proto.String(f.selfLink(project + "/zones/" + zone))
	pb.MachineType = proto.String(f.selfLink(project + "/zones/" + zone + "/machineTypes/" + mt.Name))
	pb.SelfLink = proto.String(f.selfLink(project + "/zones/" + zone + "/instances/" + name))
	pb.CreationTimestamp = proto.String(timestamp(now))
	pb.LabelFingerprint = proto.String(fingerprint(pb.GetLabels()))
	if pb.Tags != nil {
		pb.Tags.Fingerprint = proto.String(fingerprint(map[string]string{"tags": strings.Join(pb.Tags.GetItems(), ",")}))
	}
	pb.CpuPlatform = proto.String("Intel Cascade Lake")
	if pb.Metadata == nil {
		pb.Metadata = &computepb.Metadata{}
	}
	pb.Metadata.Kind = proto.String("compute#metadata")
	pb.Metadata.Fingerprint = proto.String(fingerprint(map[string]string{"id": fmt.Sprint(id)}))
	diskName := boot.GetInitializeParams().GetDiskName()
	if diskName == "" {
		diskName = name
	}
	diskKey := project + "/" + zone + "/" + diskName
	if f.disks[diskKey] != nil {
		return nil, &apiError{http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/zones/%s/disks/%s' already exists", project, zone, diskName)}
	}
	for i, d := range pb.Disks {
		pb.Disks[i] = &computepb.AttachedDisk{
			Kind: proto.String("compute#attachedDisk"), Type: proto.String("PERSISTENT"), Mode: proto.String("READ_WRITE"),
			Boot: proto.Bool(d.GetBoot()), AutoDelete: proto.Bool(d.GetAutoDelete()), Index: proto.Int32(int32(i)),
			DeviceName: proto.String(cmp.Or(d.GetDeviceName(), "persistent-disk-"+fmt.Sprint(i))),
			Source:     proto.String(f.selfLink(project + "/zones/" + zone + "/disks/" + diskName)),
			DiskSizeGb: proto.Int64(cmp.Or(d.GetInitializeParams().GetDiskSizeGb(), im.pb.GetDiskSizeGb())),
			Interface:  proto.String("SCSI"), Architecture: proto.String(im.pb.GetArchitecture()),
		}
	}
	if len(pb.NetworkInterfaces) == 0 {
		pb.NetworkInterfaces = []*computepb.NetworkInterface{{Network: proto.String(f.selfLink(project + "/global/networks/default"))}}
	}
	for i, ni := range pb.NetworkInterfaces {
		ni.Kind = proto.String("compute#networkInterface")
		ni.Name = proto.String(fmt.Sprintf("nic%d", i))
		ni.NetworkIP = proto.String(fmt.Sprintf("10.%d.%d.%d", 128+i, (id>>8)&0xff, id&0xff))
	}
	in := &instance{project: project, zone: zone, pb: pb, pending: true, sourceImage: im.ref(), disk: diskKey}
	f.instances[key] = in
	f.disks[diskKey] = &disk{project: project, zone: zone, name: diskName, sourceImage: im.ref(), user: key}
	op := f.newOperation(project, "zones/"+zone, "insert", pb.GetSelfLink(), id, ft)
	op.onDone = func(failed bool) {
		if failed {
			delete(f.instances, key)
			delete(f.disks, diskKey)
			return
		}
		in.pending = false
		in.created, in.bootAt = op.doneAt, op.doneAt
		in.pb.CreationTimestamp = proto.String(timestamp(op.doneAt))
	}
	f.settle()
	return proto.CloneOf(op.pb), nil
}

// The metadata limits of the Metadata resource's reference
// (https://cloud.google.com/compute/docs/reference/rest/v1/Metadata): a key
// matches [a-zA-Z0-9-_]+ and is less than 128 bytes, a value is at most
// 262144 bytes (256 KiB), and all keys and values together are less than
// 512 KB.
const (
	maxMetadataKey   = 127
	maxMetadataValue = 256 << 10
	maxMetadataTotal = 512<<10 - 1
)

var metadataKeyRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// checkMetadata applies the API's metadata rules to the items of field.
// The answers are 400 invalid, shaped like the API's "Value for field
// '…items[2].value' is too large: maximum size … character(s); actual size
// …." seen in kubernetes/kubernetes#37180.
func checkMetadata(field string, items []*computepb.Items) *apiError {
	seen := map[string]bool{}
	total := 0
	for i, it := range items {
		k := it.GetKey()
		if len(k) > maxMetadataKey || !metadataKeyRE.MatchString(k) {
			return badRequest("Invalid value for field '%s.items[%d].key': '%s'. Must be a match of regex '[a-zA-Z0-9-_]{1,%d}'", field, i, k, maxMetadataKey)
		}
		if seen[k] {
			return badRequest("Invalid value for field '%s': duplicate key '%s'.", field, k)
		}
		seen[k] = true
		if n := len(it.GetValue()); n > maxMetadataValue {
			return badRequest("Value for field '%s.items[%d].value' is too large: maximum size %d character(s); actual size %d.", field, i, maxMetadataValue, n)
		}
		total += len(k) + len(it.GetValue())
	}
	if total > maxMetadataTotal {
		return badRequest("Value for field '%s' is too large: the total size of all keys and values must be less than %d bytes; actual size %d.", field, maxMetadataTotal+1, total)
	}
	return nil
}

func (f *Fake) deleteInstance(project, zone, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	in, aerr := f.liveInstance(project, zone, name)
	if aerr != nil {
		return nil, aerr
	}
	if in.deleteAt.IsZero() {
		in.deleteAt = f.opts.Now().Add(f.opts.Stopping)
	}
	op := f.newOperation(project, "zones/"+zone, "delete", in.pb.GetSelfLink(), in.pb.GetId(), nil)
	f.settle()
	return proto.CloneOf(op.pb), nil
}

// newOperation starts an operation that is DONE after OperationDelay. f.mu
// is held.
func (f *Fake) newOperation(project, scope, kind, target string, targetID uint64, ft *Fault) *operation {
	now := f.opts.Now()
	id := f.newID()
	name := fmt.Sprintf("operation-%d-%016x", now.UnixMilli(), id)
	pb := &computepb.Operation{
		Kind: proto.String("compute#operation"), Id: proto.Uint64(id), Name: proto.String(name),
		OperationType: proto.String(kind), TargetLink: proto.String(target), TargetId: proto.Uint64(targetID),
		Status: computepb.Operation_RUNNING.Enum(), Progress: proto.Int32(0), User: proto.String("prebake@" + project + ".iam.gserviceaccount.com"),
		InsertTime: proto.String(timestamp(now)), StartTime: proto.String(timestamp(now)),
		SelfLink: proto.String(f.selfLink(project + "/" + scope + "/operations/" + name)),
	}
	if z, ok := strings.CutPrefix(scope, "zones/"); ok {
		pb.Zone = proto.String(f.selfLink(project + "/zones/" + z))
	}
	op := &operation{pb: pb, project: project, scope: scope, doneAt: now.Add(f.opts.OperationDelay), fault: ft}
	f.ops[project+"/"+scope+"/"+name] = op
	return op
}

func (f *Fake) getOperation(project, scope, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	op := f.ops[project+"/"+scope+"/"+name]
	if op == nil {
		return nil, notFound("projects/" + project + "/" + scope + "/operations/" + name)
	}
	return proto.CloneOf(op.pb), nil
}

// waitOperation answers once the operation is DONE, or after WaitTimeout;
// with a manual clock it answers at once.
func (f *Fake) waitOperation(r *http.Request, project, scope, name string) (proto.Message, *apiError) {
	deadline := time.Now().Add(f.opts.WaitTimeout)
	for {
		f.mu.Lock()
		f.settle()
		op := f.ops[project+"/"+scope+"/"+name]
		if op == nil {
			f.mu.Unlock()
			return nil, notFound("projects/" + project + "/" + scope + "/operations/" + name)
		}
		res := proto.CloneOf(op.pb)
		left := op.doneAt.Sub(f.opts.Now())
		f.mu.Unlock()
		if res.GetStatus() == computepb.Operation_DONE || f.manualTime || !time.Now().Before(deadline) {
			return res, nil
		}
		if err := sleep(r.Context(), min(left, time.Until(deadline))); err != nil {
			return res, nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func lastSegment(s string) string {
	return s[strings.LastIndexByte(s, '/')+1:]
}
