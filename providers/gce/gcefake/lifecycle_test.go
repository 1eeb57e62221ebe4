package gcefake_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

// lifecycle drives one instance through the real client's stop, start,
// suspend and resume.
type lifecycle struct {
	clients
	t    *testing.T
	name string
}

func (l lifecycle) call(verb string) (*computepb.Operation, error) {
	l.t.Helper()
	ctx := context.Background()
	p, z, n := l.f.Project(), zone, l.name
	var err error
	var op interface{ Proto() *computepb.Operation }
	switch verb {
	case "stop":
		op, err = l.inst.Stop(ctx, &computepb.StopInstanceRequest{Project: p, Zone: z, Instance: n})
	case "start":
		op, err = l.inst.Start(ctx, &computepb.StartInstanceRequest{Project: p, Zone: z, Instance: n})
	case "suspend":
		op, err = l.inst.Suspend(ctx, &computepb.SuspendInstanceRequest{Project: p, Zone: z, Instance: n})
	case "resume":
		op, err = l.inst.Resume(ctx, &computepb.ResumeInstanceRequest{Project: p, Zone: z, Instance: n})
	default:
		l.t.Fatalf("no verb %q", verb)
	}
	if err != nil {
		return nil, err
	}
	return op.Proto(), nil
}

func (l lifecycle) status() string {
	l.t.Helper()
	in, err := l.inst.Get(context.Background(), &computepb.GetInstanceRequest{Project: l.f.Project(), Zone: zone, Instance: l.name})
	if err != nil {
		l.t.Fatal(err)
	}
	return in.GetStatus()
}

