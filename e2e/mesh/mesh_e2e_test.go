//go:build e2e

package meshe2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/prebake-dev/prebake/e2e/serveproc"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/mesh"
)

const clusterCount = 7 // 4, then +2, then −1; the 7th holds a foreign CA

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// env is the running clusters.
type env struct {
	kubeconfig string                          // one context per cluster, named after it
	clients    map[string]kubernetes.Interface // admin clients, for checks
	ns         string
}

// startClusters starts one etcd and n kube-apiservers on it, cluster ci under /ci, at most
// two starting at once (the machine has 2 cores), and writes a kubeconfig with a context
// per cluster.
func startClusters(t *testing.T, ctx context.Context, n int) *env {
	out := logWriter{t}
	bins, err := kubetest.Build(ctx, kubetest.BuildOptions{Out: out})
	kubetest.SkipIfUnavailable(t, err)
	root := t.TempDir()

	etcd, err := kubetest.NewEtcd(kubetest.EtcdOptions{Binaries: bins, Dir: filepath.Join(root, "etcd"), Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if err := etcd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Stop(context.Background()) })

	hs := make([]*kubetest.Hermetic, n)
	for i := range hs {
		hs[i], err = kubetest.NewHermetic(kubetest.HermeticOptions{
			Binaries: bins, Dir: filepath.Join(root, fmt.Sprintf("c%d", i+1)), Out: out,
			EtcdServers: etcd.URL(), EtcdPrefix: fmt.Sprintf("/c%d", i+1), APIServerOnly: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		h := hs[i]
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("logs of %s:\n%s", h.Kubeconfig(), h.LogTails(20))
			}
			_ = h.Stop(context.Background())
		})
	}
	began := time.Now()
	sem := make(chan struct{}, 2)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = h.Start(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start c%d: %v", i+1, err)
		}
	}
	t.Logf("TIMING %d kube-apiservers on one etcd started in %.1fs", n, time.Since(began).Seconds())

	e := &env{kubeconfig: filepath.Join(root, "mesh.kubeconfig"), clients: map[string]kubernetes.Interface{}, ns: mesh.DefaultCiliumNamespace}
	merged := clientcmdapi.NewConfig()
	for i, h := range hs {
		name := fmt.Sprintf("c%d", i+1)
		cfg, err := clientcmd.LoadFromFile(h.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		cur := cfg.Contexts[cfg.CurrentContext]
		merged.Clusters[name] = cfg.Clusters[cur.Cluster]
		merged.AuthInfos[name] = cfg.AuthInfos[cur.AuthInfo]
		merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		rc, err := h.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		if e.clients[name], err = kubernetes.NewForConfig(rc); err != nil {
			t.Fatal(err)
		}
	}
	if err := clientcmd.WriteToFile(*merged, e.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return e
}

func buildPrebake(t *testing.T, ctx context.Context) string {
	t.Helper()
	mod, err := serveproc.ModuleDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := serveproc.Build(ctx, mod, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func newCA(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// object names the mesh objects of one cluster.
var objects = []struct{ kind, name string }{
	{"Secret", mesh.SecretClusterMesh}, {"Secret", mesh.SecretKVStoreMesh}, {"ConfigMap", mesh.ConfigMapRemoteUsers},
}

// versions returns the resourceVersion of every mesh object of every cluster ("" when
// absent), keyed "cluster/Kind/name".
func (e *env) versions(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	out := map[string]string{}
	for c, cs := range e.clients {
		for _, o := range objects {
			var (
				meta metav1.Object
				err  error
			)
			if o.kind == "Secret" {
				meta, err = cs.CoreV1().Secrets(e.ns).Get(ctx, o.name, metav1.GetOptions{})
			} else {
				meta, err = cs.CoreV1().ConfigMaps(e.ns).Get(ctx, o.name, metav1.GetOptions{})
			}
			key := c + "/" + o.kind + "/" + o.name
			switch {
			case apierrors.IsNotFound(err):
				out[key] = ""
			case err != nil:
				t.Fatalf("%s: %v", key, err)
			default:
				out[key] = meta.GetResourceVersion()
			}
		}
	}
	return out
}

// changed returns the clusters any of whose objects changed between two versions maps.
func changed(before, after map[string]string) []string {
	set := map[string]bool{}
	for k, v := range after {
		if before[k] != v {
			set[strings.SplitN(k, "/", 2)[0]] = true
		}
	}
	var out []string
	for c := range set {
		out = append(out, c)
	}
	slices.SortFunc(out, mesh.Compare)
	return out
}

// checkExactPeers reads every member's objects straight from its API server and checks
// that each lists exactly its peers, with exactly the content the backend renders.
func (e *env) checkExactPeers(t *testing.T, ctx context.Context, b *mesh.Cilium, members []string) {
	t.Helper()
	for _, c := range members {
		peers := slices.DeleteFunc(slices.Clone(members), func(p string) bool { return p == c })
		want, err := b.Objects(c, peers)
		if err != nil {
			t.Fatal(err)
		}
		cs := e.clients[c]
		for _, s := range []struct {
			name string
			want map[string]string
		}{{mesh.SecretClusterMesh, want.ClusterMesh}, {mesh.SecretKVStoreMesh, want.KVStoreMesh}} {
			got, err := cs.CoreV1().Secrets(e.ns).Get(ctx, s.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: Secret %s: %v", c, s.name, err)
			}
			gotData := map[string]string{}
			for k, v := range got.Data {
				gotData[k] = string(v)
			}
			if len(s.want) == 0 {
				s.want = map[string]string{}
			}
			if diff := cmp.Diff(s.want, gotData); diff != "" {
				t.Errorf("%s: Secret %s (-want +got):\n%s", c, s.name, diff)
			}
		}
		cm, err := cs.CoreV1().ConfigMaps(e.ns).Get(ctx, mesh.ConfigMapRemoteUsers, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: ConfigMap: %v", c, err)
		}
		if diff := cmp.Diff(want.RemoteUsers, cm.Data[mesh.RemoteUsersKey]); diff != "" {
			t.Errorf("%s: %s (-want +got):\n%s", c, mesh.ConfigMapRemoteUsers, diff)
		}
	}
	statuses := mesh.Status(members, mesh.FullMesh(members...), must(t)(b.Peers(ctx)))
	for _, s := range statuses {
		if !s.OK() {
			t.Errorf("status of %s: missing %v, extra %v", s.Cluster, s.Missing, s.Extra)
		}
	}
}

func must(t *testing.T) func(map[string][]string, error) map[string][]string {
	return func(m map[string][]string, err error) map[string][]string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// clustersFile writes a clusters file of the clusters c<id> and returns its path. Ids are
// explicit, as they are fixed at install time.
func clustersFile(t *testing.T, ids ...int) string {
	t.Helper()
	var file strings.Builder
	file.WriteString("apiVersion: prebake.dev/v1alpha1\nkind: ClusterMesh\nclusters:\n")
	for _, i := range ids {
		fmt.Fprintf(&file, "  - name: c%d\n    id: %d\n    context: c%d\n    clustermeshAPIServer: 127.0.0.%d:32379\n    podCIDRs: [10.%d.0.0/16]\n", i, i, i, i, i)
	}
	path := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMeshCiliumBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	e := startClusters(t, ctx, clusterCount)

	// Cluster Mesh was enabled with one shared cilium-ca everywhere, except c7.
	shared, foreign := newCA(t, "mesh-ca"), newCA(t, "other-ca")
	for c, cs := range e.clients {
		ca := shared
		if c == "c7" {
			ca = foreign
		}
		if _, err := cs.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: mesh.SecretCA, Namespace: e.ns},
			Data:       map[string][]byte{"ca.crt": ca, "ca.key": []byte("not used here")},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The clusters file, loaded and validated as `prebake mesh apply --clusters` does.
	all := make([]int, clusterCount)
	for i := range all {
		all[i] = i + 1
	}
	clusters, err := mesh.LoadFile(clustersFile(t, all...))
	if err != nil {
		t.Fatal(err)
	}
	clients, err := mesh.KubeClients(clusters, e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := mesh.NewCilium(clusters, clients, mesh.CiliumOptions{KVStoreMesh: true})
	if err != nil {
		t.Fatal(err)
	}
	ex := &mesh.Executor{Parallel: 4, Attempts: 3, Backoff: func(int) time.Duration { return 100 * time.Millisecond }}

	type row struct {
		step           string
		writes, rounds int
		changed        []string
		took           time.Duration
	}
	var table []row
	step := func(name string, members []string) (mesh.Result, []string, error) {
		t.Helper()
		before := e.versions(t, ctx)
		began := time.Now()
		res, err := ex.Declarative(ctx, b, members, mesh.FullMesh(members...))
		took := time.Since(began)
		ch := changed(before, e.versions(t, ctx))
		table = append(table, row{name, res.Ops, res.Rounds, ch, took})
		return res, ch, err
	}
	names := func(ids ...int) []string {
		var out []string
		for _, i := range ids {
			out = append(out, fmt.Sprintf("c%d", i))
		}
		return out
	}

	// 1. A mesh of 4: one write per cluster, one round.
	members := names(1, 2, 3, 4)
	res, ch, err := step("mesh of 4", members)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 4 || res.Rounds != 1 || !slices.Equal(ch, members) {
		t.Errorf("mesh of 4: %d writes in %d rounds, changed %v; want 4 in 1, changed %v", res.Ops, res.Rounds, ch, members)
	}
	e.checkExactPeers(t, ctx, b, members)

	// 2. Add c5 and c6: every member is written once (the old ones get two more peers).
	members = names(1, 2, 3, 4, 5, 6)
	res, ch, err = step("add 2", members)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 6 || res.Rounds != 1 || !slices.Equal(ch, members) {
		t.Errorf("add 2: %d writes in %d rounds, changed %v; want 6 in 1, changed %v", res.Ops, res.Rounds, ch, members)
	}
	e.checkExactPeers(t, ctx, b, members)

	// 3. The same desired state again changes no object: the executor sees nothing to do,
	// and even forced server-side applies of the same content leave every resourceVersion.
	res, ch, err = step("re-apply", members)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 0 || len(ch) != 0 {
		t.Errorf("re-apply: %d writes, changed %v; want none", res.Ops, ch)
	}
	before := e.versions(t, ctx)
	began := time.Now()
	for _, c := range members {
		if err := b.SetPeers(ctx, c, members); err != nil {
			t.Fatal(err)
		}
	}
	forced := row{step: "forced re-apply (SetPeers ×6)", writes: len(members), took: time.Since(began)}
	if forced.changed = changed(before, e.versions(t, ctx)); len(forced.changed) != 0 {
		t.Errorf("forced re-apply of the same objects changed %v; want nothing", forced.changed)
	}
	table = append(table, forced)

	// 4. Remove c3: only the remaining clusters are written; c3 keeps its objects as they
	// were (it is to be torn down or have Cluster Mesh disabled; docs/mesh.md).
	c3Before, err := b.Objects("c3", names(1, 2, 4, 5, 6))
	if err != nil {
		t.Fatal(err)
	}
	members = names(1, 2, 4, 5, 6)
	res, ch, err = step("remove c3", members)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 5 || !slices.Equal(ch, members) {
		t.Errorf("remove c3: %d writes, changed %v; want 5, changed %v", res.Ops, ch, members)
	}
	e.checkExactPeers(t, ctx, b, members)
	s, err := e.clients["c3"].CoreV1().Secrets(e.ns).Get(ctx, mesh.SecretClusterMesh, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(s.Data); got != len(c3Before.ClusterMesh) {
		t.Errorf("removed c3 holds %d peers, want its %d old ones left alone", got, len(c3Before.ClusterMesh))
	}

	// 5. Adding c7, whose CA differs, is refused before anything is written.
	withC7 := append(slices.Clone(members), "c7")
	res, ch, err = step("add c7 (foreign CA)", withC7)
	if err == nil {
		t.Fatal("adding c7 with a foreign CA succeeded; want a refusal")
	}
	for _, want := range []string{"do not share a Cluster Mesh CA", `c7 use CA "CN=other-ca"`, `c1, c2, c4, c5, c6 use CA "CN=mesh-ca"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	if res.Succeeded != 0 || len(ch) != 0 {
		t.Errorf("refused step wrote: %d succeeded, changed %v", res.Succeeded, ch)
	}

	// The CLI reads the same state: `prebake mesh status` of the remaining five lists
	// exactly their peers, and `prebake mesh apply --dry-run` adding c7 is refused.
	bin := buildPrebake(t, ctx)
	remaining := clustersFile(t, 1, 2, 4, 5, 6)
	out, err := exec.CommandContext(ctx, bin, "mesh", "status", "--clusters", remaining, "--kubeconfig", e.kubeconfig, "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("prebake mesh status: %v\n%s", err, out)
	}
	var statuses []mesh.ClusterStatus
	if err := json.Unmarshal(out, &statuses); err != nil {
		t.Fatalf("prebake mesh status -o json: %v\n%s", err, out)
	}
	var wantStatuses []mesh.ClusterStatus
	for _, c := range members {
		wantStatuses = append(wantStatuses, mesh.ClusterStatus{Cluster: c, Configured: slices.DeleteFunc(slices.Clone(members), func(p string) bool { return p == c })})
	}
	if diff := cmp.Diff(wantStatuses, statuses); diff != "" {
		t.Errorf("prebake mesh status -o json (-want +got):\n%s", diff)
	}
	out, err = exec.CommandContext(ctx, bin, "mesh", "apply", "--backend", "cilium", "--dry-run",
		"--clusters", clustersFile(t, 1, 2, 4, 5, 6, 7), "--kubeconfig", e.kubeconfig).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to write: the clusters do not share a Cluster Mesh CA") {
		t.Errorf("prebake mesh apply --dry-run adding c7: %v, want a refusal:\n%s", err, out)
	}

	var sum strings.Builder
	fmt.Fprintf(&sum, "%-32s %7s %7s %9s  %s\n", "STEP", "WRITES", "ROUNDS", "TOOK", "CLUSTERS CHANGED")
	for _, r := range table {
		fmt.Fprintf(&sum, "%-32s %7d %7d %9s  %s\n", r.step, r.writes, r.rounds, r.took.Round(time.Millisecond), strings.Join(r.changed, ","))
	}
	t.Logf("mesh e2e on %d kube-apiservers sharing one etcd:\n%s", clusterCount, sum.String())
}
