package static

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prebake-dev/prebake/providers"
)

func claims(t *testing.T, cs *fake.Clientset) map[string]coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(DefaultNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]coordinationv1.Lease{}
	for _, c := range l.Items {
		out[c.Name] = c
	}
	return out
}

func TestCreateClaimsAndRecords(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	sh := newFakeShell()
	p := newTestProvider(t, cs, sh, pool(1), nil)
	in, err := p.Create(t.Context(), request("metal-1", "metal"))
	if err != nil {
		t.Fatal(err)
	}
	want := providers.Instance{
		ProviderID: "static://host-0", Name: "metal-1", Group: "metal", State: providers.StateRunning,
		ImageKind: providers.ImageRuntimeInstall, CreatedAt: t0,
	}
	if diff := cmp.Diff(want, in); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"#!/bin/sh\necho bootstrap metal-1\n"}, sh.scripts("host-0")); diff != "" {
		t.Errorf("scripts run (-want +got):\n%s", diff)
	}
	c := claims(t, cs)["host-0"]
	wantLabels := map[string]string{
		providers.LabelCluster: testCluster, providers.LabelGroup: "metal",
		providers.LabelMachine: "metal-1", providers.LabelImageKind: "runtime-install",
	}
	if diff := cmp.Diff(wantLabels, c.Labels); diff != "" {
		t.Errorf("claim labels (-want +got):\n%s", diff)
	}
	if c.Annotations[AnnotationPhase] != phaseReady || c.Annotations[AnnotationProviderID] != "static://host-0" {
		t.Errorf("claim annotations %v", c.Annotations)
	}
	if c.Spec.HolderIdentity == nil || *c.Spec.HolderIdentity != "test/metal-1" {
		t.Errorf("claim holder %v, want test/metal-1", c.Spec.HolderIdentity)
	}
	listed, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]providers.Instance{want}, listed); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// TestCreateFits: a machine serves a request only in its type, zone and
