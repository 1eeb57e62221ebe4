package certs

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReloaderPicksUpNewFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b1, err := Generate(dir, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(b1.ServerCert, b1.ServerKey, b1.CACert, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.CheckInterval = 0
	first := serverLeaf(t, r)

	// Rotate: a new bundle written over the same paths.
	b2, err := Generate(filepath.Join(dir, "new"), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{b2.ServerCert: b1.ServerCert, b2.ServerKey: b1.ServerKey, b2.CACert: b1.CACert} {
		data, _ := os.ReadFile(src)
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if second := serverLeaf(t, r); bytes.Equal(first, second) {
		t.Fatal("certificate not reloaded after the files changed")
	}

	// A broken file keeps the last good certificate.
	good := serverLeaf(t, r)
	if err := os.WriteFile(b1.ServerKey, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serverLeaf(t, r); !bytes.Equal(got, good) {
		t.Fatal("a broken key replaced the good certificate")
	}
}

func serverLeaf(t *testing.T, r *Reloader) []byte {
	t.Helper()
	cfg, err := r.ServerConfig().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("client auth = %v, want RequireAndVerifyClientCert", cfg.ClientAuth)
	}
	return cfg.Certificates[0].Certificate[0]
}

func TestNewReloaderErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	if _, err := NewReloader("", "k", "", nil); err == nil {
		t.Fatal("want an error for a missing cert")
	}
	if _, err := NewReloader("/nonexistent/c", "/nonexistent/k", "", nil); err == nil {
		t.Fatal("want an error for missing files")
	}
}
