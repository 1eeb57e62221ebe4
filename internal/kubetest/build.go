package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Versions of the control plane that Build produces. The cache directory is keyed by
// KubernetesVersion; the stamp file records all three.
const (
	KubernetesVersion = "v1.35.4"
	EtcdVersion       = "v3.6.16"
	KwokVersion       = "v0.8.0"
)

// Staging modules (k8s.io/api, …) are published as v0.<minor>.<patch> of KubernetesVersion.
var stagingVersion = "v0" + strings.TrimPrefix(KubernetesVersion, "v1")

// k8sCommands are built in ONE go build: on 2 cores that is ≈ 2.8× faster than one at a time,
// because linking overlaps with compiling.
var k8sCommands = []string{
	"k8s.io/kubernetes/cmd/kube-apiserver",
	"k8s.io/kubernetes/cmd/kube-scheduler",
	"k8s.io/kubernetes/cmd/kube-controller-manager",
}

const (
	kubectlCommand = "k8s.io/kubernetes/cmd/kubectl"
	etcdMain       = "go.etcd.io/etcd/server/v3" // etcd's main package is its module root.
	kwokCommand    = "sigs.k8s.io/kwok/cmd/kwok"
	kwokModule     = "sigs.k8s.io/kwok"
)

// kwokStageFiles are kwok's stock "fast" stages, relative to its module directory. Stand-alone
// kwok exits with "no stages found" without them.
var kwokStageFiles = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// BuildOptions configures Build.
type BuildOptions struct {
	// CacheDir holds the binaries; empty means DefaultCacheDir().
	CacheDir string
	// Out receives progress lines; nil discards them.
	Out io.Writer
	// Heartbeat is the interval of "still building" lines during go build; 0 means 30 s.
	Heartbeat time.Duration
}

// Binaries are absolute paths of the control-plane executables and kwok's stage file.
type Binaries struct {
	Dir                   string // the cache directory they live in
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Etcd                  string
	Kwok                  string
	// Kubectl is the kubectl on PATH when there is one, else one built with the rest.
	Kubectl string
	// KwokStages is the concatenated stage definitions passed to kwok --config.
	KwokStages string
}

// DefaultCacheDir is $XDG_CACHE_HOME/prebake/k8s/<KubernetesVersion>, falling back to
// ~/.cache when XDG_CACHE_HOME is unset.
func DefaultCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory (set XDG_CACHE_HOME or HOME): %w", err)
	}
	return filepath.Join(base, "prebake", "k8s", KubernetesVersion), nil
}

func binariesIn(dir string) Binaries {
	bin := filepath.Join(dir, "bin")
	b := Binaries{
		Dir:                   dir,
		KubeAPIServer:         filepath.Join(bin, "kube-apiserver"),
		KubeControllerManager: filepath.Join(bin, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(bin, "kube-scheduler"),
		Etcd:                  filepath.Join(bin, "etcd"),
		Kwok:                  filepath.Join(bin, "kwok"),
		Kubectl:               filepath.Join(bin, "kubectl"),
		KwokStages:            filepath.Join(dir, "kwok-stages.yaml"),
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			b.Kubectl = abs
		}
	}
	return b
}

// check reports the first missing or non-executable control-plane binary. Kubectl is not
// checked: the control plane does not need it.
func (b Binaries) check() error {
	for _, f := range []struct{ name, path string }{
		{"kube-apiserver", b.KubeAPIServer},
		{"kube-controller-manager", b.KubeControllerManager},
		{"kube-scheduler", b.KubeScheduler},
		{"etcd", b.Etcd},
		{"kwok", b.Kwok},
	} {
		if err := checkExecutable(f.path); err != nil {
			return fmt.Errorf("%s binary: %w (run cluster.Build to make it)", f.name, err)
		}
	}
	if st, err := os.Stat(b.KwokStages); err != nil || st.Size() == 0 {
		return fmt.Errorf("kwok stages file %q is missing or empty (run cluster.Build to make it)", b.KwokStages)
	}
	return nil
}

func checkExecutable(path string) error {
	if path == "" {
		return errors.New("no path")
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// stampContent is what a complete build writes to <cache>/stamp. A different content (another
// version of this code) means rebuild.
var stampContent = fmt.Sprintf("prebake e2e control plane\nkubernetes %s\netcd %s\nkwok %s\n",
	KubernetesVersion, EtcdVersion, KwokVersion)

// withDefaults fills in Out, Heartbeat and CacheDir, and returns the cache
// directory as an absolute path.
func (opts BuildOptions) withDefaults() (BuildOptions, string, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 30 * time.Second
	}
	if opts.CacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return opts, "", err
		}
		opts.CacheDir = dir
	}
	dir, err := filepath.Abs(opts.CacheDir)
	return opts, dir, err
}

