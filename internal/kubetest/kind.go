package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prebake-dev/prebake/internal/kubetest/spawn"
)

// EnvKindImage overrides the kind node image (default kindest/node:<KubernetesVersion>).
const EnvKindImage = "PREBAKE_KIND_IMAGE"

// KindOptions configures a Kind cluster.
type KindOptions struct {
	// Name of the kind cluster; empty means "prebake-e2e".
	Name string
	// Image is the node image; empty means $PREBAKE_KIND_IMAGE or kindest/node:<KubernetesVersion>.
	// It must already be present in Docker: the backend never pulls.
	Image string
	// Dir holds the kubeconfig, kwok's log and its pid file.
	Dir string
	// Out receives progress lines; nil discards them.
	Out io.Writer
	// Kwok and KwokStages, when set, run kwok on the host against the kind cluster so that
	// AddNode works as in the hermetic backend. NewBackend fills them in from Build.
	Kwok, KwokStages string
}

// Kind is a cluster made by the kind CLI in Docker. It needs docker, a running daemon, the
// node image already present locally (nothing is pulled) and kind on PATH. Nodes added with
// AddNode are fake nodes run by a kwok process on the host; kind's own node is real.
type Kind struct {
	opts KindOptions
	dir  string

	mu      sync.Mutex // guards the fields below.
	sp      *spawn.Spawner
	kwok    *process
	created bool
}

// NewKind returns a Kind backend; call Available, then Start.
func NewKind(opts KindOptions) (*Kind, error) {
	dir, err := absDir("KindOptions.Dir", opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("kind cluster: %w", err)
	}
	if opts.Name == "" {
		opts.Name = "prebake-e2e"
	}
	if opts.Image == "" {
		opts.Image = os.Getenv(EnvKindImage)
	}
	if opts.Image == "" {
		opts.Image = "kindest/node:" + KubernetesVersion
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	return &Kind{opts: opts, dir: dir}, nil
}

// Available checks, cheapest first, that docker is on PATH, its daemon answers, the node
// image is present and kind is on PATH. The error wraps ErrBackendUnavailable and is one line.
func (k *Kind) Available(ctx context.Context) error {
	unavailable := func(format string, args ...any) error {
		return fmt.Errorf("%w: kind: %s; or use %s=%s", ErrBackendUnavailable, fmt.Sprintf(format, args...), EnvBackend, BackendHermetic)
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return unavailable("docker is not on PATH")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return unavailable("docker daemon not reachable (docker info: %s)", firstLine(out, err))
	}
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", k.opts.Image).CombinedOutput(); err != nil {
		return unavailable("node image %s is not present locally (docker image inspect: %s); load it with docker load or set %s",
			k.opts.Image, firstLine(out, err), EnvKindImage)
	}
	if _, err := exec.LookPath("kind"); err != nil {
		return unavailable("the kind CLI is not on PATH; install a release that supports %s (go install sigs.k8s.io/kind@v0.33.0 or newer)", k.opts.Image)
	}
	return nil
}

// Kubeconfig returns the path of the cluster's admin kubeconfig.
func (k *Kind) Kubeconfig() string { return filepath.Join(k.dir, "kind.kubeconfig") }

// RESTConfig returns the admin client configuration.
func (k *Kind) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", k.Kubeconfig())
}

