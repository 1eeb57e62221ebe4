package kubetest

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prebake-dev/prebake/internal/kubetest/spawn"
)

func TestGeneratePKI(t *testing.T) {
	t.Parallel()
	p, err := generatePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, p.CACert)
	if !ca.IsCA {
		t.Errorf("CA certificate is not a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	serving := readCert(t, p.ServingCert)
	for _, name := range []string{"localhost", "127.0.0.1", "10.96.0.1", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %q: %v", name, err)
		}
	}

	admin := readCert(t, p.AdminCert)
	if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate as a client certificate: %v", err)
	}
	if diff := cmp.Diff([]string{"system:masters"}, admin.Subject.Organization); diff != "" {
		t.Errorf("admin organization (-want +got):\n%s", diff)
	}

	// The service-account public key must belong to the private key.
	keyBlock, _ := pem.Decode(mustRead(t, p.SAKey))
	key, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pubBlock, _ := pem.Decode(mustRead(t, p.SAPub))
	pub, err := x509.ParsePKIXPublicKey(pubBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(pub) {
		t.Errorf("sa.pub does not match sa.key")
	}
}

// TestKubeconfigReachesServer checks the kubeconfig end to end: a TLS server with the
// apiserver's certificate that demands a client certificate from the CA sees the admin.
func TestKubeconfigReachesServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := generatePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(p.ServingCert, p.ServingKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(mustRead(t, p.CACert))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Join(r.TLS.PeerCertificates[0].Subject.Organization, ",")))
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	path := filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(path, srv.URL, p); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != srv.URL {
		t.Errorf("kubeconfig server = %q, want %q", cfg.Host, srv.URL)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatalf("GET with the kubeconfig's credentials: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != "system:masters" {
		t.Errorf("server saw client organization %q, want system:masters", body)
	}
}

// TestFreePorts is not parallel: a child forked by another test between Listen and Close
// inherits the listeners until it execs, and then the immediate re-bind below fails.
func TestFreePorts(t *testing.T) {
	ports, err := freePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: want 6 distinct positive ports", ports)
		}
		if hi := ephemeralStart(); hi-lowestPort >= 1000 && (p < lowestPort || p >= hi) {
			t.Errorf("port %d outside [%d, %d), the range below the ephemeral ports", p, lowestPort, hi)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free after freePorts: %v", p, err)
			continue
		}
		l.Close()
	}
}

func TestK8sWrapperGoMod(t *testing.T) {
	t.Parallel()
	upstream := `// generated
module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
	github.com/kylelemons/godebug v1.1.0 // indirect
	k8s.io/api v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/cri-api => ./staging/src/k8s.io/cri-api
	example.com/other => ./other
)
`
	want := `module hermetic/k8sbins

go 1.25.0

godebug default=go1.25

require k8s.io/kubernetes v1.35.4

replace (
	k8s.io/api => k8s.io/api v0.35.4
	k8s.io/cri-api => k8s.io/cri-api v0.35.4
)
`
	got, err := k8sWrapperGoMod([]byte(upstream), "v1.35.4", "v0.35.4")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("wrapper go.mod (-want +got):\n%s", diff)
	}
	if stagingVersion != "v0.35.4" {
		t.Errorf("stagingVersion = %q, want v0.35.4", stagingVersion)
	}

	if _, err := k8sWrapperGoMod([]byte("module x\n\ngo 1.25.0\n"), "v1.35.4", "v0.35.4"); err == nil {
		t.Errorf("go.mod without staging replaces: want an error")
	}
}

