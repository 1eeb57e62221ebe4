package mesh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
)

// FieldManager is the server-side apply field manager of every write of the cilium
// backend. It owns exactly the keys it wrote, so a later apply without a peer removes
// that peer's key and leaves keys of other managers alone.
const FieldManager = "prebake"

// helmReleaseAnnotation marks objects a Helm release renders.
const helmReleaseAnnotation = "meta.helm.sh/release-name"

// CiliumOptions configures the cilium backend.
type CiliumOptions struct {
	// Namespace is Cilium's namespace; empty means kube-system.
	Namespace string
	// Domain is clustermesh.config.domain; empty means mesh.cilium.io.
	Domain string
	// KVStoreMesh says clustermesh.apiserver.kvstoremesh.enabled is true (the chart
	// default): the agents then dial the local clustermesh-apiserver and
	// cilium-kvstoremesh holds the peers' endpoints.
	KVStoreMesh bool
	// MaxObjectBytes is the size limit of one object's data; 0 means MaxObjectBytes (1 MiB).
	MaxObjectBytes int
	// ReadParallel bounds the clusters read at once; 0 means 16.
	ReadParallel int
}

// Cilium is the declarative one-shot backend: with the chart installed with
// clustermesh.config.enabled=false, it server-side-applies the objects Cilium reads
// (cilium-clustermesh, cilium-kvstoremesh and clustermesh-remote-users) in each cluster,
// one SetPeers per cluster, through client-go. It observes the peers listed in those
// objects, so the executor plans from real state and a re-run resumes.
//
// It assumes a CA shared by all clusters (no per-peer certificates), and Preflight refuses
// when the clusters' CAs differ or an object would exceed the 1 MiB limit.
type Cilium struct {
	opts     CiliumOptions
	clusters map[string]Cluster
	clients  map[string]kubernetes.Interface
}

var _ DeclarativeBackend = (*Cilium)(nil)
var _ Preflighter = (*Cilium)(nil)

// NewCilium returns the backend for the given (validated) clusters; clients holds a client
// of each cluster's API server, by cluster name (see KubeClients).
func NewCilium(clusters []Cluster, clients map[string]kubernetes.Interface, opts CiliumOptions) (*Cilium, error) {
	if opts.Namespace == "" {
		opts.Namespace = DefaultCiliumNamespace
	}
	if opts.Domain == "" {
		opts.Domain = DefaultMeshDomain
	}
	if opts.MaxObjectBytes <= 0 {
		opts.MaxObjectBytes = MaxObjectBytes
	}
	if opts.ReadParallel <= 0 {
		opts.ReadParallel = 16
	}
	c := &Cilium{opts: opts, clusters: make(map[string]Cluster, len(clusters)), clients: clients}
	var errs []error
	for _, cl := range clusters {
		c.clusters[cl.Name] = cl
		if clients[cl.Name] == nil {
			errs = append(errs, fmt.Errorf("%s: no Kubernetes client", cl.label()))
		}
	}
	return c, errors.Join(errs...)
}

func (c *Cilium) render(peers []string) (MeshObjects, error) {
	ps := make([]Cluster, 0, len(peers))
	var errs []error
	for _, p := range peers {
		pc, ok := c.clusters[p]
		if !ok {
			errs = append(errs, fmt.Errorf("peer %q is not in the clusters file", p))
			continue
		}
		ps = append(ps, pc)
	}
	if err := errors.Join(errs...); err != nil {
		return MeshObjects{}, err
	}
	return renderObjects(renderOptions{namespace: c.opts.Namespace, domain: c.opts.Domain, kvstoremesh: c.opts.KVStoreMesh}, ps)
}

// Objects renders what SetPeers would write to cluster, for inspection and tests.
func (c *Cilium) Objects(cluster string, peers []string) (MeshObjects, error) {
	if _, ok := c.clusters[cluster]; !ok {
		return MeshObjects{}, fmt.Errorf("cluster %q is not in the clusters file", cluster)
	}
	return c.render(withoutSelf(cluster, peers))
}

func withoutSelf(cluster string, peers []string) []string {
	return slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == cluster })
}

// observed is what one cluster's objects hold.
type observed struct {
	clustermesh map[string][]byte // peer configs only
	kvstoremesh map[string][]byte
	users       []string
}

