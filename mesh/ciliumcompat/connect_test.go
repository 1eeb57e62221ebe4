package ciliumcompat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"

	"github.com/cilium/cilium/api/v1/models"
	"github.com/cilium/cilium/pkg/clustermesh/common"
	"github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/dial"
	"github.com/cilium/cilium/pkg/kvstore"

	"github.com/prebake-dev/prebake/mesh"
)

// grpcLogs keeps what gRPC logs under Cilium's etcd client: the transport's reason for a
// failed connection is only there (Cilium's client reports a timeout).
var grpcLogs = newLogRecorder()

func TestMain(m *testing.M) {
	w := grpcLogWriter{grpcLogs}
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, w, w))
	os.Exit(m.Run())
}

type grpcLogWriter struct{ l *logRecorder }

func (w grpcLogWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	*w.l.records = append(*w.l.records, string(p))
	w.l.mu.Unlock()
	return len(p), nil
}

// mountPath is where the agent (cilium-agent/daemonset.yaml, volume clustermesh-secrets)
// and the kvstoremesh container (clustermesh-apiserver/deployment.yaml, volume
// kvstoremesh-secrets) mount the Secret prebake writes, in the Cilium v1.20.2 chart. The
// configs prebake renders name their certificate files under it.
const mountPath = "/var/lib/cilium/clustermesh/"