// TestProcessStopAndReap starts real processes (sleep) the way the backend does, and checks
// that stop and ReapStale leave none behind.
func TestProcessStopAndReap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logs, pids := filepath.Join(dir, "logs"), filepath.Join(dir, "pids")
	for _, d := range []string{logs, pids} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sp := spawn.New()
	defer sp.Close()

	t.Run("stop", func(t *testing.T) {
		p, err := startProcess(sp, "sleep", "sleep", []string{"60"}, os.Environ(), logs, pids)
		if err != nil {
			t.Fatal(err)
		}
		pid := p.cmd.Process.Pid
		if got := strings.TrimSpace(string(mustRead(t, p.pidPath))); got != strconv.Itoa(pid) {
			t.Errorf("pid file says %q, want %d", got, pid)
		}
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		if gone, _ := p.exited(); !gone {
			t.Errorf("process %d still running after stop", pid)
		}
		if _, err := os.Stat(p.pidPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pid file still there after stop: %v", err)
		}
	})

	t.Run("reap", func(t *testing.T) {
		// A process that is not our child, as after a killed run: sh puts dir in its cmdline.
		stale := exec.Command("sh", "-c", "sleep 60; : "+dir)
		stale.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := stale.Start(); err != nil {
			t.Fatal(err)
		}
		waited := make(chan struct{})
		go func() { stale.Wait(); close(waited) }()
		t.Cleanup(func() { _ = syscall.Kill(-stale.Process.Pid, syscall.SIGKILL) })
		pid := strconv.Itoa(stale.Process.Pid)
		// Start can return before the child's argv shows in /proc: the kernel releases a
		// vfork parent before the new program's arguments are set up. A real stale process
		// has long been running, so wait for that state.
		deadline := time.Now().Add(5 * time.Second)
		for !isOurs(stale.Process.Pid, "sh", dir) {
			if time.Now().After(deadline) {
				t.Fatalf("/proc/%s/cmdline never showed sh with %s", pid, dir)
			}
			time.Sleep(time.Millisecond)
		}
		// The pid under another name must not be killed: its cmdline says sh, not etcd.
		writeFile(t, filepath.Join(pids, "etcd.pid"), pid+"\n")
		writeFile(t, filepath.Join(pids, "garbage.pid"), "not a pid\n")
		if err := ReapStale(dir); err != nil {
			t.Fatal(err)
		}
		select {
		case <-waited:
			t.Fatalf("ReapStale killed pid %s recorded as etcd, whose cmdline is sh", pid)
		default:
		}

		writeFile(t, filepath.Join(pids, "sh.pid"), pid+"\n")
		if err := ReapStale(dir); err != nil {
			t.Fatal(err)
		}
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			t.Fatalf("stale sh %s still running after ReapStale", pid)
		}
		if left, _ := filepath.Glob(filepath.Join(pids, "*.pid")); len(left) != 0 {
			t.Errorf("pid files left after ReapStale: %v", left)
		}
	})
}

func TestKindUnavailableIsOneLine(t *testing.T) {
	t.Parallel()
	k, err := NewKind(KindOptions{Dir: t.TempDir(), Image: "prebake.invalid/no-such-image:0"})
	if err != nil {
		t.Fatal(err)
	}
	err = k.Available(context.Background())
	if !errors.Is(err, ErrBackendUnavailable) {
		t.Fatalf("Available with a missing image = %v, want ErrBackendUnavailable", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("unavailable error spans lines:\n%s", err)
	}
}

func TestGoBuildHeartbeat(t *testing.T) {
	// A stand-in "go" that runs until the test has seen a heartbeat, so the
	// test does not depend on how long a real go command takes. (t.Setenv:
	// not parallel.)
	bin := t.TempDir()
	release := filepath.Join(t.TempDir(), "release")
	writeFile(t, filepath.Join(bin, "go"), "#!/bin/sh\nwhile [ ! -e \"$PREBAKE_TEST_RELEASE\" ]; do sleep 0.01; done\n")
	if err := os.Chmod(filepath.Join(bin, "go"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("PREBAKE_TEST_RELEASE", release)

	var out strings.Builder
	w := &syncWriter{w: &out}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "build.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	b := &builder{dir: t.TempDir(), out: w, log: logFile, began: time.Now(), heartbeat: time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- b.goBuild(context.Background(), b.dir, "build", "./...") }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(w.String(), "still compiling") {
		if time.Now().After(deadline) {
			writeFile(t, release, "")
			t.Fatalf("no heartbeat in progress output within 30s:\n%s", w.String())
		}
		time.Sleep(time.Millisecond)
	}
	writeFile(t, release, "")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.String(), "go build done") {
		t.Errorf("no completion line in progress output:\n%s", w.String())
	}
}

func TestTailFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.log")
	writeFile(t, path, "a\nb\nc\nd\n")
	got, err := tailFile(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got != "c\nd" {
		t.Errorf("tailFile = %q, want %q", got, "c\nd")
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(mustRead(t, path))
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syncWriter serialises writes from the heartbeat goroutine and the test.
type syncWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.w)
}
