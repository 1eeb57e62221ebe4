package gcefake

import (
	"fmt"
	"maps"
	"net/http"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// An instance's lifecycle after its insert: stop, start, suspend and
// resume, each an operation, as the instance life cycle page describes them
// (https://cloud.google.com/compute/docs/instances/instance-lifecycle):
//
//	RUNNING    --stop-->    STOPPING   --> TERMINATED
//	TERMINATED --start-->   PROVISIONING --> STAGING --> RUNNING
//	RUNNING    --suspend--> SUSPENDING --> SUSPENDED
//	SUSPENDED  --resume-->  STAGING    --> RUNNING
//	SUSPENDED  --stop-->    STOPPING   --> TERMINATED
//
// The intermediate status holds while the operation runs; the next one
// comes when it is DONE. After a start the boot takes Options.Provisioning
// and Staging as after an insert. The page documents only that a resumed
// instance is RUNNING again; the fake shows STAGING while the resume runs.
// An operation that ends with an injected error (Fail with OpCode, as a
// start that hits a stockout) leaves the instance where it was.
//
// Calls in the wrong state answer as the API does: suspend of an instance
// that is not RUNNING is UNSUPPORTED_OPERATION with the messages of
// https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-suspend-resume
// ("You cannot suspend an instance that is stopped or terminated.", "You
// cannot suspend an already suspended instance."), and so is resume of one
// that is not SUSPENDED; a call during a transition is 400
// resourceNotReady. Stopping a TERMINATED instance, or starting a RUNNING
// one, is accepted and changes nothing.

type powerState int

const (
	// powerOn: booted, booting or running; the status follows bootAt.
	powerOn powerState = iota
	powerStopping
	powerTerminated
	powerStarting
	powerSuspending
	powerSuspended
	powerResuming
)

// powerStatus is the status of every state but powerOn.
var powerStatus = map[powerState]string{
	powerStopping:   "STOPPING",
	powerTerminated: "TERMINATED",
	powerStarting:   "PROVISIONING",
	powerSuspending: "SUSPENDING",
	powerSuspended:  "SUSPENDED",
	powerResuming:   "STAGING",
}

func notReady(project, zone, name string) *apiError {
	return &apiError{http.StatusBadRequest, "resourceNotReady",
		fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' is not ready", project, zone, name)}
}

func unsupported(message string) *apiError {
	return &apiError{http.StatusBadRequest, "unsupportedOperation", message}
}

// lifecycleInstance is the instance for a lifecycle call: one being
// inserted or deleted is not ready. f.mu is held.
func (f *Fake) lifecycleInstance(project, zone, name string) (*instance, *apiError) {
	in, aerr := f.liveInstance(project, zone, name)
	if aerr != nil {
		return nil, aerr
	}
	if !in.deleteAt.IsZero() || in.pending {
		return nil, notReady(project, zone, name)
	}
	return in, nil
}

// transition starts an operation of kind on in that moves it to via at
// once and to to when it is DONE (back to where it was if the operation
// fails). f.mu is held.
func (f *Fake) transition(in *instance, kind string, via, to powerState, ft *Fault) *operation {
	from := in.power
	in.power = via
	op := f.newOperation(in.project, "zones/"+in.zone, kind, in.pb.GetSelfLink(), in.pb.GetId(), ft)
	op.onDone = func(failed bool) {
		if failed {
			in.power = from
			return
		}
		in.power = to
		switch {
		case kind == "start":
			in.bootAt = op.doneAt
		case to == powerOn:
			// A resumed instance continues; it does not boot.
			in.bootAt = op.doneAt.Add(-f.opts.Provisioning - f.opts.Staging)
		}
	}
	return op
}

// noop is an accepted call that changes nothing. f.mu is held.
func (f *Fake) noop(in *instance, kind string) *operation {
	return f.newOperation(in.project, "zones/"+in.zone, kind, in.pb.GetSelfLink(), in.pb.GetId(), nil)
}

// lifecycleCall answers one of instances.stop, start, suspend and resume:
// under f.mu, on the settled instance, decide says what the call does in
// the instance's state (an operation, or the API's error for that state).
func (f *Fake) lifecycleCall(project, zone, name string, decide func(in *instance) (*operation, *apiError)) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	in, aerr := f.lifecycleInstance(project, zone, name)
	if aerr != nil {
		return nil, aerr
	}
	op, aerr := decide(in)
	if aerr != nil {
		return nil, aerr
	}
	f.settle()
	return proto.CloneOf(op.pb), nil
}

func (f *Fake) stopInstance(project, zone, name string, ft *Fault) (proto.Message, *apiError) {
	return f.lifecycleCall(project, zone, name, func(in *instance) (*operation, *apiError) {
		switch in.power {
		case powerTerminated, powerStopping:
			return f.noop(in, "stop"), nil
		case powerOn, powerSuspended:
			return f.transition(in, "stop", powerStopping, powerTerminated, ft), nil
		}
		return nil, notReady(project, zone, name)
	})
}

func (f *Fake) startInstance(project, zone, name string, ft *Fault) (proto.Message, *apiError) {
	return f.lifecycleCall(project, zone, name, func(in *instance) (*operation, *apiError) {
		switch in.power {
		case powerOn, powerStarting:
			return f.noop(in, "start"), nil
		case powerTerminated:
			return f.transition(in, "start", powerStarting, powerOn, ft), nil
		case powerSuspended:
			return nil, unsupported(fmt.Sprintf("The instance 'projects/%s/zones/%s/instances/%s' is suspended; resume it (instances.resume).", project, zone, name))
		}
		return nil, notReady(project, zone, name)
	})
}

func (f *Fake) suspendInstance(project, zone, name string, ft *Fault) (proto.Message, *apiError) {
	return f.lifecycleCall(project, zone, name, func(in *instance) (*operation, *apiError) {
		switch f.status(in) {
		case "RUNNING":
			return f.transition(in, "suspend", powerSuspending, powerSuspended, ft), nil
		case "TERMINATED", "STOPPING":
			return nil, unsupported("You cannot suspend an instance that is stopped or terminated.")
		case "SUSPENDED", "SUSPENDING":
			return nil, unsupported("You cannot suspend an already suspended instance.")
		}
		return nil, notReady(project, zone, name)
	})
}

func (f *Fake) resumeInstance(project, zone, name string, ft *Fault) (proto.Message, *apiError) {
	return f.lifecycleCall(project, zone, name, func(in *instance) (*operation, *apiError) {
		switch st := f.status(in); st {
		case "SUSPENDED":
			return f.transition(in, "resume", powerResuming, powerOn, ft), nil
		case "SUSPENDING", "STOPPING":
			return nil, notReady(project, zone, name)
		default:
			return nil, unsupported(fmt.Sprintf("You cannot resume an instance that is not suspended: 'projects/%s/zones/%s/instances/%s' is %s.", project, zone, name, st))
		}
	})
}

// setInstanceLabels answers instances.setLabels: the labels replace the
// instance's if labelFingerprint is the current one; otherwise 412
// conditionNotMet, as for images.
func (f *Fake) setInstanceLabels(project, zone, name string, req *computepb.InstancesSetLabelsRequest) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	in, aerr := f.liveInstance(project, zone, name)
	if aerr != nil {
		return nil, aerr
	}
	if req.GetLabelFingerprint() != in.pb.GetLabelFingerprint() {
		return nil, &apiError{http.StatusPreconditionFailed, "conditionNotMet",
			"Labels fingerprint either invalid or resource labels have changed"}
	}
	if err := checkLabels("labels", req.GetLabels()); err != nil {
		return nil, err
	}
	in.pb.Labels = maps.Clone(req.GetLabels())
	in.pb.LabelFingerprint = proto.String(fingerprint(in.pb.GetLabels()))
	op := f.newOperation(project, "zones/"+zone, "setLabels", in.pb.GetSelfLink(), in.pb.GetId(), nil)
	f.settle()
	return proto.CloneOf(op.pb), nil
}

