package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

func bootstrapSource(client *kubefake.Clientset) *BootstrapUserData {
	return &BootstrapUserData{
		Tokens:     bootstrap.Tokens{Client: client},
		Cluster:    bootstrap.Cluster{APIServerEndpoint: "10.0.0.1:6443", CACertHashes: []string{"sha256:" + strings.Repeat("ab", 32)}},
		Components: []bootstrap.Component{{Name: "containerd", Version: "1.6.20~ds1-1+b1"}},
	}
}

func joinTokens(t *testing.T, client *kubefake.Clientset) int {
	t.Helper()
	l, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

func TestUserDataIsRenderedPerMachine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider   string
		userData   providers.UserData
		knownIDs   bool
		wantPrefix string // "" means no user-data at all
		wantPID    bool   // the providerID is in the kubelet patch
	}{
		{provider: "gce", userData: providers.UserDataCloudInit, knownIDs: true, wantPrefix: "#cloud-config", wantPID: true},
		{provider: "hcloud", userData: providers.UserDataCloudInit, knownIDs: false, wantPrefix: "#cloud-config"},
		{provider: "static", userData: providers.UserDataScript, knownIDs: false, wantPrefix: "#!/bin/sh"},
		{provider: "kwok", userData: providers.UserDataNone, knownIDs: true},
		// What decides is the capability, never the name.
		{provider: "static", userData: providers.UserDataCloudInit, knownIDs: false, wantPrefix: "#cloud-config"},
		{provider: "gce", userData: providers.UserDataNone, knownIDs: true},
	} {
		t.Run(tc.provider+"/"+tc.userData.String(), func(t *testing.T) {
			t.Parallel()
			client := kubefake.NewClientset()
			p := fake.New()
			p.NameValue, p.KnownIDs, p.UserData = tc.provider, tc.knownIDs, tc.userData
			var logs safeBuffer
			g := autoscaling.GroupSpec{ID: "g1", Provider: tc.provider, MinSize: 0, MaxSize: 10, MachineType: "m1", Zone: "z1",
				Labels: map[string]string{"tier": "batch"}, Taints: []providers.Taint{{Key: "dedicated", Value: "batch", Effect: "NoSchedule"}}}
			c := startCore(t, p, func(o *autoscaling.Options) {
				o.UserData = bootstrapSource(client)
				o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}, g)
			if err := c.IncreaseSize("g1", 2); err != nil {
				t.Fatal(err)
			}
			r1, r2 := nthRequest(t, p, 1), nthRequest(t, p, 2)
			if tc.wantPrefix == "" {
				if len(r1.UserData) != 0 || joinTokens(t, client) != 0 {
					t.Fatalf("%s got %d bytes of user-data and %d tokens, want none", tc.provider, len(r1.UserData), joinTokens(t, client))
				}
				return
			}
			for _, r := range []providers.CreateRequest{r1, r2} {
				if !bytes.HasPrefix(r.UserData, []byte(tc.wantPrefix)) {
					t.Errorf("%s user-data starts %q, want %q", r.Name, firstLine(r.UserData), tc.wantPrefix)
				}
				for _, want := range []string{"10.0.0.1:6443", "tier=batch", "dedicated", "prebake.dev/group=g1", r.Name} {
					if !bytes.Contains(r.UserData, []byte(want)) {
						t.Errorf("%s user-data lacks %q", r.Name, want)
					}
				}
				// A known providerID is rendered into the kubelet patch; an
				// unknown one is left to the node (static) or the CCM (hcloud).
				pid, _ := p.ProviderID(r)
				fixed := bytes.Contains(r.UserData, []byte("put_file '"+bootstrap.KubeletPatchPath+"'"))
				if fixed != tc.wantPID || (fixed && !bytes.Contains(r.UserData, []byte("providerID: "+pid))) {
					t.Errorf("%s: kubelet patch rendered %v (providerID %q), want %v", r.Name, fixed, pid, tc.wantPID)
				}
			}
			// One fresh token per machine, and never the same one twice.
			if n := joinTokens(t, client); n != 2 {
				t.Errorf("%d join tokens, want 2 (one per machine)", n)
			}
			if bytes.Equal(r1.UserData, r2.UserData) {
				t.Error("two machines got the same user-data")
			}
			if strings.Contains(logs.String(), "kubeadm") || strings.Contains(logs.String(), tc.wantPrefix) {
				t.Errorf("logs hold user-data:\n%s", logs.String())
			}
		})
	}
}

