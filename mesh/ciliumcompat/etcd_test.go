package ciliumcompat

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/cilium/cilium/pkg/clustermesh/clustercfg"
	"github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/kvstore"
	kvstoreEtcdInit "github.com/cilium/cilium/pkg/kvstore/etcdinit"
)

// apiserver is the etcd of one cluster's clustermesh-apiserver: a real etcd (embedded,
// go.etcd.io/etcd/server/v3 v3.6.12, the version Cilium v1.20.2's client is built
// against) serving mTLS on 127.0.0.1 with client-certificate authentication, initialised
// by Cilium's own etcdinit (the clustermesh-apiserver's init container: root, admin-,
// local- and remote users and roles, auth enabled).
type apiserver struct {
	name  string
	addr  string // 127.0.0.1:port
	admin kvstore.BackendOperations
}

// startAPIServer starts the etcd of cluster name, with a server certificate from ca.
func startAPIServer(t *testing.T, ctx context.Context, log *slog.Logger, name string, ca *ca) *apiserver {
	t.Helper()
	dir := t.TempDir()
	server := ca.issue(t, "clustermesh-apiserver.kube-system.svc", true)
	crt, key, caFile := server.write(t, dir, "server")

	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client, peer := mustURL(t, "https://127.0.0.1:0"), mustURL(t, "http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: crt, KeyFile: key, TrustedCAFile: caFile, ClientCertAuth: true}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("%s: start etcd: %v", name, err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("%s: etcd: %v", name, err)
	case <-ctx.Done():
		t.Fatalf("%s: etcd not ready: %v", name, ctx.Err())
	}
	a := &apiserver{name: name, addr: e.Clients[0].Addr().String()}

	// The init container's work, by Cilium's code, through the admin certificate (before
	// auth is enabled any valid certificate may do it; after, admin-<name> has role root).
	adminDir := t.TempDir()
	adminCrt, adminKey, adminCA := ca.issue(t, "admin-"+name, false).write(t, adminDir, "admin")
	tlsInfo := transport.TLSInfo{CertFile: adminCrt, KeyFile: adminKey, TrustedCAFile: adminCA}
	tlsCfg, err := tlsInfo.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + a.addr}, TLS: tlsCfg, DialTimeout: 10 * time.Second, Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if err := kvstoreEtcdInit.ClusterMeshEtcdInit(ctx, log, raw, name); err != nil {
		t.Fatalf("%s: Cilium's etcdinit: %v", name, err)
	}
	raw.Close()

	// From here on, Cilium's own kvstore client, as the clustermesh-apiserver uses it.
	adminCfg := etcdConfigFile(t, adminDir, "https://"+a.addr, adminCA, adminKey, adminCrt)
	a.admin = ciliumClient(t, ctx, log, adminCfg, kvstore.ExtraOptions{})
	return a
}

func mustURL(t *testing.T, s string) url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return *u
}

// etcdConfigFile writes an etcd client config in the format Cilium's kvstore reads.
func etcdConfigFile(t *testing.T, dir, endpoint, caFile, keyFile, certFile string) string {
	t.Helper()
	p := filepath.Join(dir, "etcd-config.yaml")
	body := fmt.Sprintf("endpoints:\n- %s\ntrusted-ca-file: %s\nkey-file: %s\ncert-file: %s\n", endpoint, caFile, keyFile, certFile)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ciliumClient connects Cilium's kvstore etcd client with the config file at cfgPath.
func ciliumClient(t *testing.T, ctx context.Context, log *slog.Logger, cfgPath string, extra kvstore.ExtraOptions) kvstore.BackendOperations {
	t.Helper()
	b, errc := kvstore.NewClient(ctx, log, kvstore.EtcdBackendName, map[string]string{kvstore.EtcdOptionConfig: cfgPath}, extra)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Cilium's kvstore client with %s: %v", cfgPath, err)
		}
	case <-ctx.Done():
		t.Fatalf("Cilium's kvstore client with %s: %v", cfgPath, ctx.Err())
	}
	t.Cleanup(b.Close)
	return b
}

// enforceUsers does what the clustermesh-apiserver's users management
// (clustermesh-apiserver/clustermesh/users_mgmt.go, sync) does with the users.yaml of
// the clustermesh-remote-users ConfigMap: each user, except the cluster's own, is made
// present with its role, through Cilium's UserEnforcePresence. It returns the users.
func (a *apiserver) enforceUsers(t *testing.T, ctx context.Context, usersYAML string) []string {
	t.Helper()
	// The same shape users_mgmt.go decodes (usersConfigFile), with the same decoder.
	var f struct {
		Users []struct {
			Name string `yaml:"name"`
			Role string `yaml:"role"`
		} `yaml:"users"`
	}
	if err := yaml.Unmarshal([]byte(usersYAML), &f); err != nil {
		t.Fatalf("%s: users.yaml does not decode as the clustermesh-apiserver decodes it: %v\n%s", a.name, err, usersYAML)
	}
	var names []string
	for _, u := range f.Users {
		if u.Name == a.name {
			continue
		}
		if err := a.admin.UserEnforcePresence(ctx, u.Name, []string{u.Role}); err != nil {
			t.Fatalf("%s: UserEnforcePresence(%s, %s): %v", a.name, u.Name, u.Role, err)
		}
		names = append(names, u.Name)
	}
	return names
}

// publish writes what a clustermesh-apiserver publishes for its cluster: the cluster
// config (clustercfg.Set, Cilium's format and types) and one node under cilium/state.
func (a *apiserver) publish(t *testing.T, ctx context.Context, cfg types.CiliumClusterConfig) {
	t.Helper()
	if err := clustercfg.Set(ctx, a.name, cfg, a.admin); err != nil {
		t.Fatalf("%s: clustercfg.Set: %v", a.name, err)
	}
	if err := a.admin.Update(ctx, nodeKey(a.name), []byte(`{"name":"node-1","cluster":"`+a.name+`"}`), false); err != nil {
		t.Fatalf("%s: write node: %v", a.name, err)
	}
}

func nodeKey(cluster string) string {
	return kvstore.JoinKey(kvstore.StatePrefix, "nodes", "v1", cluster, "node-1")
}

// logRecorder is a slog handler that keeps every record, so a test can assert on the
// errors Cilium's code logs (its connection errors are only logged and retried).
type logRecorder struct {
	mu      *sync.Mutex
	records *[]string
	attrs   []slog.Attr
}

func newLogRecorder() *logRecorder {
	return &logRecorder{mu: &sync.Mutex{}, records: new([]string)}
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range l.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	*l.records = append(*l.records, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logRecorder{mu: l.mu, records: l.records, attrs: append(slices.Clone(l.attrs), attrs...)}
}

func (l *logRecorder) WithGroup(string) slog.Handler { return l }

// find returns the first record that contains every part.
func (l *logRecorder) find(parts ...string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range *l.records {
		ok := true
		for _, p := range parts {
			if !strings.Contains(r, p) {
				ok = false
				break
			}
		}
		if ok {
			return r, true
		}
	}
	return "", false
}

func (l *logRecorder) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(*l.records, "\n")
}