// Start creates the kind cluster (waiting for its node to be Ready) and, when Kwok is set,
// starts kwok against it.
func (k *Kind) Start(ctx context.Context) (err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.Available(ctx); err != nil {
		return err
	}
	began := time.Now()
	for _, d := range []string{"logs", "pids"} {
		if err := os.MkdirAll(filepath.Join(k.dir, d), 0o755); err != nil {
			return fmt.Errorf("kind cluster: %w", err)
		}
	}
	if err := ReapStale(k.dir); err != nil {
		return fmt.Errorf("kind cluster: %w", err)
	}
	defer func() {
		if err != nil {
			tails := k.logTailsLocked(40)
			_ = k.stopLocked(context.WithoutCancel(ctx))
			err = fmt.Errorf("kind cluster: start failed: %w\n%s", err, tails)
		}
	}()
	fmt.Fprintf(k.opts.Out, "kind: creating cluster %s from %s\n", k.opts.Name, k.opts.Image)
	k.created = true // from here on, Stop must try to delete it.
	if err := k.kind(ctx, "create", "cluster", "--name", k.opts.Name, "--image", k.opts.Image,
		"--kubeconfig", k.Kubeconfig(), "--wait", "180s"); err != nil {
		return err
	}
	if k.opts.Kwok != "" {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		k.sp = spawn.New()
		k.kwok, err = startProcess(k.sp, compKwok, k.opts.Kwok, kwokArgs(k.Kubeconfig(), k.opts.KwokStages, addr),
			os.Environ(), filepath.Join(k.dir, "logs"), filepath.Join(k.dir, "pids"))
		if err != nil {
			return err
		}
		c := &http.Client{}
		defer c.CloseIdleConnections()
		if err := waitFor(ctx, "kwok /healthz", componentTimeout, k.kwok, func(ctx context.Context) error {
			return getOK(ctx, c, "http://"+addr+"/healthz", "")
		}); err != nil {
			return err
		}
	}
	fmt.Fprintf(k.opts.Out, "kind: cluster %s ready in %.1fs: KUBECONFIG=%s\n", k.opts.Name, time.Since(began).Seconds(), k.Kubeconfig())
	return nil
}

// Stop stops kwok and deletes the kind cluster.
func (k *Kind) Stop(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stopLocked(ctx)
}

func (k *Kind) stopLocked(ctx context.Context) error {
	var errs []error
	if k.kwok != nil {
		errs = append(errs, k.kwok.stop())
		k.kwok = nil
	}
	if k.sp != nil {
		k.sp.Close()
		k.sp = nil
	}
	if k.created {
		errs = append(errs, k.kind(ctx, "delete", "cluster", "--name", k.opts.Name, "--kubeconfig", k.Kubeconfig()))
		k.created = false
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kind cluster: stop: %w", err)
	}
	return nil
}

// LogTails returns the end of kwok's log and of the last kind command's output.
func (k *Kind) LogTails(n int) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.logTailsLocked(n)
}

func (k *Kind) logTailsLocked(n int) string {
	var b strings.Builder
	for _, name := range []string{"kind", compKwok} {
		path := filepath.Join(k.dir, "logs", name+".log")
		if tail, err := tailFile(path, n); err == nil {
			fmt.Fprintf(&b, "----- last %d lines of %s -----\n%s\n", n, path, tail)
		}
	}
	return b.String()
}

// AddNode creates a copy of node that kwok manages. It needs KindOptions.Kwok.
func (k *Kind) AddNode(ctx context.Context, node *corev1.Node) error {
	if k.opts.Kwok == "" {
		return errors.New("kind cluster: AddNode needs kwok; set KindOptions.Kwok and KwokStages (NewBackend does)")
	}
	cs, err := k.clientset()
	if err != nil {
		return err
	}
	return addFakeNode(ctx, cs, node)
}

// RemoveNode deletes a node; a missing node is not an error.
func (k *Kind) RemoveNode(ctx context.Context, name string) error {
	cs, err := k.clientset()
	if err != nil {
		return err
	}
	return removeNode(ctx, cs, name)
}

func (k *Kind) clientset() (kubernetes.Interface, error) {
	cfg, err := k.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kind cluster: load %s (is the cluster started?): %w", k.Kubeconfig(), err)
	}
	return kubernetes.NewForConfig(cfg)
}

// kind runs the kind CLI, appending its output to logs/kind.log.
func (k *Kind) kind(ctx context.Context, args ...string) error {
	logPath := filepath.Join(k.dir, "logs", "kind.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "$ kind %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "kind", args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kind %s: %w (output in %s)", strings.Join(args[:2], " "), err, logPath)
	}
	return nil
}

func firstLine(out []byte, err error) string {
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	if len(line) == 0 {
		return err.Error()
	}
	return string(line)
}
