package canary

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// kubeletProvider is the fake cloud plus a stand-in kubelet: when a Create
// succeeds, node (if set) turns the request into the Node that registers,
// synchronously, so a test needs no waiting to see it.
type kubeletProvider struct {
	*fake.Provider
	client *kubefake.Clientset
	node   func(req providers.CreateRequest, m providers.Instance) *corev1.Node

	mu     sync.Mutex // guards tokens
	tokens int        // join tokens that existed when the machine booted
}

func (k *kubeletProvider) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	m, err := k.Provider.Create(ctx, req)
	if err != nil || k.node == nil {
		return m, err
	}
	l, lerr := k.client.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if lerr != nil {
		return m, lerr
	}
	k.mu.Lock()
	k.tokens = len(l.Items)
	k.mu.Unlock()
	if n := k.node(req, m); n != nil {
		if _, err := k.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return m, err
		}
	}
	return m, nil
}

// joinedNode is the Node a kubelet registers for req: its labels and taints,
// Ready as given, annotated by bootstrap with report ("" for none).
func joinedNode(req providers.CreateRequest, m providers.Instance, ready corev1.ConditionStatus, report string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: req.Name, Labels: req.NodeLabels},
		Spec:       corev1.NodeSpec{ProviderID: m.ProviderID, Taints: providers.CoreTaints(req.NodeTaints)},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady"}}},
	}
	if report != "" {
		n.Annotations = map[string]string{bootstrap.NodeAnnotation: report}
	}
	return n
}

const (
	prebakedReport = "prebaked=true total=2100ms manifest=3ms/ok plan=20ms/ok install=0ms/skipped configure=40ms/ok kubelet=5ms/ok join=2000ms/ok"
	installReport  = "prebaked=true total=90000ms manifest=3ms/ok plan=20ms/ok install=88000ms/ok configure=40ms/ok kubelet=5ms/ok join=2000ms/ok"
	vanillaReport  = "prebaked=false total=90000ms manifest=1ms/ok plan=20ms/ok install=88000ms/ok configure=40ms/ok kubelet=5ms/ok join=2000ms/ok"
)

var canaryImage = imagecatalog.Image{ID: "img-7", Name: "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504", Provider: "fake"}