// mountSecret lays out what the kubelet projects into the clustermesh volume: every key of
// the mesh Secret as a file named like the key, plus the certificate Secret's items under
// the chart's names (prefix "common-etcd-client" for clustermesh-apiserver-remote-cert,
// "local-etcd-client" for clustermesh-apiserver-local-cert). The test cannot mount at
// mountPath, so the directory is a temporary one and the mountPath prefix of the file
// paths inside the configs is replaced by it; that is the only change made to prebake's
// data, and every config must use that prefix.
func mountSecret(t *testing.T, data map[string]string, certs map[string]keyPair) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range data {
		if !strings.Contains(v, "trusted-ca-file: "+mountPath) {
			t.Fatalf("entry %s does not name its files under %s:\n%s", k, mountPath, v)
		}
		if err := os.WriteFile(filepath.Join(dir, k), []byte(strings.ReplaceAll(v, mountPath, dir+"/")), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	for prefix, kp := range certs {
		kp.write(t, dir, prefix)
	}
	return dir
}

// probe is the business logic a remote cluster runs once Cilium's ClusterMesh connected
// it and read its cluster config; like the agent's (pkg/clustermesh/remote_cluster.go) it
// validates the config with ClusterInfo.ValidateRemoteConfig, then lists the cluster's
// nodes.
type probe struct {
	local  types.ClusterInfo
	name   string
	status common.StatusFunc
	prefix string // the nodes are listed under prefix + name + "/"

	mu     sync.Mutex
	config *types.CiliumClusterConfig
	nodes  []string
	err    error
}

func (p *probe) Run(ctx context.Context, backend kvstore.BackendOperations, config types.CiliumClusterConfig, ready chan<- error) {
	err := p.local.ValidateRemoteConfig(config)
	var kvs kvstore.KeyValuePairs
	if err == nil {
		kvs, err = backend.ListPrefix(ctx, p.prefix+p.name+"/")
	}
	p.mu.Lock()
	p.config, p.err = &config, err
	p.nodes = slices.Sorted(func(yield func(string) bool) {
		for k := range kvs {
			if !yield(k) {
				return
			}
		}
	})
	p.mu.Unlock()
	if err != nil {
		ready <- err
	}
	close(ready)
	<-ctx.Done()
}

func (p *probe) Stop()                       {}
func (p *probe) Remove(context.Context)      {}
func (p *probe) RevokeCache(context.Context) {}

// clusterMesh is Cilium's own ClusterMesh (pkg/clustermesh/common, what the agent and
// KVStoreMesh run) watching one configuration directory, with Cilium's default remote
// client factory (its etcd client).
type clusterMesh struct {
	mu     sync.Mutex
	probes map[string]*probe
}

func startClusterMesh(t *testing.T, ctx context.Context, log *slog.Logger, local types.ClusterInfo, dir, nodePrefix string, resolvers ...dial.Resolver) *clusterMesh {
	t.Helper()
	m := &clusterMesh{probes: map[string]*probe{}}
	cm := common.NewClusterMesh(common.Configuration{
		Logger:              log,
		Config:              common.Config{ClusterMeshConfig: dir},
		ClusterInfo:         local,
		RemoteClientFactory: common.DefaultRemoteClientFactory(kvstore.Config{}),
		NewRemoteCluster: func(name string, status common.StatusFunc) common.RemoteCluster {
			p := &probe{local: local, name: name, status: status, prefix: nodePrefix}
			m.mu.Lock()
			m.probes[name] = p
			m.mu.Unlock()
			return p
		},
		ClusterSizeDependantInterval: func(d time.Duration) time.Duration { return d },
		Resolvers:                    resolvers,
		Metrics:                      common.MetricsProvider("")(),
	})
	if err := cm.Start(ctx); err != nil {
		t.Fatalf("Cilium's ClusterMesh on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = cm.Stop(context.Background()) })
	return m
}

func (m *clusterMesh) status(name string) *models.RemoteCluster {
	m.mu.Lock()
	p := m.probes[name]
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.status()
}

func (m *clusterMesh) probe(name string) *probe {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.probes[name]
}

// waitFor polls cond until it holds or ctx ends; then it fails with what cond last said.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v; last: %s", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func ready(m *clusterMesh, name string) func() (bool, string) {
	return func() (bool, string) {
		s := m.status(name)
		if s == nil {
			return false, "Cilium has not loaded a config for " + name
		}
		return s.Ready, fmt.Sprintf("ready %v connected %v status %q config %+v", s.Ready, s.Connected, s.Status, s.Config)
	}
}

// renderer is prebake's cilium backend for the clusters, as `prebake mesh apply
// --backend cilium` builds it; Objects is exactly what its SetPeers writes.
func renderer(t *testing.T, clusters []mesh.Cluster, kvstoremesh bool) *mesh.Cilium {
	t.Helper()
	if err := mesh.Validate(clusters); err != nil {
		t.Fatal(err)
	}
	clients := map[string]kubernetes.Interface{}
	for _, c := range clusters {
		clients[c.Name] = fake.NewClientset()
	}
	b, err := mesh.NewCilium(clusters, clients, mesh.CiliumOptions{KVStoreMesh: kvstoremesh})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func objects(t *testing.T, b *mesh.Cilium, cluster string, peers ...string) mesh.MeshObjects {
	t.Helper()
	o, err := b.Objects(cluster, peers)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// nodesPrefix is where a clustermesh-apiserver publishes its cluster's nodes
// (cilium/state/nodes/v1/<cluster>/…); cachedNodesPrefix is where KVStoreMesh mirrors a
// remote's (cilium/cache/nodes/v1/<cluster>/…).
var (
	nodesPrefix       = kvstore.JoinKey(kvstore.StatePrefix, "nodes", "v1") + "/"
	cachedNodesPrefix = kvstore.JoinKey(kvstore.CachePrefix, "nodes", "v1") + "/"
)

// fixture is three clusters c1, c2, c3 that share one cilium-ca, plus c4, whose
// clustermesh-remote-users prebake rendered without c1. c2, c3 and c4 run a
// clustermesh-apiserver etcd; c1 is the cluster whose agents (or KVStoreMesh) connect.
type fixture struct {
	log      *slog.Logger
	logs     *logRecorder
	ca       *ca
	servers  map[string]*apiserver
	clusters []mesh.Cluster
	local    types.ClusterInfo
}

func clusterConfig(id uint32, cached bool) types.CiliumClusterConfig {
	return types.CiliumClusterConfig{ID: id, Capabilities: types.CiliumClusterConfigCapabilities{
		SyncedCanaries: true, Cached: cached, MaxConnectedClusters: 255,
	}}
}

func newFixture(t *testing.T, ctx context.Context) *fixture {
	t.Helper()
	f := &fixture{logs: newLogRecorder(), ca: newCA(t, "Cilium CA"), servers: map[string]*apiserver{}}
	f.log = slog.New(f.logs)
	f.local = types.ClusterInfo{ID: 1, Name: "c1", MaxConnectedClusters: 255}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Cilium's logs:\n%s", f.logs.dump())
		}
	})
	for _, n := range []string{"c2", "c3", "c4"} {
		f.servers[n] = startAPIServer(t, ctx, f.log, n, f.ca)
	}
	f.clusters = []mesh.Cluster{{Name: "c1", ID: 1, ClusterMeshAPIServer: "127.0.0.1:1"}}
	for i, n := range []string{"c2", "c3", "c4"} {
		f.clusters = append(f.clusters, mesh.Cluster{Name: n, ID: i + 2, ClusterMeshAPIServer: f.servers[n].addr})
	}
	b := renderer(t, f.clusters, true)
	// Each apiserver gets the users prebake renders for its cluster: c2 and c3 peer with
	// everyone, c4 only with c2 and c3.
	peers := map[string][]string{"c2": {"c1", "c3", "c4"}, "c3": {"c1", "c2", "c4"}, "c4": {"c2", "c3"}}
	for n, s := range f.servers {
		users := s.enforceUsers(t, ctx, objects(t, b, n, peers[n]...).RemoteUsers)
		var want []string
		for _, p := range peers[n] {
			want = append(want, "remote-"+p)
		}
		if !slices.Equal(users, want) {
			t.Fatalf("%s: clustermesh-remote-users lists %v, want %v", n, users, want)
		}
		s.publish(t, ctx, clusterConfig(uint32(map[string]int{"c2": 2, "c3": 3, "c4": 4}[n]), false))
	}
	return f
}

// remoteCert is c1's clustermesh-apiserver-remote-cert with authMode=cluster.
func (f *fixture) remoteCert(t *testing.T) keyPair { return f.ca.issue(t, "remote-c1", false) }

// TestAgentConnectsWithPrebakesSecret: without KVStoreMesh, c1's agents read
// cilium-clustermesh, one etcd config per peer pointing at the peer's
// clustermesh-apiserver (by the *.mesh.cilium.io name, mapped to its IP with
// cilium-host-aliases). Cilium's ClusterMesh loads prebake's Secret, its etcd client
// connects over mTLS as remote-c1 (let in by the users prebake rendered for the peer),
// reads the peer's cluster config and lists its nodes.
func TestAgentConnectsWithPrebakesSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	secret := objects(t, renderer(t, f.clusters, false), "c1", "c2", "c3")
	if secret.KVStoreMesh != nil {
		t.Fatal("without KVStoreMesh prebake rendered cilium-kvstoremesh")
	}
	dir := mountSecret(t, secret.ClusterMesh, map[string]keyPair{"common-etcd-client": f.remoteCert(t)})

	// Cilium's own view of the directory first: one config per peer.
	files, err := common.ConfigFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, []string{"c2", "c3"}) {
		t.Fatalf("Cilium finds configs for %v in prebake's Secret, want [c2 c3]", got)
	}
	for name, path := range files {
		cc, err := common.ParseCiliumConfig(path)
		if err != nil {
			t.Fatalf("%s: Cilium's ParseCiliumConfig: %v", name, err)
		}
		if len(cc.HostAliases) != 1 || cc.HostAliases[0].Hostname != name+".mesh.cilium.io" || cc.HostAliases[0].IPs[0].String() != "127.0.0.1" {
			t.Errorf("%s: cilium-host-aliases %+v, want %s.mesh.cilium.io → 127.0.0.1", name, cc.HostAliases, name)
		}
	}

	m := startClusterMesh(t, ctx, f.log, f.local, dir, nodesPrefix)
	for _, peer := range []string{"c2", "c3"} {
		waitFor(t, ctx, "Cilium's ClusterMesh ready for "+peer, ready(m, peer))
		p := m.probe(peer)
		p.mu.Lock()
		cfg, nodes, perr := p.config, p.nodes, p.err
		p.mu.Unlock()
		if perr != nil || cfg == nil {
			t.Fatalf("%s: %v", peer, perr)
		}
		if want := clusterConfig(uint32(map[string]int{"c2": 2, "c3": 3}[peer]), false); *cfg != want {
			t.Errorf("%s: cluster config %+v, want %+v", peer, *cfg, want)
		}
		if !slices.Equal(nodes, []string{nodeKey(peer)}) {
			t.Errorf("%s: nodes %v, want [%s]", peer, nodes, nodeKey(peer))
		}
		s := m.status(peer)
		if !s.Connected || !s.Config.Retrieved || s.Config.ClusterID != int64(cfg.ID) {
			t.Errorf("%s: Cilium's status %+v (config %+v)", peer, s, s.Config)
		}
	}
}

