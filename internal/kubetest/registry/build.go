package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DistributionVersion is the github.com/distribution/distribution/v3 release BuildServer
// builds: the newest on the Go module proxy when this was written whose go.mod (go 1.26.0)
// builds with the project's Go 1.26.8.
const DistributionVersion = "v3.1.2"

const (
	distributionModule = "github.com/distribution/distribution/v3"
	registryCommand    = distributionModule + "/cmd/registry"
)

// ErrUnavailable wraps errors that mean a prerequisite is missing on this machine (no go
// command, no module proxy, no apt-get or dpkg-deb, no busybox-static package), as opposed
// to a bug. Tests skip on it, except under CI=true.
var ErrUnavailable = errors.New("prerequisite unavailable")

// BuildOptions configures BuildServer and BuildPause.
type BuildOptions struct {
	// CacheDir is the root of the cache; empty means DefaultCacheDir().
	CacheDir string
	// Out receives progress lines; nil discards them.
	Out io.Writer
	// Heartbeat is the interval of "still compiling" lines during go build; 0 means 15 s.
	Heartbeat time.Duration
}

// DefaultCacheDir is $XDG_CACHE_HOME/prebake/registry, falling back to ~/.cache when
// XDG_CACHE_HOME is unset.
func DefaultCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory (set XDG_CACHE_HOME or HOME): %w", err)
	}
	return filepath.Join(base, "prebake", "registry"), nil
}

func (o BuildOptions) withDefaults() (BuildOptions, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.CacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return o, err
		}
		o.CacheDir = dir
	}
	dir, err := filepath.Abs(o.CacheDir)
	if err != nil {
		return o, fmt.Errorf("BuildOptions.CacheDir: %w", err)
	}
	o.CacheDir = dir
	return o, nil
}

// serverStamp is what a complete BuildServer writes last; a different content (another
// version of this code) means rebuild.
var serverStamp = fmt.Sprintf("prebake registry server\n%s %s\nCGO_ENABLED=0 -trimpath\n", distributionModule, DistributionVersion)

// BuildServer makes the registry server binary, distribution's cmd/registry at
// DistributionVersion, in <CacheDir>/<DistributionVersion>/registry, through a wrapper module
// in <CacheDir>/<DistributionVersion>/work, or reuses what a previous complete build left
// there (its stamp file matches). It never touches the caller's module: distribution is not a
// dependency of prebake. It uses the caller's GOCACHE, GOMODCACHE and GOPROXY, prints
// progress to opts.Out from the first second, logs the go commands to build.log beside the
// binary, and holds a lock so concurrent builds wait for each other.
func BuildServer(ctx context.Context, opts BuildOptions) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	b, err := newBuilder(ctx, opts, filepath.Join(opts.CacheDir, DistributionVersion))
	if err != nil {
		return "", err
	}
	defer b.close()
	bin := filepath.Join(b.dir, "registry")
	if b.stampMatches(serverStamp) && checkExecutable(bin) == nil {
		b.logf("reusing registry server %s in %s", DistributionVersion, bin)
		return bin, nil
	}
	if err := b.requireGo(); err != nil {
		return "", err
	}
	b.logf("building registry server (%s@%s) into %s (cold: minutes on 2 cores; details in %s)",
		registryCommand, DistributionVersion, bin, b.logPath())
	if err := b.openLog(); err != nil {
		return "", err
	}
	work := filepath.Join(b.dir, "work")
	if err := writeWrapper(work, "module prebake.local/registrybin\n\ngo 1.26.0\n"); err != nil {
		return "", err
	}
	b.logf("go get -tool %s@%s (resolves its modules)", registryCommand, DistributionVersion)
	if err := b.goCmd(ctx, work, nil, "get", "-tool", registryCommand+"@"+DistributionVersion); err != nil {
		return "", err
	}
	ldflags := "-s -w -X " + distributionModule + "/version.version=" + DistributionVersion
	b.logf("go build registry (the long step)")
	if err := b.goBuild(ctx, work, nil, "build", "-trimpath", "-ldflags", ldflags, "-o", bin+".tmp", registryCommand); err != nil {
		return "", err
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", fmt.Errorf("build registry: %w", err)
	}
	if err := b.writeStamp(serverStamp); err != nil {
		return "", err
	}
	b.logf("registry server ready: %s", bin)
	return bin, nil
}

// builder is one build in one cache directory, holding its lock.
type builder struct {
	dir       string
	out       io.Writer
	began     time.Time
	heartbeat time.Duration
	log       *os.File
	unlock    func()
}

