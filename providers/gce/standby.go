package gce

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce/providerid"
)

// Warm-pool standbys (docs/warm-pool.md). The standby marker is the label
// prebake-dev_standby=<state> (providers.LabelStandby), set at insert and
// removed with instances.setLabels before the instance gets its join
// user-data, so List (and a restarted plugin) sees every standby, and never
// one that joins.
//
// Parked is stopped (instances.stop: TERMINATED) or suspended
// (instances.suspend: SUSPENDED). cloud-init runs user-data once per
// instance-id, and a GCE instance keeps its id across both, so a standby's
// user-data installs the resume hook bootstrap.ResumeByGCEMetadata
// (Capabilities.StandbyResume): Resume writes the new user-data with
// instances.setMetadata and then starts (instances.start) or resumes
// (instances.resume) the instance, and the hook, at that boot or on waking,
// runs the new node script. The standby reports prepared (or failed)
// through the guest attribute bootstrap.StandbyAttribute, so a standby's
// metadata has enable-guest-attributes=TRUE.

// labelResuming=<unix seconds> (prebake-dev_resuming) dates a take: Resume
// sets it in the setLabels call that removes the standby label, and
// removes it once the start or resume operation is DONE. GCE lists a
// stopped instance like any other, so without it a take killed between
// the two would leave a TERMINATED machine that never joins, which CA
// deletes only after --max-node-provision-time; with it, List shows that
// machine failed after resumeGrace, and CA deletes it at once.
const labelResuming = "prebake.dev/resuming"

// resumeGrace is how long an instance may stay TERMINATED or SUSPENDED
// with labelResuming before List shows it failed: more than a Resume
// between its setLabels and its start takes (a setMetadata, a call
// retried within the core's one-minute call timeout), so a take still
// under way is never shown failed.
const resumeGrace = 2 * time.Minute

// interruptedTake is the error List shows for in, an instance whose take
// began at its labelResuming and which is still TERMINATED or SUSPENDED
// resumeGrace later; nil for any other instance. An unreadable value
// counts as long ago: only Resume writes the label.
func interruptedTake(in *computepb.Instance, now time.Time) *providers.InstanceError {
	v, ok := in.GetLabels()[LabelKey(labelResuming)]
	status := in.GetStatus()
	if !ok || status != "TERMINATED" && status != "SUSPENDED" {
		return nil
	}
	since := "at an unreadable time"
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		began := time.Unix(secs, 0)
		if now.Sub(began) <= resumeGrace {
			return nil
		}
		since = now.Sub(began).Round(time.Second).String() + " ago"
	}
	return &providers.InstanceError{Class: providers.ErrorOther, Code: "resume_interrupted",
		Message: fmt.Sprintf("instance %s was a warm-pool standby whose take stopped half-way: its standby label went %s (label %s=%s), but it is still %s and was never started, so it will never join; delete it (cluster-autoscaler does, as a failed instance)",
			in.GetName(), since, LabelKey(labelResuming), v, status)}
}

// standbyStates are the states Capabilities declares.
var standbyStates = []providers.StandbyState{providers.StandbyStopped, providers.StandbySuspended}

// enableGuestAttributes turns the guest attributes on, for a builder's
// report and a standby's status.
const enableGuestAttributes = "enable-guest-attributes"

// fingerprintRetries bounds the retries of a setLabels or setMetadata that
// met a fingerprint another writer changed meanwhile (412).
const fingerprintRetries = 3

// standbyOf is the core's view of a standby's marker and status; the zero
// Standby for an instance without the marker. A RUNNING standby is
// warming until its status (standbyStatus) says otherwise. A standby being
// stopped or suspended is prepared: the core's Park runs.
func standbyOf(in *computepb.Instance) providers.Standby {
	state := providers.StandbyState(FromGCE(in.GetLabels())[providers.LabelStandby])
	if state == "" {
		return providers.Standby{}
	}
	s := providers.Standby{State: state, Phase: providers.StandbyWarming}
	switch in.GetStatus() {
	case "TERMINATED", "SUSPENDED":
		s.Phase = providers.StandbyParked
	case "STOPPING", "SUSPENDING":
		s.Phase = providers.StandbyPrepared
	}
	return s
}

