package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run this binary's main as `prebake …`: a child
// started with PREBAKE_TEST_MAIN=1 is prebake, so a test can signal a real
// process without building one.
func TestMain(m *testing.M) {
	if os.Getenv("PREBAKE_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveProc is a `prebake serve` child whose JSON log lines are collected.
type serveProc struct {
	cmd  *exec.Cmd
	done chan error

	mu   sync.Mutex // guards logs
	logs []map[string]any
	raw  strings.Builder
}

func startServeProc(t *testing.T, config string) *serveProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--config", config, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--log-format", "json", "--shutdown-timeout", "5s")
	cmd.Env = append(os.Environ(), "PREBAKE_TEST_MAIN=1", "KUBECONFIG=", "KUBERNETES_SERVICE_HOST=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			p.mu.Lock()
			p.raw.WriteString(sc.Text() + "\n")
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.logs = append(p.logs, m)
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		<-read
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-read
	})
	return p
}

// waitLog waits for a log line whose msg starts with prefix and returns it.
func (p *serveProc) waitLog(t *testing.T, prefix string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, m := range p.logs {
			if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
				p.mu.Unlock()
				return m
			}
		}
		p.mu.Unlock()
		select {
		case err := <-p.done:
			t.Fatalf("prebake serve exited (%v) before logging %q:\n%s", err, prefix, p.output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no log line %q within a minute:\n%s", prefix, p.output())
	return nil
}

func (p *serveProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// kubeconfig writes a kubeconfig for server, trusting caPEM (none: skip
// verification).
func kubeconfig(t *testing.T, server string, caPEM []byte) string {
	t.Helper()
	cluster := "    insecure-skip-tls-verify: true\n"
	if caPEM != nil {
		ca := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		cluster = "    certificate-authority: " + ca + "\n"
	}
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: %s
%scontexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
users:
- name: u
  user: {token: not-a-real-token}
`, server, cluster)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func kwokConfig(t *testing.T, kubeconfigPath string) string {
	t.Helper()
	body := fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: t
providers:
  kwok: {kubeconfig: %s}
nodeGroups:
  - {id: small, provider: kwok, maxSize: 3, machineType: kwok-small, location: zone-a}
`, kubeconfigPath)
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// forbiddingAPI answers every request as an API server that authenticates
// the caller and forbids it everything.
func forbiddingAPI(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		verb := map[string]string{http.MethodGet: "list", http.MethodPost: "create", http.MethodDelete: "delete"}[r.Method]
		if r.URL.Query().Get("watch") == "true" {
			verb = "watch"
		}
		resource := filepath.Base(r.URL.Path)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
			`"message":"%s is forbidden: User \"system:serviceaccount:kube-system:prebake\" cannot %s resource \"%s\" at the cluster scope",`+
			`"details":{"kind":%q}}`, resource, verb, resource, resource)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// silentAPI completes the TLS handshake and never answers a request: an
// API server that hangs.
func silentAPI(t *testing.T) string {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return srv.URL
}

// refusedAPI is an address where nothing listens: port 1 on loopback (a
// freed ephemeral port could be taken again by a parallel test's server).
func refusedAPI(t *testing.T) string {
	t.Helper()
	return "https://127.0.0.1:1"
}

// prebake serve exits cleanly on SIGTERM whatever state the cluster API
// leaves it in, and says what it waited for.
func TestServeExitsOnSIGTERMWhileTheAPIIsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts prebake serve processes")
	}
	t.Parallel()
	forbidding := forbiddingAPI(t)
	tests := []struct {
		name       string
		kubeconfig func(t *testing.T) string
		// waitFor is the log line that shows serve is in the state under test.
		waitFor string
		// readyz, when set, must be in /readyz's 503 body.
		readyz []string
		// logSays, when set, must be in the waitFor line's err and hint:
		// what failed and what to do, for whoever reads the pod's log.
		logSays []string
	}{
		{"refused", func(t *testing.T) string { return kubeconfig(t, refusedAPI(t), nil) }, "node watch: can't list or watch Nodes",
			[]string{"provider kwok not listed yet", "connection refused"}, []string{"connection refused", "reachable"}},
		// The first List hangs: SIGTERM arrives during the start.
		{"silent", func(t *testing.T) string { return kubeconfig(t, silentAPI(t), nil) }, "starting: listing every provider once", nil, nil},
		// The line names the verb and the resource RBAC refused, and the
		// grant that fixes it.
		{"forbidden", func(t *testing.T) string { return kubeconfig(t, forbidding.URL, nil) }, "node watch: can't list or watch Nodes",
			[]string{"forbidden", "cannot list resource"}, []string{`cannot list resource "nodes"`, "list and watch on nodes", "prebake-rbac.yaml"}},
		// A kubeconfig whose CA is not the server's.
		{"wrong CA", func(t *testing.T) string {
			return kubeconfig(t, forbidding.URL, otherCA(t))
		}, "node watch: can't list or watch Nodes", []string{"x509"}, []string{"x509", "CA matches"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startServeProc(t, kwokConfig(t, tc.kubeconfig(t)))
			line := p.waitLog(t, tc.waitFor)
			said := fmt.Sprint(line["err"], " ", line["hint"])
			for _, want := range tc.logSays {
				if !strings.Contains(said, want) {
					t.Errorf("log line %q: err and hint %q do not say %q", tc.waitFor, said, want)
				}
			}
			if tc.readyz != nil {
				serving := p.waitLog(t, "serving")
				body := readyz(t, serving["http"].(string))
				for _, want := range tc.readyz {
					if !strings.Contains(body, want) {
						t.Errorf("/readyz = %q, want it to say %q", body, want)
					}
				}
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-p.done:
				if err != nil {
					t.Fatalf("prebake serve exited with %v after SIGTERM:\n%s", err, p.output())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("prebake serve still running 30 s after SIGTERM:\n%s", p.output())
			}
			if out := p.output(); !strings.Contains(out, "stopped") {
				t.Errorf("no \"stopped\" log line after SIGTERM:\n%s", out)
			}
		})
	}
}

func readyz(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d (%s), want 503", resp.StatusCode, b)
	}
	return string(b)
}

// otherCA is a CA certificate no test server chains to.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the API server's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
