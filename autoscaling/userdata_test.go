package autoscaling

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prebake-dev/prebake/bootstrap"
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
			var logs syncBuffer
			g := GroupSpec{ID: "g1", Provider: tc.provider, MinSize: 0, MaxSize: 10, MachineType: "m1", Zone: "z1",
				Labels: map[string]string{"tier": "batch"}, Taints: []providers.Taint{{Key: "dedicated", Value: "batch", Effect: "NoSchedule"}}}
			c := newCoreWith(t, p, func(o *Options) {
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
			// The instance keeps no user-data: the token lives only in the request.
			c.mu.RLock()
			for _, inst := range c.groups["g1"].instances {
				if len(inst.req.UserData) != 0 {
					t.Errorf("instance %s keeps %d bytes of user-data", inst.name, len(inst.req.UserData))
				}
			}
			c.mu.RUnlock()
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
	groups := []GroupSpec{
		{ID: "verbatim", Provider: "gce", MaxSize: 5, MachineType: "m1", Zone: "z1", UserData: []byte("#cloud-config\n{}\n")},
		{ID: "rendered", Provider: "gce", MaxSize: 5, MachineType: "m1", Zone: "z1"},
	}
	c := newCoreWith(t, p, func(o *Options) { o.UserData = bootstrapSource(client) }, groups...)
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

// TestJoinTokenRevokedOnceTheNodeRegisters: a machine's join token is deleted as soon as its
// Node registers (the kubelet has its own certificate by then), and only that machine's; a
// machine adopted from the cloud (whose token this process did not make) costs no API call.
func TestJoinTokenRevokedOnceTheNodeRegisters(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	p.NameValue, p.KnownIDs = "gce", true
	g := GroupSpec{ID: "g1", Provider: "gce", MinSize: 0, MaxSize: 10, MachineType: "m1", Zone: "z1"}
	c := newCoreWith(t, p, func(o *Options) { o.UserData = bootstrapSource(client) }, g)
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	r1, r2 := nthRequest(t, p, 1), nthRequest(t, p, 2)
	if n := joinTokens(t, client); n != 2 {
		t.Fatalf("%d join tokens, want one per machine", n)
	}
	pid1, _ := p.ProviderID(r1)
	c.ObserveNode(r1.Name, pid1, false, c.now())
	eventually(t, "the registered machine's token revoked", func() bool { return joinTokens(t, client) == 1 })
	l, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Items[0].Labels[bootstrap.NodeLabel]; got != r2.Name {
		t.Errorf("the token left is %s's, want %s's (not registered yet)", got, r2.Name)
	}
	if got := testutil.ToFloat64(c.metrics.joinTokensRevoked); got != 1 {
		t.Errorf("prebake_join_tokens_revoked_total = %v, want 1", got)
	}

	// An adopted machine: its Node registering lists no Secrets.
	pid2, _ := p.ProviderID(r2)
	c.mu.Lock()
	adopted := c.index.byID(pid2)
	adopted.adopted = true
	c.mu.Unlock()
	lists := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "secrets" {
			lists++
		}
	}
	c.ObserveNode(r2.Name, pid2, false, c.now())
	c.ObserveNode(r1.Name, pid1, true, c.now())     // Ready: no second revocation
	if err := c.Shutdown(t.Context()); err != nil { // waits for any revocation it started
		t.Fatal(err)
	}
	after := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "secrets" {
			after++
		}
	}
	if after != lists {
		t.Errorf("%d more Secret lists after an adopted machine registered and a registered one turned Ready, want none", after-lists)
	}
}

// What a provider's nodes need (Capabilities.NodeRuntime, a container's)
// reaches the rendered user-data.
func TestUserDataCarriesTheNodeRuntime(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	p.NodeRuntime = bootstrap.Runtime{SharedKernel: true, SandboxImage: "10.9.0.1:5000/pause:prebake"}
	c := newCoreWith(t, p, func(o *Options) { o.UserData = bootstrapSource(client) },
		GroupSpec{ID: "g1", Provider: "fake", MaxSize: 3, MachineType: "m1", Zone: "z1"})
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	if ud := nthRequest(t, p, 1).UserData; !bytes.Contains(ud, []byte("10.9.0.1:5000/pause:prebake")) {
		t.Errorf("user-data lacks the provider's sandbox image:\n%s", ud)
	}
}