// Build makes the control-plane binaries in opts.CacheDir, or reuses them when a previous
// complete build left them there. A cold build takes 5–20 minutes on 2 cores; a rebuild with
// a warm Go build cache takes seconds. It uses the caller's GOCACHE and GOMODCACHE, needs the
// go command on PATH and the Go module proxy, and holds a lock file so that concurrent
// Builds of the same CacheDir wait for each other.
func Build(ctx context.Context, opts BuildOptions) (Binaries, error) {
	began := time.Now()
	opts, dir, err := opts.withDefaults()
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return Binaries{}, fmt.Errorf("build: create cache dir: %w", err)
	}
	b := &builder{dir: dir, out: opts.Out, began: began, heartbeat: opts.Heartbeat}

	unlock, err := b.lock(ctx)
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()

	bins := binariesIn(dir)
	if b.complete(bins) {
		b.logf("reusing control-plane binaries in %s", dir)
		return bins, nil
	}
	if _, err := exec.LookPath("go"); err != nil {
		return Binaries{}, fmt.Errorf("%w: the go command is not on PATH; install Go to build the control plane", ErrBackendUnavailable)
	}
	b.logf("building Kubernetes %s, etcd %s, kwok %s into %s (cold: 5–20 min on 2 cores; details in %s)",
		KubernetesVersion, EtcdVersion, KwokVersion, dir, b.logPath())
	if err := os.Remove(b.stampPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Binaries{}, fmt.Errorf("build: %w", err)
	}
	buildLog, err := os.Create(b.logPath())
	if err != nil {
		return Binaries{}, fmt.Errorf("build: %w", err)
	}
	defer buildLog.Close()
	b.log = buildLog

	_, kubectlErr := exec.LookPath("kubectl")
	if err := b.buildKubernetes(ctx, kubectlErr != nil); err != nil {
		return Binaries{}, err
	}
	if err := b.buildEtcd(ctx); err != nil {
		return Binaries{}, err
	}
	if err := b.buildKwok(ctx); err != nil {
		return Binaries{}, err
	}
	if err := b.writeStages(ctx, bins.KwokStages); err != nil {
		return Binaries{}, err
	}
	bins = binariesIn(dir)
	if err := bins.check(); err != nil {
		return Binaries{}, fmt.Errorf("build finished but %w", err)
	}
	if err := checkExecutable(bins.Kubectl); err != nil {
		return Binaries{}, fmt.Errorf("build finished but kubectl: %w", err)
	}
	if err := writeFileAtomic(b.stampPath(), []byte(stampContent)); err != nil {
		return Binaries{}, fmt.Errorf("build: write stamp: %w", err)
	}
	b.logf("control-plane binaries ready in %s", filepath.Join(dir, "bin"))
	return bins, nil
}

// builder is one Build; it is used by one goroutine at a time.
type builder struct {
	dir       string
	out       io.Writer
	log       *os.File // build.log: the output of every go command
	began     time.Time
	heartbeat time.Duration
	logName   string // the build log's file name in dir; "" means build.log
}

func (b *builder) stampPath() string { return filepath.Join(b.dir, "stamp") }
func (b *builder) logPath() string {
	if b.logName != "" {
		return filepath.Join(b.dir, b.logName)
	}
	return filepath.Join(b.dir, "build.log")
}
func (b *builder) binDir() string { return filepath.Join(b.dir, "bin") }
func (b *builder) workDir(name string) string {
	return filepath.Join(b.dir, "work", name)
}