// forEach runs f for every name with at most ReadParallel at once and joins the errors.
func (c *Cilium) forEach(ctx context.Context, names []string, f func(ctx context.Context, name string) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs
		errs []error
	)
	sem := make(chan struct{}, c.opts.ReadParallel)
	for _, n := range names {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(ctx, n); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(errs, func(x, y error) int { return strings.Compare(x.Error(), y.Error()) })
	return errors.Join(errs...)
}

func (c *Cilium) read(ctx context.Context, name string) (observed, error) {
	cs := c.clients[name]
	ns := c.opts.Namespace
	var o observed
	secret := func(n string) (map[string][]byte, error) {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("cluster %q: read Secret %s/%s: %w", name, ns, n, err)
		}
		out := map[string][]byte{}
		for k, v := range s.Data {
			if isPeerConfig(k, v) && k != name { // Cilium ignores a cluster's own entry
				out[k] = v
			}
		}
		return out, nil
	}
	var err error
	if o.clustermesh, err = secret(SecretClusterMesh); err != nil {
		return o, err
	}
	if c.opts.KVStoreMesh {
		if o.kvstoremesh, err = secret(SecretKVStoreMesh); err != nil {
			return o, err
		}
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapRemoteUsers, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return o, fmt.Errorf("cluster %q: read ConfigMap %s/%s: %w", name, ns, ConfigMapRemoteUsers, err)
	default:
		o.users = withoutSelf(name, parseRemoteUsers(cm.Data[RemoteUsersKey]))
	}
	return o, nil
}

