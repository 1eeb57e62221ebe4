// Package serveproc builds prebake and runs `prebake serve` as a real process for the e2e
// tests and `make demo`: the code under test runs exactly as users run it, reached over real
// gRPC.
//
// Invariants: each process runs in its own process group with Pdeathsig=SIGKILL, forked from
// one goroutine locked to its OS thread (Pdeathsig fires when the forking thread exits,
// golang/go#27505); it is stopped by its PID (SIGTERM to the group, SIGKILL after a grace);
// its output goes to one log file per Process, across restarts, with a marker line per start.
package serveproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prebake-dev/prebake/internal/kubetest/spawn"
)

// Build compiles ./cmd/prebake of the module at moduleDir into dir and returns the binary's
// path. The Go build cache makes repeated builds cheap.
func Build(ctx context.Context, moduleDir, dir string) (string, error) {
	bin := filepath.Join(dir, "prebake")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/prebake")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/prebake in %s: %w\n%s", moduleDir, err, out)
	}
	return bin, nil
}

// ModuleDir returns the root of the main module the current directory belongs to.
func ModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module: run from the prebake checkout")
	}
	return filepath.Dir(gomod), nil
}

// Options configure a `prebake serve` process.
type Options struct {
	// Binary is the prebake executable, from Build.
	Binary string
	// Config is the --config path.
	Config string
	// Dir receives the log file (prebake-serve.log).
	Dir string
	// Listen and HTTPListen default to 127.0.0.1:0; the bound addresses are read from the
	// "serving" log line.
	Listen, HTTPListen string
	// TLS, when set, adds --tls-cert, --tls-key and --client-ca.
	TLSCert, TLSKey, ClientCA string
	// Env is added to the environment (KUBECONFIG=…, say).
	Env []string
	// Args are more flags of `prebake serve` (--ca-expander=…, say).
	Args []string
	// StartTimeout bounds the wait for "serving" and /readyz; default 60 s.
	StartTimeout time.Duration
}

// Process is one `prebake serve`; Restart starts it again on the same addresses.
type Process struct {
	o       Options
	logPath string
	sp      *spawn.Spawner

	// mu guards the fields below.
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd has been waited for
	grpcAddr string
	httpAddr string
	starts   int
}

// Start runs `prebake serve` and returns once it serves and /readyz answers 200 (every
// provider listed). On failure the error ends with the log's tail.
func Start(ctx context.Context, o Options) (*Process, error) {
	if o.Binary == "" || o.Config == "" || o.Dir == "" {
		return nil, errors.New("serveproc: Options.Binary, Config and Dir are required")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.HTTPListen == "" {
		o.HTTPListen = "127.0.0.1:0"
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	p := &Process{o: o, logPath: filepath.Join(o.Dir, "prebake-serve.log"), sp: spawn.New()}
	if err := p.start(ctx, o.Listen, o.HTTPListen); err != nil {
		p.sp.Close()
		return nil, err
	}
	return p, nil
}

func (p *Process) start(ctx context.Context, listen, httpListen string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done: // exited by itself; start it again
			p.cmd, p.done = nil, nil
		default:
			return errors.New("serveproc: already running")
		}
	}
	p.starts++
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("serveproc: open log: %w", err)
	}
	defer logf.Close()
	offset, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "=== e2e: start %d of prebake serve at %s ===\n", p.starts, time.Now().Format(time.RFC3339Nano))

	args := []string{"serve", "--config", p.o.Config, "--listen", listen, "--http-listen", httpListen,
		"--log-format", "json", "--shutdown-timeout", "10s"}
	if p.o.TLSCert != "" {
		args = append(args, "--tls-cert", p.o.TLSCert, "--tls-key", p.o.TLSKey, "--client-ca", p.o.ClientCA)
	}
	args = append(args, p.o.Args...)
	cmd := exec.Command(p.o.Binary, args...)
	cmd.Env = append(os.Environ(), p.o.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.sp.Start(cmd); err != nil {
		return fmt.Errorf("serveproc: start %s: %w", p.o.Binary, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done

	fail := func(err error) error {
		p.killLocked()
		return fmt.Errorf("serveproc: %w\n----- last lines of %s -----\n%s", err, p.logPath, tail(p.logPath, 40))
	}
	deadline := time.Now().Add(p.o.StartTimeout)
	grpcAddr, httpAddr, err := waitServing(ctx, p.logPath, offset, done, deadline)
	if err != nil {
		return fail(err)
	}
	p.grpcAddr, p.httpAddr = grpcAddr, httpAddr
	if err := waitReady(ctx, "http://"+httpAddr+"/readyz", done, deadline); err != nil {
		return fail(err)
	}
	return nil
}

// waitServing reads the log from offset until the JSON line {"msg":"serving",…} names the
// bound addresses, the process exits, or the deadline passes. It polls the file.
func waitServing(ctx context.Context, path string, offset int64, done <-chan struct{}, deadline time.Time) (grpcAddr, httpAddr string, err error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if g, h, ok := findServing(path, offset); ok {
			return g, h, nil
		}
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-done:
			if g, h, ok := findServing(path, offset); ok {
				return g, h, nil
			}
			return "", "", errors.New("prebake serve exited before serving")
		case <-tick.C:
			if time.Now().After(deadline) {
				return "", "", errors.New("prebake serve did not log \"serving\" in time")
			}
		}
	}
}

