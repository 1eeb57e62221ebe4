// Command demo is `make demo`: it brings up the hermetic control plane (building it the
// first time), runs `prebake serve` on examples/kwok.yaml against it, creates a few Pending
// pods and lets the e2e suite's stand-in for cluster-autoscaler scale them up, printing a
// live timeline and then the measured summary. Everything it started is stopped before it
// exits, also on Ctrl-C.
//
//	go run ./e2e/demo [-config examples/kwok.yaml] [-pods 4] [-cpu 700m]
//
// The machines are kwok Nodes: their boot time is SIMULATED (simulatedBoot in the config).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/deploy"
	"github.com/prebake-dev/prebake/e2e/serveproc"
	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/timeline"
	"github.com/prebake-dev/prebake/e2e/wait"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok"
)

const podNamespace = "demo"

func main() {
	os.Exit(run())
}

// clock prints lines prefixed with the time since the demo began; safe for concurrent use.
type clock struct {
	began time.Time
	mu    sync.Mutex // serialises lines
	out   io.Writer
}

func (c *clock) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, "[%8.3fs] %s\n", time.Since(c.began).Seconds(), fmt.Sprintf(format, args...))
}

// Write makes the clock an io.Writer for progress lines of the cluster build and start.
func (c *clock) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		c.printf("  %s", line)
	}
	return len(b), nil
}

