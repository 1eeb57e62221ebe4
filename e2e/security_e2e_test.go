//go:build e2e

package e2e

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/prebake-dev/prebake/e2e/timeline"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/internal/certs"
)

// Scenario e: with mTLS on, a client without a certificate, with a certificate from another
// CA, or in plaintext is refused before any RPC runs; the right client works.
func TestMTLS(t *testing.T) {
	e := newEnv(t, "e", 2*time.Minute)
	const g = "e-small"
	hosts := []string{"127.0.0.1", "localhost"}
	good, err := certs.Generate(filepath.Join(e.dir, "tls"), hosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.Generate(filepath.Join(e.dir, "other-ca"), hosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.startServe(e.writeConfig(group{ID: g, MaxSize: 3, Prebaked: true}), &good)

	tests := []struct {
		name   string
		creds  credentials.TransportCredentials
		wantOK bool
	}{
		{"plaintext", insecure.NewCredentials(), false},
		{"TLS without a client certificate", tlsCreds(good.CACert, "", ""), false},
		{"client certificate from another CA", tlsCreds(good.CACert, other.ClientCert, other.ClientKey), false},
		{"server certificate from a CA the client does not trust", tlsCreds(other.CACert, good.ClientCert, good.ClientKey), false},
		{"client certificate from the right CA", tlsCreds(good.CACert, good.ClientCert, good.ClientKey), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := e.dial(tt.creds)
			defer conn.Close()
			client := protos.NewCloudProviderClient(conn)
			ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
			defer cancel()
			_, err := client.NodeGroups(ctx, &protos.NodeGroupsRequest{})
			if tt.wantOK {
				if err != nil {
					t.Fatalf("NodeGroups: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("NodeGroups succeeded; want the connection refused")
			}
			if code := status.Code(err); code != codes.Unavailable {
				t.Errorf("NodeGroups: %v; want code Unavailable (handshake refused)", err)
			}
			t.Logf("refused as it must be: %v", err)
			// Nor can it scale anything.
			if _, err := client.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: g, Delta: 1}); err == nil {
				t.Error("IncreaseSize succeeded over a refused connection")
			}
		})
	}

	// The stand-in works over mTLS, and nothing was scaled by the refused clients.
	conn := e.dial(tlsCreds(good.CACert, good.ClientCert, good.ClientKey))
	t.Cleanup(func() { conn.Close() })
	s := e.newStandIn(conn, false)
	res, err := s.Loop(e.ctx)
	if err != nil {
		t.Fatalf("stand-in loop over mTLS: %v", err)
	}
	if got := e.targetSize(g); got != 0 {
		t.Errorf("TargetSize(%s) = %d after refused IncreaseSize calls, want 0", g, got)
	}
	e.record("e", "e: security (mTLS required)", []timeline.Fact{
		{Name: "refused clients", Value: "plaintext, no client certificate, client certificate from another CA (and a client that does not trust the server)"},
		{Name: "one stand-in loop over mTLS (Refresh … TemplateNodeInfo)", Value: res.Duration.Round(time.Microsecond).String()},
	})
}

func mustPool(caFile string) *x509.CertPool {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		panic("no certificate in " + caFile)
	}
	return pool
}