func findServing(path string, offset int64) (grpcAddr, httpAddr string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "", "", false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"msg":"serving"`)) {
			continue
		}
		var rec struct {
			GRPC string `json:"grpc"`
			HTTP string `json:"http"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.GRPC != "" {
			return rec.GRPC, rec.HTTP, true
		}
	}
	return "", "", false
}

func waitReady(ctx context.Context, url string, done <-chan struct{}, deadline time.Time) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	var last string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("prebake serve exited while waiting for %s (last: %s)", url, last)
		case <-tick.C:
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready in time (last: %s)", url, last)
			}
		}
	}
}

// GRPCAddr is the bound gRPC address (host:port).
func (p *Process) GRPCAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grpcAddr
}

// HTTPAddr is the bound address of /healthz, /readyz and /metrics.
func (p *Process) HTTPAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.httpAddr
}

// PID is the process id, or 0 when it is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// LogPath is the log file of every start.
func (p *Process) LogPath() string { return p.logPath }

// LogTail returns the last n lines of the log.
func (p *Process) LogTail(n int) string { return tail(p.logPath, n) }

// Kill sends SIGKILL to the process group (kill -9: no shutdown, no drain) and waits for the
// process to be gone.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked()
}

func (p *Process) killLocked() {
	if p.cmd == nil {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-p.done
	p.cmd, p.done = nil, nil
}

// Stop asks the process to shut down (SIGTERM to its group, so it drains in-flight
// creations) and kills it if it is still there after 15 s. Stopping a stopped process is a
// no-op.
func (p *Process) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		p.cmd, p.done = nil, nil
	case <-time.After(15 * time.Second):
		p.killLocked()
	}
}

// Close stops the process and releases the thread it was forked from.
func (p *Process) Close() {
	p.Stop()
	p.sp.Close()
}

// Restart starts the process again on the addresses it had, as a supervisor restarting a
// crashed plugin would: clients keep their target and reconnect.
func (p *Process) Restart(ctx context.Context) error {
	p.mu.Lock()
	g, h := p.grpcAddr, p.httpAddr
	p.mu.Unlock()
	return p.start(ctx, g, h)
}

// Metrics returns the text of /metrics.
func (p *Process) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTPAddr()+"/metrics", nil)
	if err != nil {
		return "", err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("scrape /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape /metrics: %s", resp.Status)
	}
	return string(body), nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