// Peers returns the peers each cluster's objects list. A peer from the clusters file counts
// as configured only when all its entries are exactly what SetPeers writes (so a
// half-written cluster, or one whose peer moved its endpoint, is written again); a name
// not in the clusters file counts as configured, so Status shows it as extra.
func (c *Cilium) Peers(ctx context.Context) (map[string][]string, error) {
	names := slices.Sorted(maps.Keys(c.clusters))
	// The entries each known peer should have, rendered once.
	want := make(map[string]MeshObjects, len(names))
	for _, n := range names {
		if m, err := c.render([]string{n}); err == nil {
			want[n] = m
		}
	}
	var mu sync.Mutex // guards out
	out := make(map[string][]string, len(names))
	err := c.forEach(ctx, names, func(ctx context.Context, name string) error {
		o, err := c.read(ctx, name)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for k := range o.clustermesh {
			seen[k] = true
		}
		for k := range o.kvstoremesh {
			seen[k] = true
		}
		for _, u := range o.users {
			seen[u] = true
		}
		var peers []string
		for p := range seen {
			if w, known := want[p]; known && !c.matches(o, p, w) {
				continue
			}
			peers = append(peers, p)
		}
		slices.SortFunc(peers, Compare)
		mu.Lock()
		out[name] = peers
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Cilium) matches(o observed, p string, w MeshObjects) bool {
	if !bytes.Equal(o.clustermesh[p], []byte(w.ClusterMesh[p])) || !slices.Contains(o.users, p) {
		return false
	}
	return !c.opts.KVStoreMesh || bytes.Equal(o.kvstoremesh[p], []byte(w.KVStoreMesh[p]))
}

// Connections returns the pairs whose clusters list each other.
func (c *Cilium) Connections(ctx context.Context) (*Graph, error) {
	p, err := c.Peers(ctx)
	if err != nil {
		return nil, err
	}
	return mutual(p), nil
}

// Preflight checks the writes before any is made. It refuses:
//   - an object over MaxObjectBytes, saying how many peers fit;
//   - clusters, among those written and their peers, that do not share one CA (read from
//     cilium-ca, else clustermesh-apiserver-remote-cert): without it a peer's client
//     certificate is refused;
//   - a cluster whose cilium-clustermesh Secret a Helm release renders
//     (clustermesh.config.enabled=true): Helm would overwrite the writes at its next upgrade;
//   - a cluster whose cilium-config says it was installed with another cluster-name,
//     cluster-id or max-connected-clusters than the clusters file records.
func (c *Cilium) Preflight(ctx context.Context, writes map[string][]string) error {
	var errs []error
	involved := map[string]bool{}
	for _, cl := range slices.Sorted(maps.Keys(writes)) {
		involved[cl] = true
		peers := withoutSelf(cl, writes[cl])
		for _, p := range peers {
			involved[p] = true
		}
		m, err := c.Objects(cl, peers)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: %w", cl, err))
			continue
		}
		if err := m.checkSizes(cl, len(peers), c.opts.MaxObjectBytes); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	names := slices.SortedFunc(maps.Keys(involved), Compare)
	var mu sync.Mutex // guards cas
	cas := map[string]caInfo{}
	err := c.forEach(ctx, names, func(ctx context.Context, name string) error {
		if _, ok := c.clients[name]; !ok {
			return fmt.Errorf("cluster %q: no Kubernetes client", name)
		}
		if _, write := writes[name]; write {
			if err := c.checkNotHelm(ctx, name); err != nil {
				return err
			}
		}
		if err := c.checkInstalled(ctx, name); err != nil {
			return err
		}
		ca, err := c.readCA(ctx, name)
		if err != nil {
			return err
		}
		mu.Lock()
		cas[name] = ca
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	return sharedCA(cas)
}

func (c *Cilium) checkNotHelm(ctx context.Context, name string) error {
	ns := c.opts.Namespace
	s, err := c.clients[name].CoreV1().Secrets(ns).Get(ctx, SecretClusterMesh, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster %q: read Secret %s/%s: %w", name, ns, SecretClusterMesh, err)
	}
	if rel := s.Annotations[helmReleaseAnnotation]; rel != "" {
		return fmt.Errorf("cluster %q: Secret %s/%s belongs to Helm release %q (clustermesh.config.enabled=true), which would overwrite these writes: upgrade it with clustermesh.config.enabled=false, or use --backend helm-values", name, ns, SecretClusterMesh, rel)
	}
	return nil
}

// ConfigMapCiliumConfig is the agent's configuration; its cluster-name, cluster-id and
// max-connected-clusters are what Cilium was installed with (the chart's
// cilium-configmap.yaml).
const ConfigMapCiliumConfig = "cilium-config"

// checkInstalled compares the cluster's entry in the clusters file with what Cilium in it
// was installed with (cilium-config), when that ConfigMap exists: a cluster installed with
// another id or maxConnectedClusters cannot join (Cilium refuses a remote whose
// maxConnectedClusters differs, and ids must match what its peers are told).
func (c *Cilium) checkInstalled(ctx context.Context, name string) error {
	ns := c.opts.Namespace
	cm, err := c.clients[name].CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapCiliumConfig, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster %q: read ConfigMap %s/%s: %w", name, ns, ConfigMapCiliumConfig, err)
	}
	cl := c.clusters[name]
	var errs []error
	if v := cm.Data["cluster-name"]; v != "" && v != cl.Name {
		errs = append(errs, fmt.Errorf("%s: Cilium in it was installed as cluster-name %q (ConfigMap %s/%s): name it %q in the clusters file, or point its context at the right cluster", cl.label(), v, ns, ConfigMapCiliumConfig, v))
	}
	if v, ok := cm.Data["cluster-id"]; ok && v != fmt.Sprint(cl.ID) {
		errs = append(errs, fmt.Errorf("%s: id %d, but Cilium in it was installed with cluster-id %s (ConfigMap %s/%s); the id is fixed at install time: set id: %s in the clusters file (and in the ids file, if prebake allocated another)", cl.label(), cl.ID, v, ns, ConfigMapCiliumConfig, v))
	}
	installed := cm.Data["max-connected-clusters"]
	if installed == "" {
		installed = fmt.Sprint(MaxConnectedClusters255) // the agent's default
	}
	if installed != fmt.Sprint(cl.maxConnected()) {
		errs = append(errs, fmt.Errorf("%s: maxConnectedClusters %d in the clusters file, but Cilium in it was installed with max-connected-clusters=%s (ConfigMap %s/%s); it cannot be changed on a running cluster: record %s in the clusters file, or reinstall the cluster with clustermesh.maxConnectedClusters=%d", cl.label(), cl.maxConnected(), installed, ns, ConfigMapCiliumConfig, installed, cl.maxConnected()))
	}
	return errors.Join(errs...)
}

// caInfo identifies a CA certificate.
type caInfo struct {
	id      string // SubjectKeyId (what cilium-cli compares), else a hash of the certificate
	subject string
	source  string // "Secret ns/name key"
}

func (c *Cilium) readCA(ctx context.Context, name string) (caInfo, error) {
	ns := c.opts.Namespace
	cs := c.clients[name]
	type place struct{ secret, key string }
	var tried []string
	for _, pl := range []place{{SecretCA, "ca.crt"}, {SecretCA, "tls.crt"}, {SecretRemoteCert, "ca.crt"}} {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, pl.secret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			tried = append(tried, pl.secret+" "+pl.key)
			continue
		}
		if err != nil {
			return caInfo{}, fmt.Errorf("cluster %q: read Secret %s/%s: %w", name, ns, pl.secret, err)
		}
		pemData := s.Data[pl.key]
		if len(pemData) == 0 {
			tried = append(tried, pl.secret+" "+pl.key)
			continue
		}
		src := fmt.Sprintf("Secret %s/%s %s", ns, pl.secret, pl.key)
		blk, _ := pem.Decode(pemData)
		if blk == nil {
			return caInfo{}, fmt.Errorf("cluster %q: %s is not PEM", name, src)
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return caInfo{}, fmt.Errorf("cluster %q: %s: %w", name, src, err)
		}
		id := hex.EncodeToString(cert.SubjectKeyId)
		if id == "" {
			sum := sha256.Sum256(cert.Raw)
			id = "sha256:" + hex.EncodeToString(sum[:])
		}
		return caInfo{id: id, subject: cert.Subject.String(), source: src}, nil
	}
	return caInfo{}, fmt.Errorf("cluster %q: no Cluster Mesh CA in namespace %s (looked for %s): enable Cluster Mesh on it (clustermesh.useAPIServer=true) with the cilium-ca Secret copied from the other clusters", name, ns, strings.Join(tried, ", "))
}

// sharedCA refuses CAs that differ, naming which clusters use which.
func sharedCA(cas map[string]caInfo) error {
	groups := map[string][]string{}
	for n, ca := range cas {
		groups[ca.id] = append(groups[ca.id], n)
	}
	if len(groups) <= 1 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(groups))
	// Largest group first: it is most likely the CA to keep.
	slices.SortStableFunc(ids, func(x, y string) int { return len(groups[y]) - len(groups[x]) })
	var parts []string
	for _, id := range ids {
		members := groups[id]
		slices.SortFunc(members, Compare)
		ca := cas[members[0]]
		parts = append(parts, fmt.Sprintf("%s use CA %q (key id %s, %s)", strings.Join(members, ", "), ca.subject, short(id), ca.source))
	}
	return fmt.Errorf("the clusters do not share a Cluster Mesh CA: %s. The cilium backend writes no per-peer certificates, so every cluster must trust one CA: copy one cilium-ca Secret to every cluster and re-issue the clustermesh-apiserver certificates (or use --backend helm-values with tls.caBundle)",
		strings.Join(parts, "; "))
}

func short(id string) string {
	if len(id) > 16 {
		return id[:16] + "…"
	}
	return id
}

// SetPeers server-side-applies the cluster's three objects with the given peers: first
// clustermesh-remote-users (so the peers may log in), then cilium-kvstoremesh, then
// cilium-clustermesh, which the agents read. Applying the same peers again changes nothing.
func (c *Cilium) SetPeers(ctx context.Context, cluster string, peers []string) error {
	peers = withoutSelf(cluster, peers)
	m, err := c.Objects(cluster, peers)
	if err != nil {
		return err
	}
	if err := m.checkSizes(cluster, len(peers), c.opts.MaxObjectBytes); err != nil {
		return err
	}
	cs, ns := c.clients[cluster], c.opts.Namespace
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	labels := map[string]string{"app.kubernetes.io/part-of": "cilium", "app.kubernetes.io/managed-by": FieldManager}

	cm := corev1ac.ConfigMap(ConfigMapRemoteUsers, ns).WithLabels(labels).
		WithData(map[string]string{RemoteUsersKey: m.RemoteUsers})
	if _, err := cs.CoreV1().ConfigMaps(ns).Apply(ctx, cm, opts); err != nil {
		return fmt.Errorf("cluster %q: apply ConfigMap %s/%s: %w", cluster, ns, ConfigMapRemoteUsers, err)
	}
	secret := func(name string, data map[string]string) error {
		ac := corev1ac.Secret(name, ns).WithLabels(labels).WithType(corev1.SecretTypeOpaque).WithData(toBytes(data))
		if _, err := cs.CoreV1().Secrets(ns).Apply(ctx, ac, opts); err != nil {
			return fmt.Errorf("cluster %q: apply Secret %s/%s: %w", cluster, ns, name, err)
		}
		return nil
	}
	if c.opts.KVStoreMesh {
		if err := secret(SecretKVStoreMesh, m.KVStoreMesh); err != nil {
			return err
		}
	}
	return secret(SecretClusterMesh, m.ClusterMesh)
}

func toBytes(m map[string]string) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}
