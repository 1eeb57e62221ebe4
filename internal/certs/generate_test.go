package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGeneratedFilesHandshake checks the files `prebake certs` writes the way
// cluster-autoscaler's externalgrpc client uses them: the client trusts only
// ca.crt, presents client.crt and sets ServerName to the host of its address.
// The server side is the Reloader's config, the one `prebake serve` runs.
func TestGeneratedFilesHandshake(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := Generate(filepath.Join(dir, "good"), []string{"prebake.kube-system.svc", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Generate(filepath.Join(dir, "other"), []string{"prebake.kube-system.svc"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{b.CACert, 0o644}, {b.CAKey, 0o600}, {b.ServerCert, 0o644}, {b.ServerKey, 0o600}, {b.ClientCert, 0o644}, {b.ClientKey, 0o600}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != f.mode {
			t.Errorf("%s: mode %v, want %v", filepath.Base(f.path), got, f.mode)
		}
	}
	r, err := NewReloader(b.ServerCert, b.ServerKey, b.CACert, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, serverName   string
		clientCert, client string
		wantOK             bool
	}{
		{"service DNS name, own client cert", "prebake.kube-system.svc", b.ClientCert, b.ClientKey, true},
		{"loopback IP, own client cert", "127.0.0.1", b.ClientCert, b.ClientKey, true},
		{"client cert of another CA", "prebake.kube-system.svc", other.ClientCert, other.ClientKey, false},
		{"no client cert", "prebake.kube-system.svc", "", "", false},
		{"name not in the server cert", "prebake.default.svc", b.ClientCert, b.ClientKey, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := x509.NewCertPool()
			pem, err := os.ReadFile(b.CACert)
			if err != nil {
				t.Fatal(err)
			}
			pool.AppendCertsFromPEM(pem)
			cfg := &tls.Config{RootCAs: pool, ServerName: tc.serverName, MinVersion: tls.VersionTLS12}
			if tc.clientCert != "" {
				kp, err := tls.LoadX509KeyPair(tc.clientCert, tc.client)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Certificates = []tls.Certificate{kp}
			}
			err = handshake(t, r.ServerConfig(), cfg)
			if tc.wantOK && err != nil {
				t.Fatalf("handshake refused: %v", err)
			}
			if !tc.wantOK && err == nil {
				t.Fatal("handshake accepted, want a refusal")
			}
		})
	}
}

// handshake runs both ends over an in-memory pipe and returns the first
// error of either side. With TLS 1.3 the client learns of a rejected client
// certificate only on its first read, so the client reads once.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	cc, sc := net.Pipe()
	srvErr := make(chan error, 1)
	go func() {
		s := tls.Server(sc, server)
		err := s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		srvErr <- err
		// Close the pipe, not the TLS conn: close_notify would block on it.
		sc.Close()
	}()
	defer cc.Close()
	c := tls.Client(cc, client)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	err := c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	if err != nil {
		cc.Close()
		<-srvErr
		return err
	}
	return <-srvErr
}
