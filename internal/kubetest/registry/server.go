package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prebake-dev/prebake/internal/kubetest/spawn"
)

const (
	// stopGrace is how long the registry gets between SIGTERM and SIGKILL; its own drain
	// timeout (drainTimeout) is shorter, so a healthy registry exits in time.
	stopGrace    = 10 * time.Second
	drainTimeout = 5 * time.Second
	// readyTimeout bounds Start's wait for GET /v2/ to answer 200 when ctx has no deadline.
	readyTimeout = 30 * time.Second
)

// Options configures Start.
type Options struct {
	// Binary is the registry server; empty means BuildServer's default cache path (which must
	// have been built).
	Binary string
	// Addr is host:port to listen on, plain HTTP: 127.0.0.1 in tests, the gateway address of a
	// Docker network for node containers. Port 0 picks a free port (below the kernel's
	// ephemeral range, retried when another process takes it first).
	Addr string
	// StorageDir is the filesystem storage root; it is created if missing. Its content
	// survives Stop, so a restarted registry serves the same images.
	StorageDir string
	// LogFile receives the registry's config (first) and its logs; it is truncated at Start.
	LogFile string
	// Spawner starts the process; nil means a private one that Stop closes.
	Spawner *spawn.Spawner
}

// Server is a running registry process.
type Server struct {
	// Addr is the host:port it listens on (the picked port when Options.Addr asked for 0).
	Addr    string
	logFile string
	cmd     *exec.Cmd
	done    chan struct{} // closed when Wait has returned; waitErr is then set
	waitErr error
	ownSp   *spawn.Spawner
}

// Host is Addr: the registry part of an image reference (host:port/repository:tag).
func (s *Server) Host() string { return s.Addr }

// URL is the registry's base URL, http://<Addr>.
func (s *Server) URL() string { return "http://" + s.Addr }

// LogFile is the path of the registry's log.
func (s *Server) LogFile() string { return s.logFile }

// configYAML is distribution's configuration (its docs/content/about/configuration.md):
// filesystem storage, plain HTTP on addr, text logs, deletes allowed so tests can remove
// images, no upload purging (no background work a test could race with).
func configYAML(addr, storageDir string) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: text
  fields:
    service: prebake-test-registry
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %q
  draintimeout: %s
  headers:
    X-Content-Type-Options: [nosniff]
`, storageDir, addr, drainTimeout)
}

// Start starts the registry and returns once GET /v2/ answers 200. A registry that exits
// before that fails Start with the tail of its log.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Addr == "" {
		return nil, errors.New("registry Options.Addr is empty; pass host:port, for example 127.0.0.1:0")
	}
	host, port, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("registry Options.Addr %q: %w; pass host:port", opts.Addr, err)
	}
	if opts.StorageDir == "" || opts.LogFile == "" {
		return nil, errors.New("registry Options.StorageDir and Options.LogFile must be set (for example under t.TempDir())")
	}
	if opts.Binary == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		opts.Binary = filepath.Join(dir, DistributionVersion, "registry")
	}
	if err := checkExecutable(opts.Binary); err != nil {
		return nil, fmt.Errorf("registry Options.Binary: %w (run registry.BuildServer to make it)", err)
	}
	storage, err := filepath.Abs(opts.StorageDir)
	if err != nil {
		return nil, fmt.Errorf("registry Options.StorageDir: %w", err)
	}
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return nil, fmt.Errorf("registry Options.StorageDir: %w", err)
	}
	sp, own := opts.Spawner, false
	if sp == nil {
		sp, own = spawn.New(), true
	}
	attempts := 1
	if port == "0" {
		attempts = 3
	}
	for attempt := 1; ; attempt++ {
		addr := opts.Addr
		if port == "0" {
			p, err := freePort(host)
			if err != nil {
				if own {
					sp.Close()
				}
				return nil, err
			}
			addr = net.JoinHostPort(host, strconv.Itoa(p))
		}
		s, err := startOnce(ctx, sp, opts.Binary, addr, storage, opts.LogFile)
		if err == nil {
			if own {
				s.ownSp = sp
			}
			return s, nil
		}
		if attempt >= attempts || !errors.Is(err, errAddrInUse) {
			if own {
				sp.Close()
			}
			return nil, err
		}
	}
}

var errAddrInUse = errors.New("address already in use")

func startOnce(ctx context.Context, sp *spawn.Spawner, bin, addr, storage, logPath string) (*Server, error) {
	cfg := configYAML(addr, storage)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("registry Options.LogFile: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "# prebake: %s serve /dev/stdin, with this config:\n%s# prebake: registry output follows\n", bin, cfg)

	cmd := exec.Command(bin, "serve", "/dev/stdin")
	cmd.Stdin = strings.NewReader(cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	// No tracing exporter: distribution's OpenTelemetry default would export spans to
	// localhost:4318.
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	if err := sp.Start(cmd); err != nil {
		return nil, fmt.Errorf("start registry %s: %w", bin, err)
	}
	s := &Server{Addr: addr, logFile: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx); err != nil {
		_ = s.kill()
		return nil, err
	}
	return s, nil
}

// waitReady polls GET /v2/ until it answers 200, the process exits, or the deadline passes.
func (s *Server) waitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readyTimeout)
		defer cancel()
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: noProxyTransport()}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("GET /v2/ answered %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-s.done:
			tail := s.LogTail(20)
			err := fmt.Errorf("registry on %s exited before it was ready (%v); log %s ends:\n%s", s.Addr, s.waitErr, s.logFile, tail)
			if strings.Contains(tail, "address already in use") {
				err = fmt.Errorf("%w: %w", errAddrInUse, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("registry on %s not ready: %w (last: %v); log %s ends:\n%s", s.Addr, ctx.Err(), last, s.logFile, s.LogTail(20))
		case <-tick.C:
		}
	}
}

// Exited reports whether the registry process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, waits up to 10 s for the registry to drain and exit, then kills it.
// It is safe to call more than once.
func (s *Server) Stop() error {
	defer func() {
		if s.ownSp != nil {
			s.ownSp.Close()
		}
	}()
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(stopGrace):
		return s.kill()
	}
}

func (s *Server) kill() error {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("registry (pid %d) still running 5s after SIGKILL", s.cmd.Process.Pid)
	}
}

// LogTail returns the last n lines of the registry's log.
func (s *Server) LogTail(n int) string {
	data, err := os.ReadFile(s.logFile)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", s.logFile, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort returns a port on host that was free a moment ago, picked below the kernel's
// ephemeral range (where no connect() or bind(:0) of another process lands).
func freePort(host string) (int, error) {
	hi := ephemeralStart()
	if hi-lowestPort >= 1000 {
		for range 50 {
			p := lowestPort + rand.IntN(hi-lowestPort)
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a free port on %s (registry Options.Addr): %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

const lowestPort = 10000

func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
