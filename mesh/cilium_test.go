package mesh

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestRenderObjects(t *testing.T) {
	t.Parallel()
	peers := []Cluster{
		{Name: "b", ClusterMeshAPIServer: "mesh-b.example.com:2379"},
		{Name: "a", ClusterMeshAPIServer: "172.18.0.2:32379"},
	}
	remoteA := `endpoints:
- https://a.mesh.cilium.io:32379
trusted-ca-file: /var/lib/cilium/clustermesh/common-etcd-client-ca.crt
key-file: /var/lib/cilium/clustermesh/common-etcd-client.key
cert-file: /var/lib/cilium/clustermesh/common-etcd-client.crt
cilium-host-aliases:
- hostname: a.mesh.cilium.io
  ips:
    - 172.18.0.2
`
	remoteB := `endpoints:
- https://mesh-b.example.com:2379
trusted-ca-file: /var/lib/cilium/clustermesh/common-etcd-client-ca.crt
key-file: /var/lib/cilium/clustermesh/common-etcd-client.key
cert-file: /var/lib/cilium/clustermesh/common-etcd-client.crt
`
	local := `endpoints:
- https://clustermesh-apiserver.cilium.svc:2379
trusted-ca-file: /var/lib/cilium/clustermesh/local-etcd-client-ca.crt
key-file: /var/lib/cilium/clustermesh/local-etcd-client.key
cert-file: /var/lib/cilium/clustermesh/local-etcd-client.crt
`
	users := "users:\n- name: remote-a\n  role: remote\n- name: remote-b\n  role: remote\n"
	for _, tc := range []struct {
		name string
		opts renderOptions
		want MeshObjects
	}{
		{"kvstoremesh", renderOptions{namespace: "cilium", domain: DefaultMeshDomain, kvstoremesh: true}, MeshObjects{
			ClusterMesh: map[string]string{"a": local, "b": local},
			KVStoreMesh: map[string]string{"a": remoteA, "b": remoteB},
			RemoteUsers: users,
		}},
		{"direct", renderOptions{namespace: "cilium", domain: DefaultMeshDomain}, MeshObjects{
			ClusterMesh: map[string]string{"a": remoteA, "b": remoteB},
			RemoteUsers: users,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := renderObjects(tc.opts, peers)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("renderObjects (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"a", "b"}, parseRemoteUsers(got.RemoteUsers)); diff != "" {
				t.Errorf("parseRemoteUsers (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := renderObjects(renderOptions{domain: DefaultMeshDomain}, []Cluster{{Name: "x"}}); err == nil || !strings.Contains(err.Error(), "clustermeshAPIServer is not set") {
		t.Errorf("peer without endpoint: err = %v, want one naming clustermeshAPIServer", err)
	}
}

// testCA returns a PEM CA certificate with its own key, so two calls give different CAs.
func testCA(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

type fakeMesh struct {
	clusters []Cluster
	clients  map[string]*fake.Clientset
}

// newFakeMesh returns n clusters c1..cn, each with a client-go fake clientset holding
// the given CA in kube-system/cilium-ca.
func newFakeMesh(t *testing.T, n int, ca []byte) *fakeMesh {
	t.Helper()
	f := &fakeMesh{clients: map[string]*fake.Clientset{}}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("c%d", i)
		f.clusters = append(f.clusters, Cluster{Name: name, ID: i, ClusterMeshAPIServer: fmt.Sprintf("10.0.0.%d:32379", i)})
		f.clients[name] = fake.NewClientset(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: SecretCA, Namespace: DefaultCiliumNamespace},
			Data:       map[string][]byte{"ca.crt": ca},
		})
	}
	return f
}

func (f *fakeMesh) backend(t *testing.T, opts CiliumOptions) *Cilium {
	t.Helper()
	clients := map[string]kubernetes.Interface{}
	for n, c := range f.clients {
		clients[n] = c
	}
	b, err := NewCilium(f.clusters, clients, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writes counts the create/update/patch actions the fakes saw, by cluster.
func (f *fakeMesh) writes() map[string]int {
	out := map[string]int{}
	for n, c := range f.clients {
		for _, a := range c.Actions() {
			switch a.GetVerb() {
			case "create", "update", "patch", "delete":
				out[n]++
			}
		}
	}
	return out
}

func (f *fakeMesh) clearActions() {
	for _, c := range f.clients {
		c.ClearActions()
	}
}

func TestCiliumBackendApplyAddRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakeMesh(t, 4, testCA(t, "shared"))
	b := f.backend(t, CiliumOptions{KVStoreMesh: true})
	e := &Executor{Parallel: 2, Attempts: 1}

	// Full mesh of c1..c3.
	members := []string{"c1", "c2", "c3"}
	res, err := e.Declarative(ctx, b, members, FullMesh(members...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 3 || res.Rounds != 1 {
		t.Errorf("full mesh of 3: %d ops in %d rounds, want 3 in 1", res.Ops, res.Rounds)
	}
	peers, err := b.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"c1": {"c2", "c3"}, "c2": {"c1", "c3"}, "c3": {"c1", "c2"}, "c4": nil}
	if diff := cmp.Diff(want, peers); diff != "" {
		t.Errorf("peers after apply (-want +got):\n%s", diff)
	}
	// What is stored is exactly the rendering.
	s, err := f.clients["c1"].CoreV1().Secrets(DefaultCiliumNamespace).Get(ctx, SecretKVStoreMesh, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := b.Objects("c1", []string{"c2", "c3"})
	if diff := cmp.Diff(toBytes(m.KVStoreMesh), s.Data); diff != "" {
		t.Errorf("c1 %s (-want +got):\n%s", SecretKVStoreMesh, diff)
	}

	// Same state again: nothing to write.
	f.clearActions()
	res, err = e.Declarative(ctx, b, members, FullMesh(members...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 0 || len(f.writes()) != 0 {
		t.Errorf("re-apply: %d ops, writes %v; want none", res.Ops, f.writes())
	}

	// Remove c2: only c1 and c3 are written, c2 keeps its objects.
	f.clearActions()
	members = []string{"c1", "c3"}
	if _, err := e.Declarative(ctx, b, members, FullMesh(members...)); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); w["c2"] != 0 || w["c1"] == 0 || w["c3"] == 0 {
		t.Errorf("remove c2: writes by cluster %v, want c1 and c3 only", w)
	}
	peers, err = b.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string][]string{"c1": {"c3"}, "c2": {"c1", "c3"}, "c3": {"c1"}, "c4": nil}
	if diff := cmp.Diff(want, peers); diff != "" {
		t.Errorf("peers after removing c2 (-want +got):\n%s", diff)
	}
}

func TestCiliumBackendRewritesStaleEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakeMesh(t, 3, testCA(t, "shared"))
	b := f.backend(t, CiliumOptions{KVStoreMesh: false})
	e := &Executor{Attempts: 1}
	members := []string{"c1", "c2", "c3"}
	if _, err := e.Declarative(ctx, b, members, FullMesh(members...)); err != nil {
		t.Fatal(err)
	}
	// c2 moves its clustermesh-apiserver: c1 and c3 hold a stale entry for it.
	f.clusters[1].ClusterMeshAPIServer = "10.9.9.9:32379"
	b = f.backend(t, CiliumOptions{KVStoreMesh: false})
	got := Status(members, FullMesh(members...), must(b.Peers(ctx)))
	wantStatus := []ClusterStatus{
		{Cluster: "c1", Configured: []string{"c3"}, Missing: []string{"c2"}},
		{Cluster: "c2", Configured: []string{"c1", "c3"}},
		{Cluster: "c3", Configured: []string{"c1"}, Missing: []string{"c2"}},
	}
	if diff := cmp.Diff(wantStatus, got); diff != "" {
		t.Errorf("status with a moved peer (-want +got):\n%s", diff)
	}
	f.clearActions()
	res, err := e.Declarative(ctx, b, members, FullMesh(members...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 2 || f.writes()["c2"] != 0 {
		t.Errorf("rewrite: %d ops, writes %v; want c1 and c3", res.Ops, f.writes())
	}
	s, err := f.clients["c1"].CoreV1().Secrets(DefaultCiliumNamespace).Get(ctx, SecretClusterMesh, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(s.Data["c2"]), "10.9.9.9") {
		t.Errorf("c1's entry for c2 = %q, want the new address", s.Data["c2"])
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestCiliumBackendRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	members := []string{"c1", "c2", "c3"}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, f *fakeMesh)
		opts    CiliumOptions
		want    []string // substrings of the error
		notWant []string
	}{
		{
			name: "CA not shared",
			setup: func(t *testing.T, f *fakeMesh) {
				other := testCA(t, "other")
				if _, err := f.clients["c3"].CoreV1().Secrets(DefaultCiliumNamespace).Update(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: SecretCA, Namespace: DefaultCiliumNamespace},
					Data:       map[string][]byte{"ca.crt": other},
				}, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"do not share a Cluster Mesh CA", `c1, c2 use CA "CN=shared"`, `c3 use CA "CN=other"`, "copy one cilium-ca Secret"},
		},
		{
			name: "no CA",
			setup: func(t *testing.T, f *fakeMesh) {
				if err := f.clients["c2"].CoreV1().Secrets(DefaultCiliumNamespace).Delete(ctx, SecretCA, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{`cluster "c2": no Cluster Mesh CA`, "cilium-ca ca.crt", "clustermesh-apiserver-remote-cert ca.crt"},
		},
		{
			name: "over the size limit",
			opts: CiliumOptions{MaxObjectBytes: 400},
			want: []string{`cluster "c1": Secret cilium-clustermesh would hold`, "for 2 peers, over the API server's 400-byte limit; about 1 peers fit"},
		},
		{
			name: "installed without maxConnectedClusters 511, or with another id",
			setup: func(t *testing.T, f *fakeMesh) {
				for c, data := range map[string]map[string]string{
					"c2": {"cluster-name": "c2", "cluster-id": "2", "max-connected-clusters": "511"},
					"c3": {"cluster-name": "c3", "cluster-id": "9"},
					"c1": {"cluster-name": "c1", "cluster-id": "1", "max-connected-clusters": "255"}, // matches
				} {
					if _, err := f.clients[c].CoreV1().ConfigMaps(DefaultCiliumNamespace).Create(ctx, &corev1.ConfigMap{
						ObjectMeta: metav1.ObjectMeta{Name: ConfigMapCiliumConfig, Namespace: DefaultCiliumNamespace}, Data: data,
					}, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: []string{
				`cluster "c2": maxConnectedClusters 255 in the clusters file, but Cilium in it was installed with max-connected-clusters=511`,
				`cluster "c3": id 3, but Cilium in it was installed with cluster-id 9`,
			},
			notWant: []string{`cluster "c1"`},
		},
		{
			name: "rendered by Helm",
			setup: func(t *testing.T, f *fakeMesh) {
				if _, err := f.clients["c1"].CoreV1().Secrets(DefaultCiliumNamespace).Create(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: SecretClusterMesh, Namespace: DefaultCiliumNamespace,
						Annotations: map[string]string{helmReleaseAnnotation: "cilium"}},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{`cluster "c1": Secret kube-system/cilium-clustermesh belongs to Helm release "cilium"`, "clustermesh.config.enabled=false"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeMesh(t, 3, testCA(t, "shared"))
			if tc.setup != nil {
				tc.setup(t, f)
			}
			b := f.backend(t, tc.opts)
			f.clearActions()
			res, err := (&Executor{Attempts: 1}).Declarative(ctx, b, members, FullMesh(members...))
			if err == nil {
				t.Fatal("Declarative succeeded, want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error names %q, which matches its install:\n%v", w, err)
				}
			}
			if w := f.writes(); len(w) != 0 || res.Succeeded != 0 {
				t.Errorf("refused run wrote %v (%d succeeded), want nothing", w, res.Succeeded)
			}
		})
	}
}

func TestCiliumBackendResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFakeMesh(t, 4, testCA(t, "shared"))
	// c3's API server refuses writes to cilium-clustermesh, after its other objects were
	// written: a half-written cluster.
	var failing atomic.Bool
	failing.Store(true)
	f.clients["c3"].PrependReactor("patch", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() && a.(k8stesting.PatchAction).GetName() == SecretClusterMesh {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	b := f.backend(t, CiliumOptions{KVStoreMesh: true})
	e := &Executor{Attempts: 2, Backoff: func(int) time.Duration { return 0 }}
	members := []string{"c1", "c2", "c3", "c4"}
	res, err := e.Declarative(ctx, b, members, FullMesh(members...))
	if err == nil || len(res.Failures) != 1 || res.Failures[0].Op != "join c3" || res.Succeeded != 3 {
		t.Fatalf("first run: %d succeeded, failures %+v, err %v; want c3 to fail and the rest to succeed", res.Succeeded, res.Failures, err)
	}
	if !strings.Contains(err.Error(), `cluster "c3": apply Secret kube-system/cilium-clustermesh: etcdserver: request timed out`) {
		t.Errorf("error does not name the cluster and object: %v", err)
	}
	// Half-written c3 lists no peer as configured, so the re-run writes c3 and only c3.
	failing.Store(false)
	f.clearActions()
	res, err = e.Declarative(ctx, b, members, FullMesh(members...))
	if err != nil || res.Ops != 1 {
		t.Fatalf("re-run: %d ops, err %v; want 1 (c3)", res.Ops, err)
	}
	if w := f.writes(); len(w) != 1 || w["c3"] == 0 {
		t.Errorf("re-run wrote %v, want c3 only", w)
	}
	got := Status(members, FullMesh(members...), must(b.Peers(ctx)))
	for _, s := range got {
		if !s.OK() {
			t.Errorf("after the re-run %s: missing %v, extra %v", s.Cluster, s.Missing, s.Extra)
		}
	}
}