func (b *builder) logf(format string, args ...any) {
	fmt.Fprintf(b.out, "[%4.0fs] build: %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

// lock takes an exclusive flock on <cache>/.lock, polling so ctx can cancel the wait.
func (b *builder) lock(ctx context.Context) (unlock func(), err error) {
	return b.lockFile(ctx, ".lock")
}

// lockFile takes an exclusive flock on <cache>/<name>, polling so ctx can cancel the wait.
func (b *builder) lockFile(ctx context.Context, name string) (unlock func(), err error) {
	path := filepath.Join(b.dir, name)
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

// complete reports whether a previous build finished here: the stamp matches and every
// binary is executable.
func (b *builder) complete(bins Binaries) bool {
	stamp, err := os.ReadFile(b.stampPath())
	if err != nil || string(stamp) != stampContent {
		return false
	}
	return bins.check() == nil && checkExecutable(bins.Kubectl) == nil
}

func (b *builder) buildKubernetes(ctx context.Context, withKubectl bool) error {
	work := b.workDir("k8s")
	b.logf("kubernetes: locating k8s.io/kubernetes@%s", KubernetesVersion)
	mod, err := b.downloadModule(ctx, "k8s.io/kubernetes@"+KubernetesVersion)
	if err != nil {
		return err
	}
	upstream, err := os.ReadFile(mod.GoMod)
	if err != nil {
		return fmt.Errorf("build: read kubernetes go.mod: %w", err)
	}
	gomod, err := k8sWrapperGoMod(upstream, KubernetesVersion, stagingVersion)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if err := writeWrapper(work, gomod); err != nil {
		return err
	}
	cmds := slices.Clone(k8sCommands)
	if withKubectl {
		b.logf("kubernetes: kubectl is not on PATH, building it too")
		cmds = append(cmds, kubectlCommand)
	}
	pinned := make([]string, len(cmds))
	for i, c := range cmds {
		// Without the pin, go get moves k8s.io/kubernetes to the newest release and fails.
		pinned[i] = c + "@" + KubernetesVersion
	}
	b.logf("kubernetes: go get -tool (resolves ~190 modules)")
	if err := b.goCmd(ctx, work, append([]string{"get", "-tool"}, pinned...)...); err != nil {
		return err
	}
	ldflags := k8sLdflags()
	b.logf("kubernetes: go build %s (the long step)", strings.Join(baseNames(cmds), " "))
	return b.goBuild(ctx, work, append([]string{"build", "-ldflags", ldflags, "-o", b.binDir() + "/"}, cmds...)...)
}

// k8sLdflags stamps the version into Kubernetes binaries the way upstream's build does, so
// `--version` and the version each component reports are KubernetesVersion.
func k8sLdflags() string {
	minor := strings.Split(strings.TrimPrefix(KubernetesVersion, "v"), ".")[1]
	return strings.Join([]string{
		"-s -w",
		"-X k8s.io/component-base/version.gitVersion=" + KubernetesVersion,
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=" + minor,
		"-X k8s.io/component-base/version.gitTreeState=clean",
		"-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z",
	}, " ")
}

func (b *builder) buildEtcd(ctx context.Context) error {
	work := b.workDir("etcd")
	if err := writeWrapper(work, "module hermetic/etcdbin\n\ngo 1.26.0\n"); err != nil {
		return err
	}
	b.logf("etcd: go get -tool %s@%s", etcdMain, EtcdVersion)
	if err := b.goCmd(ctx, work, "get", "-tool", etcdMain+"@"+EtcdVersion); err != nil {
		return err
	}
	b.logf("etcd: go build")
	return b.goBuild(ctx, work, "build", "-ldflags", "-s -w", "-o", filepath.Join(b.binDir(), "etcd"), etcdMain)
}

func (b *builder) buildKwok(ctx context.Context) error {
	work := b.workDir("kwok")
	// kwok needs k8s.io v0.36 libraries, so it cannot share the kubernetes wrapper.
	if err := writeWrapper(work, "module hermetic/kwokbin\n\ngo 1.26.0\n"); err != nil {
		return err
	}
	b.logf("kwok: go get -tool %s@%s", kwokCommand, KwokVersion)
	if err := b.goCmd(ctx, work, "get", "-tool", kwokCommand+"@"+KwokVersion); err != nil {
		return err
	}
	b.logf("kwok: go build")
	return b.goBuild(ctx, work, "build", "-ldflags", "-s -w", "-o", filepath.Join(b.binDir(), "kwok"), kwokCommand)
}

// writeStages concatenates kwok's stock fast stages from its module directory.
func (b *builder) writeStages(ctx context.Context, dst string) error {
	mod, err := b.downloadModule(ctx, kwokModule+"@"+KwokVersion)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# kwok %s stock stages, concatenated by prebake's kubetest.Build.\n", KwokVersion)
	for _, rel := range kwokStageFiles {
		data, err := os.ReadFile(filepath.Join(mod.Dir, rel))
		if err != nil {
			return fmt.Errorf("build: kwok stage file: %w (did kwok %s rename its kustomize/stage files?)", err, KwokVersion)
		}
		fmt.Fprintf(&buf, "---\n# %s\n", rel)
		buf.Write(bytes.TrimLeft(bytes.TrimPrefix(data, []byte("---\n")), "\n"))
		if !bytes.HasSuffix(data, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	if err := writeFileAtomic(dst, buf.Bytes()); err != nil {
		return fmt.Errorf("build: write kwok stages: %w", err)
	}
	b.logf("kwok: %d stock stages written to %s", len(kwokStageFiles), dst)
	return nil
}

type moduleInfo struct {
	Dir, GoMod, Error string
}

func (b *builder) downloadModule(ctx context.Context, modAtVersion string) (moduleInfo, error) {
	// Run outside any module so the download does not depend on a wrapper's state.
	dir := filepath.Join(b.dir, "work")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return moduleInfo{}, err
	}
	var stdout bytes.Buffer
	cmd := b.command(ctx, dir, "mod", "download", "-json", modAtVersion)
	cmd.Stdout = &stdout
	runErr := cmd.Run()
	var info moduleInfo
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil && runErr == nil {
		return moduleInfo{}, fmt.Errorf("build: go mod download %s: parse output: %w", modAtVersion, err)
	}
	if runErr != nil || info.Error != "" {
		return moduleInfo{}, fmt.Errorf("build: go mod download %s: %v %s (is the Go module proxy reachable? see %s)",
			modAtVersion, runErr, info.Error, b.logPath())
	}
	return info, nil
}

// command is a go command with the caller's environment (so GOCACHE, GOMODCACHE, GOPROXY and
// GOFLAGS are shared) plus CGO_ENABLED=0, which the whole build uses so the Go build cache
// entries match, and GOWORK=off so no go.work above the cache dir interferes.
func (b *builder) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	cmd.Stdout, cmd.Stderr = b.log, b.log
	// If we die, so does the go command; a compiler it started may finish its package first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	fmt.Fprintf(b.log, "\n$ cd %s && go %s\n", dir, strings.Join(args, " "))
	return cmd
}

// goCmd runs a go command and, on failure, returns an error with the end of its output.
func (b *builder) goCmd(ctx context.Context, dir string, args ...string) error {
	var tail tailBuffer
	cmd := b.command(ctx, dir, args...)
	cmd.Stdout = io.MultiWriter(b.log, &tail)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build: go %s in %s: %w\n%s\n(full output in %s)",
			strings.Join(args, " "), dir, err, tail.String(), b.logPath())
	}
	return nil
}

// goBuild is goCmd with a heartbeat line every b.heartbeat, since a cold go build of
// kube-apiserver is silent for minutes.
func (b *builder) goBuild(ctx context.Context, dir string, args ...string) error {
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
	err := b.goCmd(ctx, dir, args...)
	close(stop)
	wg.Wait()
	if err == nil {
		b.logf("  go build done in %.0fs", time.Since(started).Seconds())
	}
	return err
}

// k8sWrapperGoMod returns the go.mod of a module that requires k8s.io/kubernetes at version
// and replaces every staging module (k8s.io/<x> => ./staging/... upstream) with its published
// stagingVersion. Upstream's go and godebug lines are kept so the binaries get the same
// defaults as an upstream build.
func k8sWrapperGoMod(upstream []byte, version, stagingVersion string) (string, error) {
	var goLine string
	var godebug, staging []string
	sc := bufio.NewScanner(bytes.NewReader(upstream))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "go ") && goLine == "":
			goLine = line
		case strings.HasPrefix(line, "godebug "):
			godebug = append(godebug, line)
		default:
			if m := stagingReplace.FindStringSubmatch(line); m != nil {
				staging = append(staging, m[1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if goLine == "" || len(staging) == 0 {
		return "", fmt.Errorf("k8s.io/kubernetes@%s go.mod has no go line or no staging replaces; the wrapper recipe needs updating", version)
	}
	var b strings.Builder
	b.WriteString("module hermetic/k8sbins\n\n" + goLine + "\n\n")
	for _, g := range godebug {
		b.WriteString(g + "\n\n")
	}
	fmt.Fprintf(&b, "require k8s.io/kubernetes %s\n\nreplace (\n", version)
	for _, m := range staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, stagingVersion)
	}
	b.WriteString(")\n")
	return b.String(), nil
}

var stagingReplace = regexp.MustCompile(`^(k8s\.io/[a-z0-9-]+) => \./staging/`)

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

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func baseNames(pkgs []string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = filepath.Base(p)
	}
	return out
}

// tailBuffer keeps the last 40 lines written to it.
type tailBuffer struct {
	mu    sync.Mutex // guards lines; exec may write stdout and stderr from two goroutines.
	lines []string
	part  string
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	t.lines = append(t.lines, parts[:len(parts)-1]...)
	if over := len(t.lines) - 40; over > 0 {
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