func TestUserDataFileWinsAndFailuresShowAsInstanceErrors(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	p.NameValue = "gce"
	groups := []autoscaling.GroupSpec{
		{ID: "verbatim", Provider: "gce", MaxSize: 5, MachineType: "m1", Zone: "z1", UserData: []byte("#cloud-config\n{}\n")},
		{ID: "rendered", Provider: "gce", MaxSize: 5, MachineType: "m1", Zone: "z1"},
	}
	c := startCore(t, p, func(o *autoscaling.Options) { o.UserData = bootstrapSource(client) }, groups...)
	if err := c.IncreaseSize("verbatim", 1); err != nil {
		t.Fatal(err)
	}
	if r := nthRequest(t, p, 1); string(r.UserData) != "#cloud-config\n{}\n" || joinTokens(t, client) != 0 {
		t.Errorf("userDataFile group: user-data %q and %d tokens, want it verbatim and none", r.UserData, joinTokens(t, client))
	}

	// The cluster refuses the token: the machine is not created, and CA
	// sees an instance error it can act on.
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("secrets is forbidden")
	})
	if err := c.IncreaseSize("rendered", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "instance error", func() bool {
		ns := mustNodes(t, c, "rendered")
		return len(ns) == 1 && ns[0].Error != nil
	})
	ns := mustNodes(t, c, "rendered")
	if e := ns[0].Error; e.Code != "user_data" || e.Class != providers.ErrorOther || !strings.Contains(e.Message, "forbidden") {
		t.Errorf("instance error = %+v, want class Other, code user_data, and the cause", e)
	}
	if got := len(p.CreateRequests()); got != 1 {
		t.Errorf("%d Create calls, want 1 (none for the machine without user-data)", got)
	}
}

func TestBootstrapUserDataCheck(t *testing.T) {
	t.Parallel()
	b := bootstrapSource(kubefake.NewClientset())
	if err := b.Check(); err != nil {
		t.Fatalf("valid settings: %v", err)
	}
	b.Cluster.CACertHashes = []string{"md5:abc"}
	if err := b.Check(); err == nil || !strings.Contains(err.Error(), "caCertHashes") {
		t.Errorf("Check with a bad CA hash = %v, want an error naming caCertHashes", err)
	}
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return string(line)
}

// What a provider's nodes need (Capabilities.NodeRuntime, a container's)
// reaches the rendered user-data.
func TestUserDataCarriesTheNodeRuntime(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	p.NodeRuntime = bootstrap.Runtime{SharedKernel: true, SandboxImage: "10.9.0.1:5000/pause:prebake"}
	c := startCore(t, p, func(o *autoscaling.Options) { o.UserData = bootstrapSource(client) },
		autoscaling.GroupSpec{ID: "g1", Provider: "fake", MaxSize: 3, MachineType: "m1", Zone: "z1"})
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	if ud := nthRequest(t, p, 1).UserData; !bytes.Contains(ud, []byte("10.9.0.1:5000/pause:prebake")) {
		t.Errorf("user-data lacks the provider's sandbox image:\n%s", ud)
	}
}

// startCore starts a core over p with groups, options edited by edit; it is
// shut down when the test ends.
func startCore(t *testing.T, p providers.Provider, edit func(*autoscaling.Options), groups ...autoscaling.GroupSpec) *autoscaling.Core {
	t.Helper()
	var n atomic.Int64
	o := autoscaling.Options{
		Cluster: "test", Groups: groups, Providers: map[string]providers.Provider{p.Name(): p},
		RefreshInterval: time.Hour,
		Workers:         autoscaling.WorkerOptions{Parallelism: 4, QPS: 1000, Retries: 2, RetryBase: time.Millisecond},
		NameRand:        func() string { return fmt.Sprintf("%05d", n.Add(1)) },
	}
	if edit != nil {
		edit(&o)
	}
	c, err := autoscaling.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c
}

// nthRequest waits for the provider's n-th Create and returns its request.
func nthRequest(t *testing.T, p *fake.Provider, n int) providers.CreateRequest {
	t.Helper()
	eventually(t, "create request", func() bool { return len(p.CreateRequests()) >= n })
	return p.CreateRequests()[n-1]
}

// eventually polls cond until it holds or 10 s pass: creations run on the
// core's workers.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func mustNodes(t *testing.T, c *autoscaling.Core, id string) []autoscaling.InstanceView {
	t.Helper()
	v, err := c.Nodes(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPrebakedIgnitionNeedsTheManifestsSysext: a prebaked Flatcar machine whose catalog
// manifest records no sysext can't be rendered (the version its node must find is unknown);
// the error names the group, the image and the component, and the token made for it is gone.
func TestPrebakedIgnitionNeedsTheManifestsSysext(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	b := bootstrapSource(client)
	b.Sysext = func(arch string) bootstrap.Sysext { return bootstrap.Sysext{Version: "v1.35.4", Arch: arch} }
	m := autoscaling.Machine{
		Provider: "hcloud", Capabilities: providers.Capabilities{BootsImages: true, UserData: providers.UserDataCloudInit},
		Request: providers.CreateRequest{Name: "flat-1", Group: "flat", Image: "1234", ImageKind: providers.ImagePrebaked,
			NodeLabels: map[string]string{providers.LabelArch: "amd64"}},
		Family: imagecatalog.FamilyFlatcar,
	}
	_, err := b.UserData(t.Context(), m)
	if err == nil || !strings.Contains(err.Error(), `node group "flat": image 1234 has no kubernetes-sysext in its catalog manifest`) {
		t.Errorf("no sysext in the manifest: %v", err)
	}
	if n := joinTokens(t, client); n != 0 {
		t.Errorf("%d join tokens left, want 0", n)
	}
	m.Manifest.Components = map[string]string{imagecatalog.SysextComponent: "v1.34.1"}
	ud, err := b.UserData(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ud, []byte(`"version":"3.4.0"`)) {
		t.Errorf("not an Ignition config (%d bytes)", len(ud))
	}
}
