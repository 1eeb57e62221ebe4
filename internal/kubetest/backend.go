package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// Backend is a Kubernetes cluster for e2e tests and the demo, in which kwok runs the nodes
// added with AddNode.
type Backend interface {
	// Start brings the cluster up and returns when it accepts pods.
	Start(ctx context.Context) error
	// Stop tears the cluster down and leaves no process behind. It is safe to call twice.
	Stop(ctx context.Context) error
	// Kubeconfig is the path of an admin kubeconfig, valid after Start.
	Kubeconfig() string
	// RESTConfig is the admin client configuration, valid after Start.
	RESTConfig() (*rest.Config, error)
	// AddNode creates a copy of node that kwok manages (it turns Ready and runs pods).
	AddNode(ctx context.Context, node *corev1.Node) error
	// RemoveNode deletes a node; a missing node is not an error.
	RemoveNode(ctx context.Context, name string) error
	// LogTails returns the last n lines of each component log, to print on failure.
	LogTails(n int) string
}

var (
	_ Backend = (*Hermetic)(nil)
	_ Backend = (*Kind)(nil)
)

// ErrBackendUnavailable means a backend cannot run on this machine (no go command, no Docker,
// no kind node image, …). The wrapping error says what is missing and what to do.
var ErrBackendUnavailable = errors.New("e2e cluster backend unavailable")

// Backend names accepted by NewBackend and PREBAKE_E2E_BACKEND.
const (
	BackendHermetic = "hermetic"
	BackendKind     = "kind"
)

// EnvBackend selects the backend; empty means BackendHermetic.
const EnvBackend = "PREBAKE_E2E_BACKEND"

// BackendName returns the backend selected by PREBAKE_E2E_BACKEND, or "hermetic".
func BackendName() string {
	if name := os.Getenv(EnvBackend); name != "" {
		return name
	}
	return BackendHermetic
}

// Options configures NewBackend.
type Options struct {
	// Dir is the cluster's work directory (certificates, logs, pid files, kubeconfig).
	Dir string
	// Out receives progress lines of the build and start; nil discards them.
	Out io.Writer
	// Build says where the binaries are cached. Its Out defaults to Options.Out.
	Build BuildOptions
	// Kind configures the kind backend; Dir, Out and Kwok are filled in by NewBackend.
	Kind KindOptions
	// Scheduler tunes the hermetic backend's kube-scheduler; the kind backend refuses
	// anything but the zero value.
	Scheduler SchedulerOptions
}

// NewBackend returns a stopped backend by name ("" means BackendName()). For "hermetic" it
// builds or reuses the control-plane binaries first; for "kind" it checks Docker, the node
// image and the kind CLI first. When the machine lacks a prerequisite, the error wraps
// ErrBackendUnavailable.
func NewBackend(ctx context.Context, name string, opts Options) (Backend, error) {
	if name == "" {
		name = BackendName()
	}
	if opts.Dir == "" {
		return nil, errors.New("cluster.NewBackend: Options.Dir is empty; pass a work directory such as t.TempDir()")
	}
	if opts.Build.Out == nil {
		opts.Build.Out = opts.Out
	}
	switch name {
	case BackendHermetic:
		bins, err := Build(ctx, opts.Build)
		if err != nil {
			return nil, err
		}
		return NewHermetic(HermeticOptions{Binaries: bins, Dir: opts.Dir, Out: opts.Out, Scheduler: opts.Scheduler})
	case BackendKind:
		if opts.Scheduler != (SchedulerOptions{}) {
			return nil, errors.New("cluster.NewBackend: Options.Scheduler is only for the hermetic backend; kind runs its own kube-scheduler (leave Options.Scheduler empty, or unset " + EnvBackend + ")")
		}
		ko := opts.Kind
		ko.Dir, ko.Out = opts.Dir, opts.Out
		k, err := NewKind(ko)
		if err != nil {
			return nil, err
		}
		if err := k.Available(ctx); err != nil {
			return nil, err
		}
		// kwok runs on the host against kind's API server; only it is needed from the build.
		bins, err := Build(ctx, opts.Build)
		if err != nil {
			return nil, err
		}
		k.opts.Kwok, k.opts.KwokStages = bins.Kwok, bins.KwokStages
		return k, nil
	default:
		return nil, fmt.Errorf("cluster.NewBackend: unknown backend %q (from %s?); use %q or %q",
			name, EnvBackend, BackendHermetic, BackendKind)
	}
}

// SkipIfUnavailable ends a test whose backend could not be made: when err wraps
// ErrBackendUnavailable it skips with one line, except under CI=true, where a missing
// prerequisite is a failure. Any other non-nil error fails the test.
// It takes the few methods it needs of testing.TB, so this non-test package
// doesn't link the testing package into the demo binary.
func SkipIfUnavailable(tb TB, err error) {
	tb.Helper()
	switch {
	case err == nil:
	case errors.Is(err, ErrBackendUnavailable) && os.Getenv("CI") != "true":
		tb.Skip(err)
	default:
		tb.Fatal(err)
	}
}

// TB is the part of testing.TB that SkipIfUnavailable uses.
type TB interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// absDir is filepath.Abs with an error that names the option.
func absDir(option, dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%s is empty; pass a work directory such as t.TempDir()", option)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", option, err)
	}
	return abs, nil
}