func TestJoinCanary(t *testing.T) {
	t.Parallel()
	ready := func(report string) func(providers.CreateRequest, providers.Instance) *corev1.Node {
		return func(req providers.CreateRequest, m providers.Instance) *corev1.Node {
			return joinedNode(req, m, corev1.ConditionTrue, report)
		}
	}
	for _, tc := range []struct {
		name    string
		node    func(providers.CreateRequest, providers.Instance) *corev1.Node
		setup   func(*fake.Provider)
		timeout time.Duration
		cancel  bool     // the ctx is cancelled as the machine boots
		wantErr []string // nil means the canary passes
		created bool     // a machine was created (so a token was made)
	}{
		{name: "passes", node: ready(prebakedReport), created: true},
		{
			name: "create error", setup: func(p *fake.Provider) { p.InjectCreateErrors(errors.New("boom: image not found")) },
			wantErr: []string{"create failed (create_failed)", "boom: image not found"},
		},
		{
			name: "no capacity", setup: func(p *fake.Provider) { p.SetCapacity(0) },
			wantErr: []string{"no capacity (resource_unavailable)", "no capacity left"},
		},
		{
			name: "timeout without a Node", timeout: 50 * time.Millisecond, created: true,
			wantErr: []string{"no Ready node after 50ms", "machine g1-00001 creating; no Node registered"},
		},
		{
			name: "timeout on a NotReady Node", timeout: 50 * time.Millisecond, created: true,
			node: func(req providers.CreateRequest, m providers.Instance) *corev1.Node {
				n := joinedNode(req, m, corev1.ConditionFalse, prebakedReport)
				n.Status.Conditions[0].Reason = "KubeletNotReady"
				return n
			},
			wantErr: []string{"no Ready node after 50ms", "Node g1-00001 registered, Ready=False (KubeletNotReady)", `prebake.dev/image="img-7"`},
		},
		{
			name: "timeout waiting for the bootstrap report", timeout: 50 * time.Millisecond, created: true, node: ready(""),
			wantErr: []string{"no Ready node after 50ms", "Ready=True", "no prebake.dev/bootstrap annotation"},
		},
		{
			name: "prebaked image ran a runtime install", node: ready(installReport), created: true,
			wantErr: []string{"bootstrap ran a runtime install on a prebaked image", "install=88000ms/ok"},
		},
		{
			name: "image without a manifest", node: ready(vanillaReport), created: true,
			wantErr: []string{"installed at runtime: the image is not prebaked"},
		},
		{
			name: "Node of another image", created: true,
			node: func(req providers.CreateRequest, m providers.Instance) *corev1.Node {
				n := joinedNode(req, m, corev1.ConditionTrue, prebakedReport)
				n.Labels = map[string]string{providers.LabelCluster: "test", providers.LabelGroup: "g1", providers.LabelImage: "img-6"}
				return n
			},
			wantErr: []string{`carries prebake.dev/image="img-6", not the image under test`},
		},
		{
			name: "Node without the canary taint", created: true,
			node: func(req providers.CreateRequest, m providers.Instance) *corev1.Node {
				n := joinedNode(req, m, corev1.ConditionTrue, prebakedReport)
				n.Spec.Taints = nil
				return n
			},
			wantErr: []string{"lacks the taint prebake.dev/canary=g1:NoSchedule"},
		},
		{
			// Cancelled while the cloud creates the machine: Check returns,
			// and the cleanup waits for the create to delete what it made.
			name: "cancelled", node: ready(""), cancel: true, created: true,
			wantErr: []string{"cancelled while the machine was being created: context canceled"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client := kubefake.NewClientset()
			p := &kubeletProvider{Provider: fake.New(), client: client, node: tc.node}
			p.BootsImages = true
			if tc.setup != nil {
				tc.setup(p.Provider)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				node := p.node
				p.node = func(req providers.CreateRequest, m providers.Instance) *corev1.Node {
					cancel()
					return node(req, m)
				}
			}
			c := newCore(t, p, bootstrapSource(client),
				autoscaling.GroupSpec{ID: "g1", Provider: "fake", MaxSize: 3, MachineType: "m1", Zone: "z1",
					Taints: []providers.Taint{{Key: "dedicated", Value: "batch", Effect: "NoSchedule"}}})
			var progress syncBuffer
			timeout := tc.timeout
			if timeout == 0 {
				timeout = time.Minute // reached only when the test fails
			}
			canary, err := New(c, client, "g1", Options{Timeout: timeout, Poll: 5 * time.Millisecond, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			err = canary.Check(ctx, canaryImage)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Check = %v, want a pass\nprogress:\n%s", err, progress.String())
			case tc.wantErr != nil && err == nil:
				t.Fatalf("Check passed, want an error with %q\nprogress:\n%s", tc.wantErr, progress.String())
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Check error lacks %q:\n%v", want, err)
				}
			}

			// What was asked for: the group's machine, from the image, with
			// the canary taint, through bootstrap's user-data.
			reqs := p.CreateRequests()
			if len(reqs) != 1 {
				t.Fatalf("%d Create calls, want 1", len(reqs))
			}
			r := reqs[0]
			wantTaints := []providers.Taint{{Key: "dedicated", Value: "batch", Effect: "NoSchedule"}, {Key: providers.TaintCanary, Value: "g1", Effect: "NoSchedule"}}
			if d := cmp.Diff(wantTaints, r.NodeTaints); d != "" {
				t.Errorf("canary taints (-want +got):\n%s", d)
			}
			if r.Image != "img-7" || r.ImageKind != providers.ImagePrebaked || r.Group != "g1" || r.NodeLabels[providers.LabelImage] != "img-7" {
				t.Errorf("request image %q kind %q group %q labels %v", r.Image, r.ImageKind, r.Group, r.NodeLabels)
			}
			if !strings.Contains(string(r.UserData), providers.TaintCanary) || !strings.HasPrefix(string(r.UserData), "#cloud-config") {
				t.Errorf("the machine's user-data is not bootstrap's with the canary taint:\n%.300s", r.UserData)
			}

			// Cleanup, always: no machine, no Node, no join token.
			if m := p.Machines(); len(m) != 0 {
				t.Errorf("machines left: %v", m)
			}
			if tc.created && p.Calls("Delete") == 0 {
				t.Error("the machine was never deleted")
			}
			nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			if err != nil || len(nodes.Items) != 0 {
				t.Errorf("Nodes left: %d (%v)", len(nodes.Items), err)
			}
			p.mu.Lock()
			booted := p.tokens
			p.mu.Unlock()
			if tc.created && tc.node != nil && booted != 1 {
				t.Errorf("%d join tokens when the machine booted, want 1", booted)
			}
			if n := joinTokens(t, client); n != 0 {
				t.Errorf("%d join tokens left, want 0 (revoked)", n)
			}
			if n, _ := c.TargetSize("g1"); n != 0 {
				t.Errorf("target size after the canary = %d, want 0", n)
			}
			if !strings.Contains(progress.String(), "canary g1: booting machine g1-00001 from image img-7") {
				t.Errorf("progress lacks the boot line:\n%s", progress.String())
			}
			if tc.created && !strings.Contains(progress.String(), "cleaned up: machine g1-00001 and its Node deleted, 1 join token(s) revoked") {
				t.Errorf("progress lacks the cleanup line:\n%s", progress.String())
			}
		})
	}
}

