package ciliumcompat

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/hive/cell"

	restapi "github.com/cilium/cilium/api/v1/kvstoremesh/server/restapi/cluster"
	"github.com/cilium/cilium/api/v1/models"
	"github.com/cilium/cilium/pkg/clustermesh/clustercfg"
	"github.com/cilium/cilium/pkg/clustermesh/common"
	"github.com/cilium/cilium/pkg/clustermesh/kvstoremesh"
	"github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/hive"
	"github.com/cilium/cilium/pkg/kvstore"
	"github.com/cilium/cilium/pkg/kvstore/store"

	"github.com/prebake-dev/prebake/mesh"
)

// enabledClient is a kvstore.Client over a connected backend, what the kvstore cell
// provides to KVStoreMesh for its local etcd.
type enabledClient struct{ kvstore.BackendOperations }

func (enabledClient) IsEnabled() bool { return true }

// syncedKinds are the resource kinds whose "synced" canaries a clustermesh-apiserver
// writes once it published them (cilium/synced/<cluster>/cilium/state/<kind>/v1).
var syncedKinds = []string{"nodes", "services", "serviceexports", "identities", "ip", "endpointslices"}

// TestKVStoreMeshSyncsWithPrebakesSecret runs Cilium's own KVStoreMesh
// (pkg/clustermesh/kvstoremesh, the kvstoremesh container of clustermesh-apiserver) on
// prebake's cilium-kvstoremesh: it connects to c2 and c3 as remote-c1 and mirrors them
// into c1's local etcd; then Cilium's ClusterMesh, loading prebake's cilium-clustermesh
// as c1's agents do, reads c2's and c3's cluster config and nodes from that cache. The
// agent's and KVStoreMesh's status, as Cilium's API models print them, end prebake's wait
// for the join (every peer ready, and synchronised by KVStoreMesh).
func TestKVStoreMeshSyncsWithPrebakesSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	for _, n := range []string{"c2", "c3"} {
		for _, kind := range syncedKinds {
			key := kvstore.JoinKey(kvstore.SyncedPrefix, n, kvstore.StatePrefix, kind, "v1")
			if err := f.servers[n].admin.Update(ctx, key, []byte("synced"), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	local := startAPIServer(t, ctx, f.log, "c1", f.ca)
	secret := objects(t, renderer(t, f.clusters, true), "c1", "c2", "c3")
	kdir := mountSecret(t, secret.KVStoreMesh, map[string]keyPair{"common-etcd-client": f.remoteCert(t)})

	var api restapi.GetClusterHandler
	h := hive.New(
		kvstoremesh.Cell,
		store.Cell,
		cell.Config(types.DefaultServiceModeV2Config),
		cell.Provide(
			func() types.ClusterInfo { return f.local },
			func() kvstoremesh.Config { return kvstoremesh.DefaultConfig },
			func() kvstore.Client { return enabledClient{local.admin} },
			func() kvstore.Config { return kvstore.Config{} },
		),
		cell.DecorateAll(func(c common.Config) common.Config {
			c.ClusterMeshConfig = kdir
			return c
		}),
		cell.Invoke(func(h restapi.GetClusterHandler) { api = h }),
	)
	if err := h.Start(f.log, ctx); err != nil {
		t.Fatalf("Cilium's KVStoreMesh: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop(f.log, context.Background()) })

	// KVStoreMesh's mirror in c1's etcd: the cluster configs, marked cached, and the nodes.
	for _, peer := range []string{"c2", "c3"} {
		waitFor(t, ctx, "KVStoreMesh mirrors "+peer, func() (bool, string) {
			cfg, err := clustercfg.Get(ctx, peer, local.admin)
			if err != nil {
				return false, err.Error()
			}
			node, err := local.admin.Get(ctx, cachedNodesPrefix+peer+"/node-1")
			return cfg.Capabilities.Cached && node != nil, fmt.Sprintf("config %+v, node %q, %v", cfg, node, err)
		})
	}

	// What `clustermesh-apiserver kvstoremesh-dbg status -o json` prints: the payload of
	// KVStoreMesh's GET /cluster, once Cilium reports both peers ready and synchronised.
	var kmStatus []*models.RemoteCluster
	waitFor(t, ctx, "KVStoreMesh reports c2 and c3 synced", func() (bool, string) {
		ok, isOK := api.Handle(restapi.GetClusterParams{}).(*restapi.GetClusterOK)
		if !isOK {
			return false, "no GetClusterOK"
		}
		kmStatus = ok.Payload
		done := 0
		for _, r := range kmStatus {
			if s := r.Synced; r.Ready && s != nil && s.Nodes && s.Services && s.Identities && s.Endpoints {
				done++
			}
		}
		return len(kmStatus) == 2 && done == 2, kvstoremeshJSON(t, kmStatus)
	})

	host, port, err := net.SplitHostPort(local.addr)
	if err != nil {
		t.Fatal(err)
	}
	adir := mountSecret(t, secret.ClusterMesh, map[string]keyPair{"local-etcd-client": f.ca.issue(t, "local-c1", false)})
	agent := startClusterMesh(t, ctx, f.log, f.local, adir, cachedNodesPrefix,
		svcResolver{host: "clustermesh-apiserver.kube-system.svc", port: "2379", toHost: host, toPort: port})
	for _, peer := range []string{"c2", "c3"} {
		waitFor(t, ctx, "the agent's ClusterMesh ready for "+peer, ready(agent, peer))
		p := agent.probe(peer)
		p.mu.Lock()
		cfg, nodes := p.config, p.nodes
		p.mu.Unlock()
		if !cfg.Capabilities.Cached || cfg.ID != uint32(map[string]int{"c2": 2, "c3": 3}[peer]) {
			t.Errorf("%s: the agent read cluster config %+v, want KVStoreMesh's cached copy", peer, cfg)
		}
		if want := cachedNodesPrefix + peer + "/node-1"; !slices.Equal(nodes, []string{want}) {
			t.Errorf("%s: the agent listed %v, want [%s]", peer, nodes, want)
		}
	}
	// The agent's and KVStoreMesh's status together, as --status-command prints them:
	// the join of c1 is done.
	agentJSON, err := json.Marshal(&models.StatusResponse{ClusterMesh: &models.ClusterMeshStatus{Clusters: []*models.RemoteCluster{agent.status("c2"), agent.status("c3")}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := mesh.ParseMeshStatus(strings.NewReader(string(agentJSON) + "\n" + kvstoremeshJSON(t, kmStatus)))
	if err != nil {
		t.Fatal(err)
	}
	if missing := st.Missing([]string{"c2", "c3"}, true); missing != nil {
		t.Errorf("Cilium's agent and KVStoreMesh report c2 and c3 ready and synced; prebake reads %v", missing)
	}
}

func kvstoremeshJSON(t *testing.T, rs []*models.RemoteCluster) string {
	t.Helper()
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