// failing starts Cilium's ClusterMesh on c1's agent directory for the given Secret data
// and certificate, and waits until Cilium logs, for peer, a record containing every part.
func (f *fixture) failing(t *testing.T, ctx context.Context, data map[string]string, cert keyPair, peer string, parts ...string) (*clusterMesh, string) {
	t.Helper()
	dir := mountSecret(t, data, map[string]keyPair{"common-etcd-client": cert})
	m := startClusterMesh(t, ctx, f.log, f.local, dir, nodesPrefix)
	var rec string
	waitFor(t, ctx, fmt.Sprintf("Cilium logs %q for %s", parts, peer), func() (bool, string) {
		var ok bool
		rec, ok = f.logs.find(append([]string{"clusterName=" + peer}, parts...)...)
		return ok, "no such record yet"
	})
	if s := m.status(peer); s == nil || s.Ready {
		t.Errorf("%s: Cilium reports it ready: %+v", peer, s)
	}
	return m, rec
}

// TestAgentRefusesForeignCA: c1 was installed with its own cilium-ca, so its
// clustermesh-apiserver-remote-cert (the files prebake's Secret points at) carries a CA
// that did not sign c2's server certificate. Cilium's remote client (the factory its
// ClusterMesh uses, with the config file Cilium finds in prebake's Secret) never
// connects: it fails with its own "timed out while starting the heartbeat watcher" and
// reports the failure in its status, while the gRPC transport under it says why:
// "x509: certificate signed by unknown authority". (prebake's preflight refuses a mesh
// whose CAs differ before writing anything; this is what it prevents.) Cilium's
// ClusterMesh would retry that for its 15-minute initial-connection timeout, so the test
// bounds the client's context instead.
func TestAgentRefusesForeignCA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	secret := objects(t, renderer(t, f.clusters, false), "c1", "c2")
	foreign := newCA(t, "Cilium CA").issue(t, "remote-c1", false) // same CN, another CA
	dir := mountSecret(t, secret.ClusterMesh, map[string]keyPair{"common-etcd-client": foreign})
	files, err := common.ConfigFiles(dir)
	if err != nil || files["c2"] == "" {
		t.Fatalf("Cilium finds %v in prebake's Secret (%v), want c2", files, err)
	}
	connect := func(dir string) (kvstore.BackendOperations, error) {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		t.Cleanup(ccancel)
		b, errc := common.DefaultRemoteClientFactory(kvstore.Config{})(cctx, f.log, filepath.Join(dir, "c2"),
			kvstore.ExtraOptions{NoLockQuorumCheck: true, ClusterName: "c2", DialOption: hostAliasDialer(t, f.log, filepath.Join(dir, "c2"))})
		err := <-errc
		if b != nil {
			t.Cleanup(b.Close)
		}
		return b, err
	}
	b, err := connect(dir)
	if err == nil || !strings.Contains(err.Error(), "timed out while starting the heartbeat watcher. Ensure that etcd is running on [https://c2.mesh.cilium.io:") {
		t.Fatalf("Cilium's client with a foreign CA: %v; want its heartbeat-watcher timeout", err)
	}
	if st := b.Status(); st.State != models.StatusStateFailure {
		t.Errorf("Cilium's client status %+v, want %s", st, models.StatusStateFailure)
	}
	if line, ok := grpcLogs.find("c2.mesh.cilium.io", "x509: certificate signed by unknown authority"); !ok {
		t.Errorf("the gRPC transport under Cilium's client logged no x509 failure for c2.mesh.cilium.io:\n%s", grpcLogs.dump())
	} else {
		t.Logf("Cilium: %v; transport: %s", err, line)
	}

	// The control: the same Secret with c1's real certificate connects.
	good := mountSecret(t, secret.ClusterMesh, map[string]keyPair{"common-etcd-client": f.remoteCert(t)})
	if _, err := connect(good); err != nil {
		t.Errorf("the same Secret with the shared CA: %v", err)
	}
}