func newBuilder(ctx context.Context, opts BuildOptions, dir string) (*builder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cache dir (BuildOptions.CacheDir): %w", err)
	}
	b := &builder{dir: dir, out: opts.Out, began: time.Now(), heartbeat: opts.Heartbeat}
	unlock, err := b.lock(ctx)
	if err != nil {
		return nil, err
	}
	b.unlock = unlock
	return b, nil
}

func (b *builder) close() {
	if b.log != nil {
		b.log.Close()
	}
	b.unlock()
}

func (b *builder) logPath() string   { return filepath.Join(b.dir, "build.log") }
func (b *builder) stampPath() string { return filepath.Join(b.dir, "stamp") }

func (b *builder) logf(format string, args ...any) {
	fmt.Fprintf(b.out, "[%4.0fs] registry build: %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

func (b *builder) stampMatches(want string) bool {
	got, err := os.ReadFile(b.stampPath())
	return err == nil && string(got) == want
}

func (b *builder) writeStamp(content string) error {
	if err := writeFileAtomic(b.stampPath(), []byte(content), 0o644); err != nil {
		return fmt.Errorf("write stamp: %w", err)
	}
	return nil
}

func (b *builder) requireGo() error {
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("%w: the go command is not on PATH; install Go 1.26 to build the registry images", ErrUnavailable)
	}
	return nil
}

// openLog truncates build.log and removes the stamp: from here on the cache is incomplete
// until writeStamp.
func (b *builder) openLog() error {
	if err := os.Remove(b.stampPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("build: %w", err)
	}
	f, err := os.Create(b.logPath())
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	b.log = f
	return nil
}

// lock takes an exclusive flock on <dir>/.lock, polling so ctx can cancel the wait.
func (b *builder) lock(ctx context.Context) (func(), error) {
	path := filepath.Join(b.dir, ".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build: open lock file: %w", err)
	}
	told := false
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("build: lock %s: %w", path, err)
		}
		if !told {
			b.logf("another build holds %s; waiting for it", path)
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("build: waiting for lock %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}

// goCmd runs a go command in dir with the caller's environment plus CGO_ENABLED=0 and
// GOWORK=off (and extraEnv), output to build.log; on failure the error carries the output's
// tail. A go command that fails to reach the module proxy is ErrUnavailable.
func (b *builder) goCmd(ctx context.Context, dir string, extraEnv []string, args ...string) error {
	var tail tailBuffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off"), extraEnv...)
	var out io.Writer = &tail
	if b.log != nil {
		fmt.Fprintf(b.log, "\n$ cd %s && go %s\n", dir, strings.Join(args, " "))
		out = io.MultiWriter(b.log, &tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		text := tail.String()
		wrap := ""
		if isProxyFailure(text) {
			wrap = " (is the Go module proxy reachable? check GOPROXY)"
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return fmt.Errorf("build: go %s in %s: %w%s\n%s\n(full output in %s)",
			strings.Join(args, " "), dir, err, wrap, text, b.logPath())
	}
	return nil
}

func isProxyFailure(out string) bool {
	for _, s := range []string{"dial tcp", "no such host", "proxyconnect", "connection refused", "i/o timeout", "TLS handshake timeout"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// goBuild is goCmd with a progress line every heartbeat: a cold go build is silent for
// minutes.
func (b *builder) goBuild(ctx context.Context, dir string, extraEnv []string, args ...string) error {
	started := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(b.heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				b.logf("  still compiling (go build running %.0fs)", time.Since(started).Seconds())
			}
		}
	})
	err := b.goCmd(ctx, dir, extraEnv, args...)
	close(stop)
	wg.Wait()
	if err == nil {
		b.logf("  go build done in %.0fs", time.Since(started).Seconds())
	}
	return err
}

// writeWrapper (re)creates a wrapper module directory with a fresh go.mod and no go.sum.
func writeWrapper(dir, gomod string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, "go.sum")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("build: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	return nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// tailBuffer keeps the last 30 lines written to it.
type tailBuffer struct {
	mu    sync.Mutex // exec may write stdout and stderr from two goroutines
	lines []string
	part  string
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := strings.Split(t.part+string(p), "\n")
	t.part = parts[len(parts)-1]
	t.lines = append(t.lines, parts[:len(parts)-1]...)
	if over := len(t.lines) - 30; over > 0 {
		t.lines = t.lines[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := strings.Join(t.lines, "\n")
	if t.part != "" {
		out += "\n" + t.part
	}
	return out
}