func run() int {
	cfgFlag := flag.String("config", "", "ProviderConfig to serve (default examples/kwok.yaml of this checkout)")
	pods := flag.Int("pods", 4, "pending pods to create")
	cpu := flag.String("cpu", "700m", "CPU request of each pod (memory is 256Mi)")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after this long (the first run builds the control plane)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := &clock{began: time.Now(), out: os.Stdout}

	err := demo(ctx, c, *cfgFlag, *pods, *cpu)
	switch {
	case err == nil:
		c.printf("done: everything stopped")
		return 0
	case errors.Is(err, context.Canceled):
		c.printf("interrupted: everything stopped")
		return 130
	default:
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
}

func demo(ctx context.Context, c *clock, cfgPath string, pods int, cpu string) error {
	request, err := resource.ParseQuantity(cpu)
	if err != nil {
		return fmt.Errorf("-cpu %q: %w", cpu, err)
	}
	moduleDir, err := serveproc.ModuleDir(ctx)
	if err != nil {
		return err
	}
	if cfgPath == "" {
		cfgPath = filepath.Join(moduleDir, "examples", "kwok.yaml")
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	if cfg.Providers.Kwok == nil {
		return fmt.Errorf("%s has no kwok provider: the demo runs on kwok", cfgPath)
	}
	dir, err := os.MkdirTemp("", "prebake-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	c.printf("building prebake")
	bin, err := serveproc.Build(ctx, moduleDir, dir)
	if err != nil {
		return err
	}
	c.printf("bringing up the %s control plane (the first run builds it from Go modules: 5–20 min)", kubetest.BackendName())
	backend, err := kubetest.NewBackend(ctx, "", kubetest.Options{Dir: filepath.Join(dir, "cluster"), Out: c})
	if err != nil {
		return err
	}
	if err := backend.Start(ctx); err != nil {
		return err
	}
	defer func() {
		c.printf("stopping the control plane")
		if err := backend.Stop(context.Background()); err != nil {
			c.printf("stop: %v", err)
		}
	}()
	rc, err := backend.RESTConfig()
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	// The config is served as it is; its kubeconfig comes from $KUBECONFIG when it names none.
	env := []string{"KUBECONFIG=" + backend.Kubeconfig()}
	if cfg.Providers.Kwok.Kubeconfig != "" {
		c.printf("note: %s sets providers.kwok.kubeconfig; the demo cluster is used only if it points there", cfgPath)
	}
	// CA's expanders as deploy/base ships them, the price expander first:
	// prebake is told them, and the stand-in makes their calls.
	expander, err := deploy.CAExpander()
	if err != nil {
		return err
	}
	c.printf("starting prebake serve --config %s --ca-expander=%s", relTo(moduleDir, cfgPath), expander)
	serve, err := serveproc.Start(ctx, serveproc.Options{Binary: bin, Config: cfgPath, Dir: dir, Env: env, Args: []string{"--ca-expander=" + expander}})
	if err != nil {
		return err
	}
	defer func() {
		c.printf("stopping prebake serve (pid %d)", serve.PID())
		serve.Close()
	}()
	boot := cfg.Providers.Kwok.SimulatedBoot
	c.printf("prebake serves gRPC on %s; SIMULATED boot times from the config: prebaked %s, runtime install %s",
		serve.GRPCAddr(), boot.Prebaked.Duration, boot.RuntimeInstall.Duration)

	conn, err := grpc.NewClient(serve.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := standin.New(standin.Options{
		Conn: conn, Kube: kube, Namespace: podNamespace, Expander: expander,
		OnEvent: func(e standin.Event) { c.printf("%s", e) },
	})
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = s.Run(runCtx)
	}()
	defer func() {
		stopRun()
		<-runDone
	}()

	if err := createNamespace(ctx, kube); err != nil {
		return err
	}
	c.printf("creating %d pending pods (%s CPU, 256Mi each); the stand-in for cluster-autoscaler scales for them", pods, request.String())
	for i := range pods {
		if _, err := kube.CoreV1().Pods(podNamespace).Create(ctx, pod(fmt.Sprintf("web-%d", i), request), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod: %w", err)
		}
	}
	if err := waitRunning(ctx, kube, pods); err != nil {
		return err
	}
	c.printf("all %d pods Running", pods)

	created, err := createCalled(ctx, kube, cfg)
	if err != nil {
		return err
	}
	stats := timeline.Phases(s.Instances(), timeline.Extra{
		CreateCalled: created,
		Boot: map[string]time.Duration{
			string(providers.ImagePrebaked):       boot.Prebaked.Duration,
			string(providers.ImageRuntimeInstall): boot.RuntimeInstall.Duration,
		},
	})
	fmt.Printf("\nInputs (configured in %s, SIMULATED — not findings):\n  simulated boot, prebaked: %s\n  simulated boot, runtime install: %s\n",
		relTo(moduleDir, cfgPath), boot.Prebaked.Duration, boot.RuntimeInstall.Duration)
	fmt.Printf("\nMeasured (%d instances; stand-in for CA, not CA itself):\n\n%s", len(s.Instances()), timeline.Table(stats))
	return nil
}

func createNamespace(ctx context.Context, kube kubernetes.Interface) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", podNamespace, err)
	}
	// The ServiceAccount admission plugin refuses pods until the controller made "default".
	return wait.Poll(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ServiceAccounts(podNamespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

func pod(name string, cpu resource.Quantity) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podNamespace, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name:  "web",
				Image: "registry.invalid/web:demo", // kwok runs pods without pulling images
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    cpu,
					corev1.ResourceMemory: resource.MustParse("256Mi"),
				}},
			}},
		},
	}
}

func waitRunning(ctx context.Context, kube kubernetes.Interface, want int) error {
	err := wait.Poll(ctx, 10*time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		l, err := kube.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d pods Running: %w", want, err)
	}
	return nil
}

// createCalled reads when the kwok provider's Create ran for each machine, from its machine
// records (Leases; the annotation is the kwok provider's own).
func createCalled(ctx context.Context, kube kubernetes.Interface, cfg *config.Config) (map[string]time.Time, error) {
	l, err := kube.CoordinationV1().Leases(cfg.Providers.Kwok.Namespace).List(ctx, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + cfg.ClusterName})
	if err != nil {
		return nil, fmt.Errorf("read machine records: %w", err)
	}
	out := map[string]time.Time{}
	for _, le := range l.Items {
		if t, err := time.Parse(time.RFC3339Nano, le.Annotations[kwok.AnnotationRequestedAt]); err == nil {
			out[le.Annotations[kwok.AnnotationProviderID]] = t
		}
	}
	return out, nil
}

func relTo(base, path string) string {
	if rel, err := filepath.Rel(base, path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}