// standbyStatus reads a running standby's status from its guest attribute
// and sets out's phase (prepared) or error (its script failed). No
// attribute yet is warming; an error reading it is logged and leaves out
// as it is.
func (p *Provider) standbyStatus(ctx context.Context, zone string, in *computepb.Instance, out *providers.Instance) {
	ga, err := p.instances.GetGuestAttributes(ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: p.o.Project, Zone: zone, Instance: in.GetName(), QueryPath: proto.String(bootstrap.StandbyAttribute)})
	if isNotFound(err) {
		return
	}
	if err != nil {
		p.log.Debug("gce: standby status not read", "instance", in.GetName(), "providerID", out.ProviderID, "err", err)
		return
	}
	for _, e := range ga.GetQueryValue().GetItems() {
		if e.GetNamespace()+"/"+e.GetKey() != bootstrap.StandbyAttribute {
			continue
		}
		st, err := bootstrap.ParseStatus([]byte(e.GetValue()))
		switch {
		case err != nil:
			p.log.Debug("gce: standby status unreadable", "instance", in.GetName(), "providerID", out.ProviderID, "err", err)
		case st.Result == bootstrap.StatusPrepared:
			out.Standby.Phase = providers.StandbyPrepared
		case st.Result == "failed":
			out.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: "standby_failed",
				Message: fmt.Sprintf("standby %s: its node script failed: %s (its serial console, or /var/lib/prebake/bootstrap-status.json)", in.GetName(), st.Error)}
		}
	}
}

// standby returns the instance id names, checked as ours and a standby's
// or a taken standby's of this project, for verb.
func (p *Provider) standby(ctx context.Context, id, verb string) (providerid.Ref, *computepb.Instance, error) {
	ref, err := providerid.Parse(id)
	if err != nil {
		return ref, nil, fmt.Errorf("gce: %s: %w", verb, err)
	}
	if ref.Project != p.o.Project {
		return ref, nil, fmt.Errorf("gce: refusing to %s %s: it is in project %q, this provider manages %q", verb, id, ref.Project, p.o.Project)
	}
	in, err := p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name})
	if isNotFound(err) {
		return ref, nil, fmt.Errorf("gce: %s %s: instance %q in %s: %w", verb, id, ref.Name, ref.Zone, providers.ErrNotFound)
	}
	if err != nil {
		return ref, nil, fmt.Errorf("gce: %s %s: get the instance: %w", verb, id, err)
	}
	if FromGCE(in.GetLabels())[providers.LabelCluster] != p.o.Cluster {
		return ref, nil, fmt.Errorf("gce: refusing to %s %s: it is not owned by cluster %q", verb, id, p.o.Cluster)
	}
	return ref, in, nil
}

// settled waits, polling, while in is STOPPING or SUSPENDING (a park that
// an earlier call started), and returns it as it is then.
func (p *Provider) settled(ctx context.Context, ref providerid.Ref, in *computepb.Instance) (*computepb.Instance, error) {
	pause := pollPause()
	for in.GetStatus() == "STOPPING" || in.GetStatus() == "SUSPENDING" {
		if err := pause(ctx); err != nil {
			return nil, fmt.Errorf("gce: wait for instance %s to leave %s: %w", ref.Name, in.GetStatus(), err)
		}
		var err error
		if in, err = p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name}); err != nil {
			return nil, fmt.Errorf("gce: get instance %s: %w", ref.Name, err)
		}
	}
	return in, nil
}