// setInstanceMetadata answers instances.setMetadata: the items replace the
// instance's if fingerprint is the current one; otherwise 412
// conditionNotMet. The items are checked as at insert. Metadata can change
// in any state; a running guest sees it on its metadata server.
func (f *Fake) setInstanceMetadata(project, zone, name string, md *computepb.Metadata) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	in, aerr := f.liveInstance(project, zone, name)
	if aerr != nil {
		return nil, aerr
	}
	if md.GetFingerprint() != in.pb.GetMetadata().GetFingerprint() {
		return nil, &apiError{http.StatusPreconditionFailed, "conditionNotMet",
			"Supplied fingerprint does not match current metadata fingerprint."}
	}
	if err := checkMetadata("metadata", md.GetItems()); err != nil {
		return nil, err
	}
	items := make([]*computepb.Items, 0, len(md.GetItems()))
	digest := map[string]string{"generation": fmt.Sprint(f.newID())}
	for _, it := range md.GetItems() {
		items = append(items, &computepb.Items{Key: proto.String(it.GetKey()), Value: proto.String(it.GetValue())})
		digest["item:"+it.GetKey()] = it.GetValue()
	}
	in.pb.Metadata = &computepb.Metadata{Kind: proto.String("compute#metadata"), Items: items,
		Fingerprint: proto.String(fingerprint(digest))}
	op := f.newOperation(project, "zones/"+zone, "setMetadata", in.pb.GetSelfLink(), in.pb.GetId(), nil)
	f.settle()
	return proto.CloneOf(op.pb), nil
}

// lifecycleRoute serves the POST instances/<name>/<verb> calls of this
// file; ok is false for another verb.
func (f *Fake) lifecycleRoute(r *http.Request, project, zone, name, verb string, ft *Fault) (res proto.Message, err *apiError, ok bool) {
	switch verb {
	case "stop":
		res, err = f.stopInstance(project, zone, name, ft)
	case "start":
		res, err = f.startInstance(project, zone, name, ft)
	case "suspend":
		res, err = f.suspendInstance(project, zone, name, ft)
	case "resume":
		res, err = f.resumeInstance(project, zone, name, ft)
	case "setLabels":
		req := &computepb.InstancesSetLabelsRequest{}
		if err = readProto(r, req); err == nil {
			res, err = f.setInstanceLabels(project, zone, name, req)
		}
	case "setMetadata":
		md := &computepb.Metadata{}
		if err = readProto(r, md); err == nil {
			res, err = f.setInstanceMetadata(project, zone, name, md)
		}
	default:
		return nil, nil, false
	}
	return res, err, true
}