// A group at maxSize gets no canary: it would count toward the group.
func TestJoinCanaryRefusesGroupAtMaxSize(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	p.BootsImages = true
	c := newCore(t, p, nil, autoscaling.GroupSpec{ID: "g1", Provider: "fake", MaxSize: 1, MachineType: "m1"})
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	canary, err := New(c, client, "g1", Options{Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = canary.Check(t.Context(), canaryImage)
	if err == nil || !strings.Contains(err.Error(), `node group "g1" is at maxSize 1 (1 machines)`) || !errors.Is(err, autoscaling.ErrFailedPrecondition) {
		t.Fatalf("Check on a full group = %v, want the maxSize named", err)
	}
	for _, r := range p.CreateRequests() {
		if r.Image == canaryImage.ID {
			t.Errorf("the canary created %s on a full group", r.Name)
		}
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New() // boots no images
	c := newCore(t, p, nil)
	for _, tc := range []struct {
		name  string
		group string
		nodes *kubefake.Clientset
		want  string
	}{
		{"unknown group", "nope", client, `unknown node group "nope"`},
		{"no cluster", "g1", nil, "no cluster to watch its Node in"},
		{"no image API", "g1", client, `provider "fake" can't boot custom images`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tc.nodes == nil {
				_, err = New(c, nil, tc.group, Options{})
			} else {
				_, err = New(c, tc.nodes, tc.group, Options{})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want %q", err, tc.want)
			}
		})
	}
	p2 := fake.New()
	p2.BootsImages = true
	canary, err := New(newCore(t, p2, nil), client, "g1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := canaryImage
	other.Provider = "hcloud"
	if err := canary.Check(t.Context(), other); err == nil || !strings.Contains(err.Error(), `the image is for provider "hcloud"`) {
		t.Errorf("Check of another provider's image = %v", err)
	}
	arm := canaryImage
	arm.Name = "prebake-ubuntu-2404-k8s-1-34-2-arm64-20261130t1504"
	if err := canary.Check(t.Context(), arm); err == nil || !strings.Contains(err.Error(), "the image's arch is arm64 but the group boots amd64") {
		t.Errorf("Check of an arm64 image on an amd64 group = %v", err)
	}
	if n := p2.Calls("Create"); n != 0 {
		t.Errorf("%d creates for an image of another provider", n)
	}
}

// newCore starts a core over p with groups (default: g1 of m1 in z1),
// rendering user-data with source when set; it is shut down when the test
// ends.
func newCore(t *testing.T, p providers.Provider, source autoscaling.UserDataSource, groups ...autoscaling.GroupSpec) *autoscaling.Core {
	t.Helper()
	if len(groups) == 0 {
		groups = []autoscaling.GroupSpec{{ID: "g1", Provider: "fake", MaxSize: 10, MachineType: "m1", Zone: "z1"}}
	}
	var n atomic.Int64
	o := autoscaling.Options{
		Cluster: "test", Groups: groups, Providers: map[string]providers.Provider{p.Name(): p},
		RefreshInterval: time.Hour,
		Workers:         autoscaling.WorkerOptions{Parallelism: 4, QPS: 1000, Retries: 2, RetryBase: time.Millisecond},
		NameRand:        func() string { return fmt.Sprintf("%05d", n.Add(1)) },
	}
	if source != nil {
		o.UserData = source
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

// tokenSource is a user-data source as prebake serve's bootstrap one: a
// fresh join token per machine, revoked by machine name.
type tokenSource struct{ tokens bootstrap.Tokens }

func bootstrapSource(client *kubefake.Clientset) *tokenSource {
	return &tokenSource{tokens: bootstrap.Tokens{Client: client}}
}

func (s *tokenSource) UserData(ctx context.Context, m autoscaling.Machine) ([]byte, error) {
	tok, err := s.tokens.CreateForNode(ctx, m.Request.Name)
	if err != nil {
		return nil, err
	}
	in := bootstrap.Input{
		Provider: m.Provider, JoinToken: tok.Value(), NodeName: m.Request.Name, ProviderID: m.ProviderID,
		Cluster:    bootstrap.Cluster{APIServerEndpoint: "10.0.0.1:6443", CACertHashes: []string{"sha256:" + strings.Repeat("ab", 32)}},
		Components: []bootstrap.Component{{Name: "containerd", Version: "1.6.20~ds1-1+b1"}},
	}
	for _, t := range m.Request.NodeTaints {
		in.Taints = append(in.Taints, bootstrap.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	ud, err := bootstrap.Render(in)
	if err != nil {
		return nil, err
	}
	return ud.CloudConfig, nil
}

func (s *tokenSource) RevokeJoinTokens(ctx context.Context, machine string) (int, error) {
	return s.tokens.DeleteForNode(ctx, machine)
}

func joinTokens(t *testing.T, client *kubefake.Clientset) int {
	t.Helper()
	l, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

type syncBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