// Every transition shows its intermediate status while its operation runs
// and the next one once it is DONE; a start boots through PROVISIONING and
// STAGING again.
func TestLifecycleStatuses(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c := newClients(t, gcefake.Options{Now: clk.Now, Provisioning: 10 * time.Second, Staging: 10 * time.Second})
	c.insert(t, "v1", zone, nil)
	clk.Advance(20 * time.Second)
	l := lifecycle{c, t, "v1"}
	c.f.SetOperationDelay(time.Minute)

	var got []string
	note := func(what string) { got = append(got, what+":"+l.status()) }
	note("booted")
	for _, step := range []struct {
		verb    string
		advance []time.Duration
	}{
		{"stop", []time.Duration{time.Minute}},
		{"start", []time.Duration{time.Minute, 10 * time.Second, 10 * time.Second}},
		{"suspend", []time.Duration{time.Minute}},
		{"resume", []time.Duration{time.Minute}},
		{"suspend", []time.Duration{time.Minute}},
		{"stop", []time.Duration{time.Minute}}, // a suspended instance can be stopped
	} {
		op, err := l.call(step.verb)
		if err != nil {
			t.Fatalf("%s: %v", step.verb, err)
		}
		if op.GetStatus() == computepb.Operation_DONE || op.GetOperationType() != step.verb {
			t.Errorf("%s: operation %s is %s, want a running %s", step.verb, op.GetName(), op.GetStatus(), step.verb)
		}
		note(step.verb)
		for _, d := range step.advance {
			clk.Advance(d)
			note("+" + d.String())
		}
	}
	want := []string{"booted:RUNNING",
		"stop:STOPPING", "+1m0s:TERMINATED",
		"start:PROVISIONING", "+1m0s:PROVISIONING", "+10s:STAGING", "+10s:RUNNING",
		"suspend:SUSPENDING", "+1m0s:SUSPENDED",
		"resume:STAGING", "+1m0s:RUNNING",
		"suspend:SUSPENDING", "+1m0s:SUSPENDED",
		"stop:STOPPING", "+1m0s:TERMINATED",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
}

// A call in the wrong state is refused as the API refuses it; stopping a
// stopped instance or starting a running one changes nothing.
func TestLifecycleWrongStates(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c := newClients(t, gcefake.Options{Now: clk.Now})
	c.insert(t, "v1", zone, nil)
	l := lifecycle{c, t, "v1"}
	refused := func(verb string, code int, reason, message string) {
		t.Helper()
		_, err := l.call(verb)
		gotCode, gotReason := httpCode(err)
		if gotCode != code || gotReason != reason || !strings.Contains(err.Error(), message) {
			t.Errorf("%s in %s: %v, want %d %s %q", verb, l.status(), err, code, reason, message)
		}
	}
	accepted := func(verb, want string) {
		t.Helper()
		op, err := l.call(verb)
		if err != nil || op.GetError() != nil {
			t.Fatalf("%s: %v %v", verb, err, op.GetError())
		}
		if got := l.status(); got != want {
			t.Errorf("after %s: %s, want %s", verb, got, want)
		}
	}
	refused("resume", http.StatusBadRequest, "unsupportedOperation", "You cannot resume an instance that is not suspended")
	accepted("start", "RUNNING")
	accepted("stop", "TERMINATED")
	accepted("stop", "TERMINATED")
	refused("suspend", http.StatusBadRequest, "unsupportedOperation", "You cannot suspend an instance that is stopped or terminated.")
	refused("resume", http.StatusBadRequest, "unsupportedOperation", "You cannot resume an instance that is not suspended")
	accepted("start", "RUNNING")
	accepted("suspend", "SUSPENDED")
	refused("suspend", http.StatusBadRequest, "unsupportedOperation", "You cannot suspend an already suspended instance.")
	refused("start", http.StatusBadRequest, "unsupportedOperation", "is suspended; resume it")
	c.f.SetOperationDelay(time.Minute)
	if _, err := l.call("resume"); err != nil {
		t.Fatal(err)
	}
	refused("stop", http.StatusBadRequest, "resourceNotReady", "is not ready") // STAGING: the resume runs
	refused("start", http.StatusBadRequest, "resourceNotReady", "is not ready")
	clk.Advance(time.Minute)
	if got := l.status(); got != "RUNNING" {
		t.Errorf("after the resume: %s", got)
	}
}

// A start or resume whose operation fails (a stockout) leaves the instance
// where it was; an HTTP fault answers the call.
func TestLifecycleFaults(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	c.insert(t, "v1", zone, nil)
	l := lifecycle{c, t, "v1"}
	if _, err := l.call("stop"); err != nil {
		t.Fatal(err)
	}
	c.f.Fail(http.MethodPost, "zones/"+zone+"/instances/v1/start", 1, gcefake.ErrZoneResourcePoolExhausted)
	op, err := l.call("start")
	if err != nil || op.GetError() == nil || op.GetError().GetErrors()[0].GetCode() != "ZONE_RESOURCE_POOL_EXHAUSTED" || op.GetHttpErrorStatusCode() != 503 {
		t.Fatalf("start with a stockout: %v, %v", err, op)
	}
	if got := l.status(); got != "TERMINATED" {
		t.Errorf("after a stocked-out start: %s, want TERMINATED", got)
	}
	if _, err := l.call("start"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.call("suspend"); err != nil {
		t.Fatal(err)
	}
	c.f.Fail(http.MethodPost, "zones/"+zone+"/instances/v1/resume", 1, gcefake.ErrZoneResourcePoolExhausted)
	if op, err := l.call("resume"); err != nil || op.GetError() == nil {
		t.Fatalf("resume with a stockout: %v, %v", err, op)
	}
	if got := l.status(); got != "SUSPENDED" {
		t.Errorf("after a stocked-out resume: %s, want SUSPENDED", got)
	}
	c.f.Fail(http.MethodPost, "zones/"+zone+"/instances/v1/resume", 1, gcefake.ErrUnavailable)
	if _, err := l.call("resume"); !isCode(err, http.StatusServiceUnavailable) {
		t.Errorf("resume with an HTTP fault: %v, want 503", err)
	}
	if _, err := l.call("resume"); err != nil || l.status() != "RUNNING" {
		t.Errorf("resume after the faults: %v, %s", err, l.status())
	}
}

// setLabels and setMetadata take the current fingerprint and refuse a
// stale one with 412 conditionNotMet; a new one comes with every change.
// The guest reads the new metadata on its metadata server.
func TestSetLabelsAndMetadataFingerprints(t *testing.T) {
	t.Parallel()
	c := newClients(t, gcefake.Options{})
	ctx := context.Background()
	c.insertGuest(t, "v1", map[string]string{"user-data": "first"})
	get := func() *computepb.Instance {
		t.Helper()
		in, err := c.inst.Get(ctx, &computepb.GetInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	before := get()
	setLabels := func(fp string, labels map[string]string) error {
		op, err := c.inst.SetLabels(ctx, &computepb.SetLabelsInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "v1",
			InstancesSetLabelsRequestResource: &computepb.InstancesSetLabelsRequest{LabelFingerprint: proto.String(fp), Labels: labels}})
		if err == nil && (op.Proto().GetOperationType() != "setLabels" || op.Proto().GetError() != nil) {
			t.Errorf("setLabels operation %v", op.Proto())
		}
		return err
	}
	if err := setLabels(before.GetLabelFingerprint(), map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	if code, why := httpCode(setLabels(before.GetLabelFingerprint(), map[string]string{"a": "2"})); code != http.StatusPreconditionFailed || why != "conditionNotMet" {
		t.Errorf("setLabels with a stale fingerprint: %d %s, want 412 conditionNotMet", code, why)
	}
	if code, _ := httpCode(setLabels(get().GetLabelFingerprint(), map[string]string{"A": "1"})); code != http.StatusBadRequest {
		t.Errorf("setLabels with a bad key: %d, want 400", code)
	}
	after := get()
	if d := cmp.Diff(map[string]string{"a": "1"}, after.GetLabels()); d != "" || after.GetLabelFingerprint() == before.GetLabelFingerprint() {
		t.Errorf("labels (-want +got):\n%s\nfingerprint %q then %q", d, before.GetLabelFingerprint(), after.GetLabelFingerprint())
	}

	setMetadata := func(fp string, kv ...string) error {
		md := &computepb.Metadata{Fingerprint: proto.String(fp)}
		for i := 0; i < len(kv); i += 2 {
			md.Items = append(md.Items, &computepb.Items{Key: proto.String(kv[i]), Value: proto.String(kv[i+1])})
		}
		_, err := c.inst.SetMetadata(ctx, &computepb.SetMetadataInstanceRequest{Project: c.f.Project(), Zone: zone, Instance: "v1", MetadataResource: md})
		return err
	}
	fp := before.GetMetadata().GetFingerprint()
	if err := setMetadata(fp, "user-data", "second", "enable-guest-attributes", "TRUE"); err != nil {
		t.Fatal(err)
	}
	if code, why := httpCode(setMetadata(fp, "user-data", "third")); code != http.StatusPreconditionFailed || why != "conditionNotMet" {
		t.Errorf("setMetadata with a stale fingerprint: %d %s, want 412 conditionNotMet", code, why)
	}
	if code, _ := httpCode(setMetadata(get().GetMetadata().GetFingerprint(), "user-data", strings.Repeat("x", 256<<10+1))); code != http.StatusBadRequest {
		t.Errorf("setMetadata over the value limit: %d, want 400", code)
	}
	if code, body := guestRequest(t, c.f, "v1", http.MethodGet, "/computeMetadata/v1/instance/attributes/user-data", "", google); code != 200 || body != "second" {
		t.Errorf("the guest reads user-data %d %q, want the new one", code, body)
	}
	if fp2 := get().GetMetadata().GetFingerprint(); fp2 == fp || fp2 == "" {
		t.Errorf("metadata fingerprint %q after a change, was %q", fp2, fp)
	}
	if code, body := guestRequest(t, c.f, "v1", http.MethodGet, "/computeMetadata/v1/instance/attributes/user-data", "", google); code != 200 || body != "second" {
		t.Errorf("after a refused setMetadata the guest reads %d %q", code, body)
	}
}