// Park implements providers.Provider: instances.stop for stopped,
// instances.suspend for suspended, and it returns once the operation is
// DONE (the instance TERMINATED or SUSPENDED). A parked standby (in either
// state) is left as it is; one still being parked is waited for.
func (p *Provider) Park(ctx context.Context, id string, state providers.StandbyState) error {
	if !slices.Contains(standbyStates, state) {
		return fmt.Errorf("gce: park %s %s: %w: the gce provider parks standbys stopped or suspended", id, state, providers.ErrStandbyUnsupported)
	}
	ref, in, err := p.standby(ctx, id, "park")
	if err != nil {
		return err
	}
	labels := FromGCE(in.GetLabels())
	if labels[providers.LabelStandby] == "" {
		return fmt.Errorf("gce: park %s: it has no label %s: it is no standby (taken already?)", id, LabelKey(providers.LabelStandby))
	}
	if in, err = p.settled(ctx, ref, in); err != nil {
		return err
	}
	switch in.GetStatus() {
	case "TERMINATED", "SUSPENDED":
		return nil
	case "RUNNING":
	default:
		return fmt.Errorf("gce: park %s: the instance is %s, not RUNNING; the next round retries", id, in.GetStatus())
	}
	var op *compute.Operation
	if state == providers.StandbySuspended {
		// Only a RUNNING instance whose guest OS supports it can be
		// suspended (docs/warm-pool.md).
		op, err = p.instances.Suspend(ctx, &computepb.SuspendInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name})
	} else {
		op, err = p.instances.Stop(ctx, &computepb.StopInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name})
	}
	if err == nil {
		err = p.waitZone(ctx, ref.Zone, op)
	}
	if err != nil {
		return fmt.Errorf("gce: park %s %s: %w", id, state, err)
	}
	p.log.Info("standby parked", "group", labels[providers.LabelGroup], "instance", ref.Name, "providerID", id, "state", state)
	return nil
}

// Resume implements providers.Provider, in this order: the standby label
// goes and labelResuming comes (one setLabels), the instance's user-data
// becomes userData (setMetadata; never logged), then a TERMINATED instance
// is started and a SUSPENDED one resumed; once that operation is DONE (a
// start can meet a stockout), labelResuming goes (setLabels) and Resume
// returns. An instance that runs gets the user-data and no start: its
// resume hook, running already, takes it.
func (p *Provider) Resume(ctx context.Context, id string, userData []byte) (providers.Instance, error) {
	ref, in, err := p.standby(ctx, id, "resume")
	if err != nil {
		return providers.Instance{}, err
	}
	labels := FromGCE(in.GetLabels())
	if n := len(userData); n > maxUserData {
		return providers.Instance{}, &userDataTooLargeError{name: ref.Name, group: labels[providers.LabelGroup], size: n}
	}
	// From here on every List shows a machine that joins, dated by
	// labelResuming: one this take leaves stopped lists failed.
	if labels[providers.LabelStandby] != "" {
		began := strconv.FormatInt(p.o.Now().Unix(), 10)
		if in, err = p.relabel(ctx, ref, in, func(l map[string]string) bool {
			if l[LabelKey(providers.LabelStandby)] == "" {
				return false
			}
			delete(l, LabelKey(providers.LabelStandby))
			l[LabelKey(labelResuming)] = began
			return true
		}); err != nil {
			return providers.Instance{}, fmt.Errorf("gce: resume %s: remove the label %s: %w", id, LabelKey(providers.LabelStandby), err)
		}
	}
	if in, err = p.settled(ctx, ref, in); err != nil {
		return providers.Instance{}, err
	}
	if in, err = p.setUserData(ctx, ref, in, userData); err != nil {
		return providers.Instance{}, fmt.Errorf("gce: resume %s: set its user-data: %w", id, err)
	}
	var op *compute.Operation
	switch in.GetStatus() {
	case "TERMINATED":
		op, err = p.instances.Start(ctx, &computepb.StartInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name})
	case "SUSPENDED":
		op, err = p.instances.Resume(ctx, &computepb.ResumeInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name})
	}
	if op != nil && err == nil {
		err = p.waitZone(ctx, ref.Zone, op)
	}
	if err != nil {
		return providers.Instance{}, fmt.Errorf("gce: resume %s (%s): %w", id, in.GetStatus(), err)
	}
	p.log.Info("standby resumed", "group", labels[providers.LabelGroup], "instance", ref.Name, "providerID", id, "was", in.GetStatus())
	// The take is done. A label left behind harms nothing while the machine
	// runs, so failing to remove it fails no resume.
	if _, err := p.relabel(ctx, ref, in, func(l map[string]string) bool {
		_, ok := l[LabelKey(labelResuming)]
		delete(l, LabelKey(labelResuming))
		return ok
	}); err != nil {
		p.log.Warn("gce: the resumed instance keeps its label "+LabelKey(labelResuming)+"; if it is ever stopped, List shows it failed",
			"instance", ref.Name, "providerID", id, "err", err)
	}
	out := p.instance(ref.Zone, in)
	out.State, out.Standby, out.Error = providers.StateCreating, providers.Standby{}, nil
	return out, nil
}