// group; empty zone or group means any.
func TestCreateFits(t *testing.T) {
	t.Parallel()
	ms := []Machine{
		{Host: "large", MachineType: "metal-large", Zone: testZone},
		{Host: "zone-b", MachineType: testType, Zone: "zone-b"},
		{Host: "gpu-only", MachineType: testType, Zone: testZone, Group: "gpu"},
		{Host: "anywhere", MachineType: testType},
	}
	cs := fake.NewClientset()
	p := newTestProvider(t, cs, newFakeShell(), ms, nil)
	in, err := p.Create(t.Context(), request("metal-1", "metal"))
	if err != nil {
		t.Fatal(err)
	}
	if in.ProviderID != "static://anywhere" {
		t.Errorf("group metal in zone-a got %s, want static://anywhere", in.ProviderID)
	}
	_, err = p.Create(t.Context(), request("metal-2", "metal"))
	var nf *noFreeMachineError
	if !errors.As(err, &nf) || nf.fitting != 1 {
		t.Fatalf("second Create: %v, want a noFreeMachineError with 1 fitting machine", err)
	}
	for _, s := range []string{"all 1 machines", `"metal-small"`, `"zone-a"`, `"metal"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %s", err, s)
		}
	}
	in, err = p.Create(t.Context(), request("gpu-1", "gpu"))
	if err != nil || in.ProviderID != "static://gpu-only" {
		t.Errorf("group gpu got %+v, %v; want static://gpu-only", in, err)
	}
	r := request("metal-3", "metal")
	r.Location, r.MachineType = "zone-c", "metal-large" // "large" is in zone-a only
	_, err = p.Create(t.Context(), r)
	if !errors.As(err, &nf) || nf.fitting != 0 || !strings.Contains(err.Error(), "add one to providers.static.machines") {
		t.Errorf("zone without machines: %v", err)
	}
}

// TestCreateRetryResumesBootstrap: a claim left in phase bootstrapping (a
// plugin that died mid-bootstrap) is bootstrapped again by the retry, on the
// same machine.
func TestCreateRetryResumesBootstrap(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	sh := newFakeShell()
	p := newTestProvider(t, cs, sh, pool(3), nil)
	req := request("metal-1", "metal")
	l := p.claimLease(p.byHost["host-2"], req, providers.ImageRuntimeInstall, t0)
	if _, err := cs.CoordinationV1().Leases(DefaultNamespace).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	listed, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].State != providers.StateCreating {
		t.Fatalf("List of a bootstrapping claim = %+v, want one creating", listed)
	}
	in, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if in.ProviderID != "static://host-2" || in.State != providers.StateRunning {
		t.Errorf("retry = %+v, want host-2 running", in)
	}
	if n := len(sh.scripts("host-2")); n != 1 {
		t.Errorf("host-2 ran %d scripts, want 1", n)
	}
	if _, err := p.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if n := len(sh.scripts("host-2")); n != 1 {
		t.Errorf("a retry of a ready machine ran the bootstrap again (%d runs)", n)
	}
}

func TestCreateBootstrapFailureReleases(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	sh := newFakeShell()
	const token = "abcdef.0123456789abcdef"
	sh.failHost("host-0", &CommandError{Host: "host-0", Status: 2, Stderr: "kubeadm join --token " + token + ": E: Could not get lock"})
	var logs bytes.Buffer
	p := newTestProvider(t, cs, sh, pool(1), func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	_, err := p.Create(t.Context(), request("metal-1", "metal"))
	// The error reaches CA's Events: the exit status, no stderr.
	if err == nil || !strings.Contains(err.Error(), "status 2") || strings.Contains(err.Error(), "Could not get lock") {
		t.Fatalf("Create: %v, want the exit status and no stderr", err)
	}
	// prebake's log has the tail, with the token redacted.
	if !strings.Contains(logs.String(), "Could not get lock") || strings.Contains(logs.String(), token) {
		t.Errorf("log: %s\nwant the stderr tail without the token", logs.String())
	}
	if c := p.Classify(err); c.Code != "command_failed" || c.Retryable {
		t.Errorf("Classify = %+v", c)
	}
	if n := len(claims(t, cs)); n != 0 {
		t.Errorf("%d claims after a failed bootstrap, want 0", n)
	}
	sh.failHost("host-0", nil)
	if _, err := p.Create(t.Context(), request("metal-1", "metal")); err != nil {
		t.Errorf("retry after the machine recovered: %v", err)
	}
}

func TestCreateSkipsMachinesHeldElsewhere(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	other := newTestProvider(t, cs, newFakeShell(), pool(2), func(o *Options) { o.Cluster = "other" })
	r := request("o-1", "metal")
	r.Cluster = "other"
	held, err := other.Create(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, cs, newFakeShell(), pool(2), nil)
	for _, name := range []string{"metal-1", "metal-2"} {
		in, err := p.Create(t.Context(), request(name, "metal"))
		if name == "metal-2" {
			if p.Classify(err).Class != providers.ErrorOutOfResources {
				t.Errorf("Create with every machine held: %v, want OutOfResources", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if in.ProviderID == held.ProviderID {
			t.Errorf("claimed %s, which cluster other holds", in.ProviderID)
		}
	}
	listed, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 {
		t.Errorf("List shows %d machines, want only this cluster's 1: %+v", len(listed), listed)
	}
	// Deleting the other cluster's machine leaves it alone.
	if err := p.Delete(t.Context(), held.ProviderID); err != nil {
		t.Fatal(err)
	}
	if _, ok := claims(t, cs)[strings.TrimPrefix(held.ProviderID, "static://")]; !ok {
		t.Error("Delete released another cluster's claim")
	}
}

// TestCreateLosesRace plays a second replica that claims the first machine
// between our List and our create: we move on to the next one.
func TestCreateLosesRace(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	lost := 0
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lost == 0 {
			lost++
			l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
			return true, nil, apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), l.Name)
		}
		return false, nil, nil
	})
	p := newTestProvider(t, cs, newFakeShell(), pool(2), nil)
	if _, err := p.Create(t.Context(), request("metal-1", "metal")); err != nil {
		t.Fatalf("Create after losing one race: %v", err)
	}
	if lost != 1 {
		t.Errorf("lost %d races, want 1", lost)
	}
}

func TestCreateRejectsBadRequests(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), newFakeShell(), pool(1), nil)
	tests := []struct {
		name    string
		mod     func(*providers.CreateRequest)
		wantErr []string
	}{
		{name: "unknown machine type", mod: func(r *providers.CreateRequest) { r.MachineType = "m5.large" }, wantErr: []string{`"m5.large"`, "metal-large, metal-small"}},
		{name: "bad name", mod: func(r *providers.CreateRequest) { r.Name = "M_1" }, wantErr: []string{`"M_1"`, "DNS label"}},
		{name: "no group", mod: func(r *providers.CreateRequest) { r.Group = "" }, wantErr: []string{"has no group"}},
		{name: "other cluster", mod: func(r *providers.CreateRequest) { r.Cluster = "prod" }, wantErr: []string{`cluster "prod"`}},
		{name: "no script", mod: func(r *providers.CreateRequest) { r.UserData = nil }, wantErr: []string{"no node script", "userDataFile"}},
		{name: "prebaked", mod: func(r *providers.CreateRequest) { r.ImageKind = providers.ImagePrebaked }, wantErr: []string{"can't boot an image"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := request("metal-1", "metal")
			tc.mod(&req)
			_, err := p.Create(t.Context(), req)
			if err == nil {
				t.Fatal("Create: nil error")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q doesn't contain %s", err, s)
				}
			}
			if c := p.Classify(err); c.Retryable || c.Class != providers.ErrorOther {
				t.Errorf("Classify = %+v, want a non-retryable Other", c)
			}
		})
	}
}

// TestCreateMakesNamespace plays the API server's part: a Lease can't be
// created in a namespace that doesn't exist.
func TestCreateMakesNamespace(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ns := a.GetNamespace()
		if _, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("namespaces"), "", ns); apierrors.IsNotFound(err) {
			return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), ns)
		}
		return false, nil, nil
	})
	p := newTestProvider(t, cs, newFakeShell(), pool(1), func(o *Options) { o.Namespace = "pool" })
	if _, err := p.Create(t.Context(), request("metal-1", "metal")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "pool", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace: %v", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mod     func(*Options)
		wantErr string
	}{
		{name: "empty pool", mod: func(o *Options) { o.Machines = nil }, wantErr: "pool is empty"},
		{name: "bad host", mod: func(o *Options) { o.Machines = []Machine{{Host: "Host_1", MachineType: testType}} }, wantErr: "DNS-1123"},
		{name: "duplicate host", mod: func(o *Options) { o.Machines = append(pool(1), pool(1)...) }, wantErr: "listed twice"},
		{name: "undeclared type", mod: func(o *Options) { o.Machines = []Machine{{Host: "a", MachineType: "xl"}} }, wantErr: `machine type "xl" is not declared`},
		{name: "type without cpu", mod: func(o *Options) { o.MachineTypes = []providers.MachineType{{Name: testType, MemoryBytes: 1}} }, wantErr: "declare its cpu and memory"},
		{name: "bad port", mod: func(o *Options) { o.Machines = []Machine{{Host: "a", MachineType: testType, Port: 70000}} }, wantErr: "not a TCP port"},
		{name: "bad label", mod: func(o *Options) {
			o.Machines = []Machine{{Host: "a", MachineType: testType, Labels: map[string]string{"rack": "r 1"}}}
		}, wantErr: `label rack: value "r 1"`},
		{name: "no shell", mod: func(o *Options) { o.Shell = nil }, wantErr: "Shell is nil"},
		{name: "no cluster", mod: func(o *Options) { o.Cluster = "" }, wantErr: "Cluster is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := Options{Client: fake.NewClientset(), Cluster: testCluster, Machines: pool(1), MachineTypes: testTypes(), Shell: newFakeShell()}
			tc.mod(&o)
			_, err := New(o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestImagesAndMachineType(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), newFakeShell(), pool(1), nil)
	if c := p.Capabilities(); c.BootsImages || c.UserData != providers.UserDataScript {
		t.Errorf("Capabilities() = %+v: a pool can't boot images and runs the node script", c)
	}
	mt, err := p.MachineType(t.Context(), "metal-large", "anywhere")
	if err != nil || mt.Arch != "arm64" || mt.MilliCPU != 32000 {
		t.Errorf("MachineType = %+v, %v", mt, err)
	}
	if _, known := p.ProviderID(request("m", "g")); known {
		t.Error("ProviderID known before a machine is claimed")
	}
}

func TestRedactedStderr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"E: Could not get lock /var/lib/dpkg/lock", "E: Could not get lock /var/lib/dpkg/lock"},
		{"+ kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:00ff",
			"+ kubeadm join 10.0.0.1:6443 --token <redacted> --discovery-token-ca-cert-hash sha256:00ff"},
		{`TOKEN="s3cr3t" password: hunter2, api_key=xyz`, `TOKEN="<redacted>" password: <redacted>, api_key=<redacted>`},
	} {
		got := (&CommandError{Stderr: tc.in}).RedactedStderr()
		if got != tc.want {
			t.Errorf("RedactedStderr(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
