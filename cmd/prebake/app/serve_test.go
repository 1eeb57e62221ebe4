package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/internal/certs"
)

const goodConfig = `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: t
providers:
  kwok: {}
nodeGroups:
  - id: small
    provider: kwok
    minSize: 0
    maxSize: 3
    machineType: kwok-small
    location: zone-a
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer runs Run(o) until the test ends and returns its gRPC address;
// stop shuts it down and returns Run's error.
func startServer(t *testing.T, o Options) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	o.Listen, o.ShutdownTimeout = "127.0.0.1:0", 5*time.Second
	o.Ready = func(g, _ string) { ready <- g }
	go func() { done <- Run(ctx, o) }()
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return addr, stop
}

func TestBadConfigFailsBeforeListening(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	addr := freeAddr(t)
	bad := strings.Replace(goodConfig, "maxSize: 3", "maxsize: 3", 1)
	err := Run(t.Context(), Options{ConfigPath: writeConfig(t, bad), Listen: addr, ShutdownTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), `unknown field "maxsize"`) || !strings.Contains(err.Error(), ":10:") {
		t.Fatalf("err = %v, want the unknown field named with its line", err)
	}
	// Nothing may be listening.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("address %s still taken after a failed start: %v", addr, err)
	}
	l.Close()
}

func TestPlaintextOffLoopbackIsRefused(t *testing.T) {
	_, err := transportCredentials(Options{Listen: "0.0.0.0:8086"}, nil)
	if err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("err = %v, want a refusal naming --tls-cert/--insecure", err)
	}
	for _, addr := range []string{"127.0.0.1:1", "[::1]:1", "localhost:1"} {
		if _, err := transportCredentials(Options{Listen: addr}, nil); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if _, err := transportCredentials(Options{Listen: "0.0.0.0:1", Insecure: true}, nil); err != nil {
		t.Errorf("--insecure: %v", err)
	}
}

// TestServeAnswersWithoutACluster runs the whole server: groups and
// templates are served, GetOptions is Unimplemented, and Refresh is
// Unavailable because the kwok provider has no cluster to list.
func TestServeAnswersWithoutACluster(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	ctx := t.Context()
	addr, stop := startServer(t, Options{ConfigPath: writeConfig(t, goodConfig)})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := protos.NewCloudProviderClient(conn)
	groups, err := c.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	if err != nil || len(groups.GetNodeGroups()) != 1 || groups.GetNodeGroups()[0].GetId() != "small" {
		t.Fatalf("NodeGroups = %v, %v", groups, err)
	}
	if _, err := c.NodeGroupGetOptions(ctx, &protos.NodeGroupAutoscalingOptionsRequest{Id: "small"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetOptions: %v, want Unimplemented", err)
	}
	if _, err := c.Refresh(ctx, &protos.RefreshRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Refresh without a cluster: %v, want Unavailable", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run after shutdown: %v", err)
	}
}

func TestMTLSRefusesStrangers(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	dir := t.TempDir()
	b, err := certs.Generate(filepath.Join(dir, "good"), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.Generate(filepath.Join(dir, "other"), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	addr, _ := startServer(t, Options{ConfigPath: writeConfig(t, goodConfig), TLSCert: b.ServerCert, TLSKey: b.ServerKey, ClientCA: b.CACert})
	call := func(clientCert, clientKey string) error {
		pool := x509.NewCertPool()
		pem, _ := os.ReadFile(b.CACert)
		pool.AppendCertsFromPEM(pem)
		cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
		if clientCert != "" {
			kp, err := tls.LoadX509KeyPair(clientCert, clientKey)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err = protos.NewCloudProviderClient(conn).NodeGroups(cctx, &protos.NodeGroupsRequest{})
		return err
	}
	if err := call(b.ClientCert, b.ClientKey); err != nil {
		t.Fatalf("client with the right certificate: %v", err)
	}
	if err := call("", ""); err == nil {
		t.Fatal("client without a certificate was served")
	}
	if err := call(other.ClientCert, other.ClientKey); err == nil {
		t.Fatal("client with a certificate of another CA was served")
	}
}

// caClient is a test's view of a served config, driven the way CA drives it.
type caClient struct {
	protos.CloudProviderClient
	t *testing.T
}

// serveConfig runs `prebake serve` on the config text cfg until the test
// ends (checking that it shuts down cleanly) and dials it over gRPC.
func serveConfig(t *testing.T, cfg string) *caClient {
	t.Helper()
	addr, stop := startServer(t, Options{ConfigPath: writeConfig(t, cfg)})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		if err := stop(); err != nil {
			t.Errorf("Run after shutdown: %v", err)
		}
	})
	return &caClient{CloudProviderClient: protos.NewCloudProviderClient(conn), t: t}
}

// nodes is NodeGroupNodes(id).
func (c *caClient) nodes(id string) []*protos.Instance {
	c.t.Helper()
	res, err := c.NodeGroupNodes(c.t.Context(), &protos.NodeGroupNodesRequest{Id: id})
	if err != nil {
		c.t.Fatal(err)
	}
	return res.GetInstances()
}

// until polls CA's read RPCs, with Refresh between reads as CA's loop does,
// until cond holds or timeout passes.
func (c *caClient) until(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		if _, err := c.Refresh(c.t.Context(), &protos.RefreshRequest{}); err != nil {
			c.t.Fatalf("Refresh: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
