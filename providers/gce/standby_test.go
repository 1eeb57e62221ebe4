package gce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

func standbyRequest(name string, state providers.StandbyState) providers.CreateRequest {
	req := request(name, "g", "e2-standard-2", testZone)
	req.UserData = []byte("#cloud-config\n# prepare only\n")
	req.Standby = state
	return req
}

// listedOne returns what List says of id.
func listedOne(t *testing.T, p *Provider, id string) providers.Instance {
	t.Helper()
	l, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range l {
		if in.ProviderID == id {
			return in
		}
	}
	t.Fatalf("List lacks %s: %+v", id, l)
	return providers.Instance{}
}

// reportStatus plays the standby's script: it writes its status file to
// the guest attribute through the instance's metadata server.
func reportStatus(t *testing.T, f *gcefake.Fake, name, result, msg string) {
	t.Helper()
	base, err := f.MetadataURL(name)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"version":1,"provider":"gce","node":"` + name + `","result":"` + result + `","error":"` + msg + `"}`
	req, err := http.NewRequest(http.MethodPut, base+"/computeMetadata/v1/instance/guest-attributes/"+bootstrap.StandbyAttribute, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Metadata-Flavor", "Google")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PUT of the standby's status: %s", res.Status)
	}
}

// A standby carries the marker label and guest attributes; List shows it
// warming, prepared once its status says so (and failed when its script
// failed), prepared while it is being stopped (not deleting), and parked
// once stopped.
func TestStandbyPhasesFromLabelStatusAndGuestAttribute(t *testing.T) {
	t.Parallel()
	clk := gcefake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := newFake(t, gcefake.Options{Now: clk.Now})
	p := newTestProvider(t, f)
	ctx := context.Background()
	in, err := p.Create(ctx, standbyRequest("g-s1", providers.StandbyStopped))
	if err != nil {
		t.Fatal(err)
	}
	if in.Standby != (providers.Standby{State: providers.StandbyStopped, Phase: providers.StandbyWarming}) {
		t.Errorf("Create returned standby %+v", in.Standby)
	}
	fi := f.Instances()[0]
	if fi.Labels["prebake-dev_standby"] != "stopped" || fi.Metadata["enable-guest-attributes"] != "TRUE" || fi.UserData != "#cloud-config\n# prepare only\n" {
		t.Errorf("standby instance labels %v, metadata %v", fi.Labels, fi.Metadata)
	}
	phase := func() string {
		l := listedOne(t, p, in.ProviderID)
		return l.Standby.Phase.String() + "/" + l.State.String()
	}
	var got []string
	got = append(got, phase())
	reportStatus(t, f, "g-s1", "prepared", "")
	got = append(got, phase())
	f.SetOperationDelay(time.Minute)
	parked := make(chan error, 1)
	go func() { parked <- p.Park(ctx, in.ProviderID, providers.StandbyStopped) }()
	eventually(t, "the stop to be accepted", func() bool { return f.Instances()[0].Status == "STOPPING" })
	got = append(got, phase())
	clk.Advance(time.Minute)
	if err := <-parked; err != nil {
		t.Fatalf("Park: %v", err)
	}
	got = append(got, phase())
	want := []string{"warming/running", "prepared/running", "prepared/running", "parked/running"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("phases (-want +got):\n%s", d)
	}

	f.SetOperationDelay(0)
	bad, err := p.Create(ctx, standbyRequest("g-s2", providers.StandbySuspended))
	if err != nil {
		t.Fatal(err)
	}
	reportStatus(t, f, "g-s2", "failed", "install: apt-get failed")
	l := listedOne(t, p, bad.ProviderID)
	if l.Error == nil || l.Error.Code != "standby_failed" || !strings.Contains(l.Error.Message, "install: apt-get failed") || l.Standby.State != providers.StandbySuspended {
		t.Errorf("a failed standby is listed %+v (error %+v)", l, l.Error)
	}
}

// Resume removes the marker before the instance gets its join user-data,
// and hands the user-data over before the instance runs again: setLabels,
// setMetadata, then start (stopped) or resume (suspended). The user-data
// is the instance's afterwards and appears in no log line.
func TestResumeOrderAndUserData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state providers.StandbyState
		verb  string
	}{{providers.StandbyStopped, "start"}, {providers.StandbySuspended, "resume"}} {
		t.Run(string(tc.state), func(t *testing.T) {
			t.Parallel()
			f := newFake(t, gcefake.Options{})
			var logs bytes.Buffer
			p, err := New(context.Background(), Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "c", Rate: 1000, Burst: 1000,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			ctx := context.Background()
			in, err := p.Create(ctx, standbyRequest("g-r1", tc.state))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Park(ctx, in.ProviderID, tc.state); err != nil {
				t.Fatal(err)
			}
			f.ResetRequests()
			const secret = "#cloud-config\n# token: abcdef.0123456789abcdef\n"
			got, err := p.Resume(ctx, in.ProviderID, []byte(secret))
			if err != nil {
				t.Fatal(err)
			}
			if got.ProviderID != in.ProviderID || got.Standby.Phase != providers.StandbyNone || got.State != providers.StateCreating {
				t.Errorf("Resume returned %+v", got)
			}
			var calls []string
			for _, r := range f.Requests() {
				if r.Method == http.MethodPost && r.Instance == "" && !strings.Contains(r.Path, "/operations/") {
					calls = append(calls, r.Path[strings.LastIndexByte(r.Path, '/')+1:])
				}
			}
			// The last setLabels removes prebake-dev_resuming, once the machine runs.
			if d := cmp.Diff([]string{"setLabels", "setMetadata", tc.verb, "setLabels"}, calls); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			fi := f.Instances()[0]
			if _, resuming := fi.Labels["prebake-dev_resuming"]; resuming {
				t.Errorf("after Resume the instance keeps prebake-dev_resuming: %v", fi.Labels)
			}
			if _, marked := fi.Labels["prebake-dev_standby"]; marked || fi.UserData != secret || fi.Status != "RUNNING" ||
				fi.Metadata["enable-guest-attributes"] != "TRUE" || fi.Labels["prebake-dev_cluster"] != "c" {
				t.Errorf("after Resume: %s labels %v metadata keys %d", fi.Status, fi.Labels, len(fi.Metadata))
			}
			if l := listedOne(t, p, in.ProviderID); l.Standby.Phase != providers.StandbyNone || l.Error != nil {
				t.Errorf("listed after Resume: %+v", l)
			}
			if strings.Contains(logs.String(), "abcdef") || !strings.Contains(logs.String(), "standby resumed") {
				t.Errorf("logs hold the user-data, or say nothing of the resume:\n%s", logs.String())
			}
		})
	}
}

// A resume that stopped after the marker went (a process killed, a failed
// setMetadata) leaves a stopped machine without the marker: List shows no
// standby, and the next Resume finishes the take.
func TestResumeFinishesAnInterruptedTake(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	in, err := p.Create(ctx, standbyRequest("g-i1", providers.StandbyStopped))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Park(ctx, in.ProviderID, providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	f.Fail(http.MethodPost, "zones/"+testZone+"/instances/g-i1/setMetadata", 1, gcefake.ErrInvalid)
	if _, err := p.Resume(ctx, in.ProviderID, []byte("#cloud-config\n# join\n")); err == nil {
		t.Fatal("Resume succeeded through a failed setMetadata")
	}
	l := listedOne(t, p, in.ProviderID)
	if l.Standby.Phase != providers.StandbyNone || f.Instances()[0].Status != "TERMINATED" || f.Instances()[0].UserData == "#cloud-config\n# join\n" {
		t.Fatalf("after the interrupted take: listed %+v, fake %s", l, f.Instances()[0].Status)
	}
	if err := p.Park(ctx, in.ProviderID, providers.StandbyStopped); err == nil || !strings.Contains(err.Error(), "it is no standby") {
		t.Errorf("Park of a taken standby: %v", err)
	}
	if _, err := p.Resume(ctx, in.ProviderID, []byte("#cloud-config\n# join\n")); err != nil {
		t.Fatal(err)
	}
	if fi := f.Instances()[0]; fi.Status != "RUNNING" || fi.UserData != "#cloud-config\n# join\n" {
		t.Errorf("after the second Resume: %s, user-data %q", fi.Status, fi.UserData)
	}
}

// A take that stops between its setLabels and its start (a process killed;
// here a setMetadata that fails) leaves the instance TERMINATED or
// SUSPENDED without the standby label, dated by prebake-dev_resuming. List
// shows it as usual for resumeGrace, then failed, so CA deletes it at once
// rather than after --max-node-provision-time. Once a Resume starts it, it
// is listed as usual, even when the label could not be removed.
func TestListShowsAnInterruptedTakeFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state  providers.StandbyState
		status string
	}{{providers.StandbyStopped, "TERMINATED"}, {providers.StandbySuspended, "SUSPENDED"}} {
		t.Run(string(tc.state), func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			clk := gcefake.NewClock(t0)
			f := newFake(t, gcefake.Options{Now: clk.Now})
			p, err := New(context.Background(), Options{Project: f.Project(), Endpoint: f.URL(), Cluster: "c", Rate: 1000, Burst: 1000,
				Logger: slog.New(slog.DiscardHandler), Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			ctx := context.Background()
			in, err := p.Create(ctx, standbyRequest("g-k1", tc.state))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Park(ctx, in.ProviderID, tc.state); err != nil {
				t.Fatal(err)
			}
			base := "zones/" + testZone + "/instances/g-k1/"
			f.Fail(http.MethodPost, base+"setMetadata", 1, gcefake.ErrInvalid)
			if _, err := p.Resume(ctx, in.ProviderID, []byte("#cloud-config\n# join\n")); err == nil {
				t.Fatal("Resume succeeded through a failed setMetadata")
			}
			fi := f.Instances()[0]
			if _, marked := fi.Labels["prebake-dev_standby"]; marked || fi.Labels["prebake-dev_resuming"] != fmt.Sprint(t0.Unix()) || fi.Status != tc.status {
				t.Fatalf("after the interrupted take: %s, labels %v; want %s, no standby label, prebake-dev_resuming=%d", fi.Status, fi.Labels, tc.status, t0.Unix())
			}

			clk.Advance(resumeGrace)
			if l := listedOne(t, p, in.ProviderID); l.Error != nil || l.Standby.Phase != providers.StandbyNone {
				t.Errorf("listed within the grace: %+v (error %+v), want a machine without error", l, l.Error)
			}
			clk.Advance(time.Second)
			l := listedOne(t, p, in.ProviderID)
			if l.Error == nil || l.Error.Code != "resume_interrupted" || l.Error.Class != providers.ErrorOther ||
				!strings.Contains(l.Error.Message, "g-k1") || !strings.Contains(l.Error.Message, tc.status) || !strings.Contains(l.Error.Message, "never join") {
				t.Fatalf("listed %s after the grace: error %+v, want resume_interrupted naming the instance and its status", tc.status, l.Error)
			}

			// The next Resume finishes the take; its label stays (the removal
			// fails), which changes nothing for a machine that runs.
			f.Fail(http.MethodPost, base+"setLabels", 1, gcefake.ErrInvalid)
			if _, err := p.Resume(ctx, in.ProviderID, []byte("#cloud-config\n# join\n")); err != nil {
				t.Fatalf("Resume after the interrupted take, its label removal failing: %v", err)
			}
			for _, wait := range []time.Duration{0, time.Hour} {
				clk.Advance(wait)
				fi := f.Instances()[0]
				if _, resuming := fi.Labels["prebake-dev_resuming"]; !resuming {
					t.Fatalf("the failed removal removed prebake-dev_resuming: %v", fi.Labels)
				}
				if l := listedOne(t, p, in.ProviderID); l.Error != nil {
					t.Errorf("%s with prebake-dev_resuming, listed with error %+v; want none", fi.Status, l.Error)
				}
			}
		})
	}
}

// A fingerprint another writer made stale (412) is fetched again and the
// call retried; a start that meets a stockout is out of resources, so the
// core creates elsewhere.
func TestResumeRetriesStaleFingerprintsAndClassifiesStockouts(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	in, err := p.Create(ctx, standbyRequest("g-f1", providers.StandbyStopped))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Park(ctx, in.ProviderID, providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	stale := gcefake.Fault{HTTPStatus: http.StatusPreconditionFailed, Reason: "conditionNotMet", Message: "Labels fingerprint either invalid or resource labels have changed"}
	base := "zones/" + testZone + "/instances/g-f1/"
	f.Fail(http.MethodPost, base+"setLabels", 1, stale)
	f.Fail(http.MethodPost, base+"setMetadata", 1, stale)
	f.Fail(http.MethodPost, base+"start", 1, gcefake.ErrZoneResourcePoolExhausted)
	_, err = p.Resume(ctx, in.ProviderID, []byte("#cloud-config\n"))
	if c := p.Classify(err); c.Class != providers.ErrorOutOfResources || c.Code != "ZONE_RESOURCE_POOL_EXHAUSTED" {
		t.Fatalf("Resume through a stockout: %v, classified %+v", err, c)
	}
	if n, m := f.Calls(http.MethodPost, "/setLabels"), f.Calls(http.MethodPost, "/setMetadata"); n != 2 || m != 2 {
		t.Errorf("setLabels %d times, setMetadata %d times; want each retried once", n, m)
	}
	if fi := f.Instances()[0]; fi.Status != "TERMINATED" || fi.UserData != "#cloud-config\n" {
		t.Errorf("after the stockout: %s, user-data %q", fi.Status, fi.UserData)
	}
}

// Park refuses a state the provider does not offer and an instance that
// is no standby, naming why.
func TestParkRefuses(t *testing.T) {
	t.Parallel()
	f := newFake(t, gcefake.Options{})
	p := newTestProvider(t, f)
	ctx := context.Background()
	node, err := p.Create(ctx, request("g-n1", "g", "e2-standard-2", testZone))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Park(ctx, node.ProviderID, "hibernated"); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Park hibernated: %v, want ErrStandbyUnsupported", err)
	}
	if err := p.Park(ctx, node.ProviderID, providers.StandbyStopped); err == nil || !strings.Contains(err.Error(), "has no label prebake-dev_standby") {
		t.Errorf("Park of a node: %v", err)
	}
	if f.Instances()[0].Status != "RUNNING" {
		t.Errorf("a refused Park stopped the node")
	}
	if err := p.Park(ctx, "gce://other-project/"+testZone+"/g-n1", providers.StandbyStopped); err == nil || !strings.Contains(err.Error(), "other-project") {
		t.Errorf("Park in another project: %v", err)
	}
	if _, err := p.Create(ctx, standbyRequest("g-n2", "hibernated")); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Create of a hibernated standby: %v", err)
	}
}

// eventually polls cond every 5ms for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