// hostAliasDialer is the dialer Cilium's ClusterMesh builds from a config's
// cilium-host-aliases (remote_cluster.go, makeExtraOpts), for calling its client factory
// directly.
func hostAliasDialer(t *testing.T, log *slog.Logger, path string) []grpc.DialOption {
	t.Helper()
	cc, err := common.ParseCiliumConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	d := dial.NewStaticContextDialerWithFallback(log, common.ConvertHostAliasesToPlainMap(cc.HostAliases), dial.NewContextDialer(log))
	return []grpc.DialOption{grpc.WithContextDialer(d)}
}

// TestAgentRefusesEndpointOfAnotherCluster: the clusters file gives c2 the endpoint of c3.
// TLS and the login succeed (one CA, and c3 lets remote-c1 in), but c3's etcd lets
// remote-c1 read only c3's own cluster config, so Cilium cannot read c2's.
func TestAgentRefusesEndpointOfAnotherCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	clusters := slices.Clone(f.clusters)
	clusters[1].ClusterMeshAPIServer = f.servers["c3"].addr // c2 → c3's endpoint
	secret := objects(t, renderer(t, clusters, false), "c1", "c2")
	m, rec := f.failing(t, ctx, secret.ClusterMesh, f.remoteCert(t), "c2", "error=etcdserver: permission denied")
	t.Logf("Cilium: %s", rec)
	// Connected (the heartbeat was listed), then refused the cluster config: it is
	// required and not retrieved, so Cilium's ClusterMesh keeps c2 not ready.
	if _, ok := f.logs.find("clusterName=c2", "Retrieving cluster configuration from remote kvstore"); !ok {
		t.Error("Cilium never tried to read c2's cluster config")
	}
	waitFor(t, ctx, "c2 connected without its config", func() (bool, string) {
		s := m.status("c2")
		return s.Connected && s.Config != nil && s.Config.Required && !s.Config.Retrieved && !s.Ready, fmt.Sprintf("%+v config %+v", s, s.Config)
	})
}