// relabel changes the instance's labels as edit does (GCE keys) with
// setLabels and the current label fingerprint, again with a fresh one when
// another writer changed the labels meanwhile. edit returns false when
// there is nothing (left) to change: no call is made then.
func (p *Provider) relabel(ctx context.Context, ref providerid.Ref, in *computepb.Instance, edit func(map[string]string) bool) (*computepb.Instance, error) {
	return p.withFingerprint(ctx, ref, in, func(in *computepb.Instance) (*compute.Operation, error) {
		labels := maps.Clone(in.GetLabels())
		if labels == nil {
			labels = map[string]string{}
		}
		if !edit(labels) {
			return nil, nil
		}
		return p.instances.SetLabels(ctx, &computepb.SetLabelsInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name,
			InstancesSetLabelsRequestResource: &computepb.InstancesSetLabelsRequest{Labels: labels, LabelFingerprint: proto.String(in.GetLabelFingerprint())}})
	})
}

// setUserData makes userData the instance's metadata item user-data,
// keeping the other items, with the current metadata fingerprint (again
// with a fresh one after a 412). User-data that is there already is not
// written again.
func (p *Provider) setUserData(ctx context.Context, ref providerid.Ref, in *computepb.Instance, userData []byte) (*computepb.Instance, error) {
	return p.withFingerprint(ctx, ref, in, func(in *computepb.Instance) (*compute.Operation, error) {
		md := in.GetMetadata()
		items := []*computepb.Items{{Key: proto.String("user-data"), Value: proto.String(string(userData))}}
		for _, it := range md.GetItems() {
			if it.GetKey() == "user-data" {
				if it.GetValue() == string(userData) {
					return nil, nil
				}
				continue
			}
			items = append(items, &computepb.Items{Key: proto.String(it.GetKey()), Value: proto.String(it.GetValue())})
		}
		return p.instances.SetMetadata(ctx, &computepb.SetMetadataInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name,
			MetadataResource: &computepb.Metadata{Fingerprint: proto.String(md.GetFingerprint()), Items: items}})
	})
}

// withFingerprint runs write, a call guarded by a fingerprint of in (labels
// or metadata), and waits for its operation; after a 412 (another writer
// changed them meanwhile) it gets the instance again and writes again, at
// most fingerprintRetries more times. It returns the instance as it is
// afterwards; when write has nothing to do (a nil operation) in, unchanged.
func (p *Provider) withFingerprint(ctx context.Context, ref providerid.Ref, in *computepb.Instance, write func(*computepb.Instance) (*compute.Operation, error)) (*computepb.Instance, error) {
	get := &computepb.GetInstanceRequest{Project: ref.Project, Zone: ref.Zone, Instance: ref.Name}
	for try := 0; ; try++ {
		op, err := write(in)
		if err == nil && op == nil {
			return in, nil
		}
		if err == nil {
			err = p.waitZone(ctx, ref.Zone, op)
		}
		if err == nil || !isPreconditionFailed(err) || try == fingerprintRetries {
			if err != nil {
				return nil, err
			}
			return p.instances.Get(ctx, get)
		}
		if in, err = p.instances.Get(ctx, get); err != nil {
			return nil, err
		}
	}
}