// TestAgentRefusedWithoutRemoteUser: c4's clustermesh-remote-users, as prebake rendered
// it for c4's peers c2 and c3, has no remote-c1, so c4's etcd refuses c1's certificate.
func TestAgentRefusedWithoutRemoteUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	secret := objects(t, renderer(t, f.clusters, false), "c1", "c4")
	_, rec := f.failing(t, ctx, secret.ClusterMesh, f.remoteCert(t), "c4", "Unable to list keys before starting watcher", "prefix=cilium/.heartbeat", "etcdserver: permission denied")
	t.Logf("Cilium: %s", rec)
}

// svcResolver maps the clustermesh-apiserver Service name to the local etcd, as the
// agent's Kubernetes service resolver does (its dial.Resolver).
type svcResolver struct{ host, port, toHost, toPort string }

func (r svcResolver) Resolve(_ context.Context, host, port string) (string, string) {
	if host == r.host && port == r.port {
		return r.toHost, r.toPort
	}
	return host, port
}

// statusJSON is what `cilium-dbg status -o json` prints for the given remote clusters
// (models.StatusResponse), and what `kvstoremesh-dbg status -o json` prints for them with
// every resource kind synchronised ([]models.RemoteCluster), both marshalled by Cilium's
// own API models.
func statusJSON(t *testing.T, remotes ...*models.RemoteCluster) string {
	t.Helper()
	agent, err := json.Marshal(&models.StatusResponse{ClusterMesh: &models.ClusterMeshStatus{Clusters: remotes}})
	if err != nil {
		t.Fatal(err)
	}
	var kvs []*models.RemoteCluster
	for _, r := range remotes {
		c := *r
		c.Synced = &models.RemoteClusterSynced{Nodes: true, Services: true, Identities: true, Endpoints: true}
		kvs = append(kvs, &c)
	}
	km, err := json.Marshal(kvs)
	if err != nil {
		t.Fatal(err)
	}
	return string(agent) + "\n" + string(km) + "\n"
}

// TestStatusFromCiliumModels: what prebake's join wait reads (mesh.ParseMeshStatus) is
// Cilium's own status, as its ClusterMesh reports it and its API models print it: ready
// remotes make a join done, a remote that is not ready (c2 behind c3's endpoint) keeps it
// waiting, with Cilium's status message.
func TestStatusFromCiliumModels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	good := mountSecret(t, objects(t, renderer(t, f.clusters, false), "c1", "c2", "c3").ClusterMesh, map[string]keyPair{"common-etcd-client": f.remoteCert(t)})
	m := startClusterMesh(t, ctx, f.log, f.local, good, nodesPrefix)
	for _, peer := range []string{"c2", "c3"} {
		waitFor(t, ctx, "ready "+peer, ready(m, peer))
	}
	st, err := mesh.ParseMeshStatus(strings.NewReader(statusJSON(t, m.status("c2"), m.status("c3"))))
	if err != nil {
		t.Fatal(err)
	}
	if missing := st.Missing([]string{"c2", "c3"}, true); missing != nil {
		t.Errorf("Cilium reports c2 and c3 ready; prebake reads %v", missing)
	}

	clusters := slices.Clone(f.clusters)
	clusters[1].ClusterMeshAPIServer = f.servers["c3"].addr
	bad := mountSecret(t, objects(t, renderer(t, clusters, false), "c1", "c2").ClusterMesh, map[string]keyPair{"common-etcd-client": f.remoteCert(t)})
	mb := startClusterMesh(t, ctx, f.log, f.local, bad, nodesPrefix)
	waitFor(t, ctx, "c2 connected", func() (bool, string) {
		s := mb.status("c2")
		return s != nil && s.Connected, fmt.Sprintf("%+v", s)
	})
	s := mb.status("c2")
	st, err = mesh.ParseMeshStatus(strings.NewReader(statusJSON(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	missing := st.Missing([]string{"c2"}, false)
	if want := "c2: agent 1: not ready (" + s.Status + ")"; len(missing) != 1 || missing[0] != want {
		t.Errorf("c2 not ready in Cilium's status; prebake reads %v, want [%s]", missing, want)
	}
}
