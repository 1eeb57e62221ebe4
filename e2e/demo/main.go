// Command demo is `make demo`: it brings up the hermetic control plane (building it the
// first time), runs `prebake serve` on examples/kwok.yaml against it, creates a few Pending
// pods and lets the e2e suite's stand-in for cluster-autoscaler scale them up, printing a
// live timeline and then the measured summary. Everything it started is stopped before it
// exits, also on Ctrl-C.
//
//	go run ./e2e/demo [-config examples/kwok.yaml] [-pods 4] [-cpu 700m] [-system-node=true]
//	go run ./e2e/demo -hold                  # then keep the cluster: run `prebake timeline` against it yourself
//	go run ./e2e/demo -compare [-pods 8]     # node Ready → pod Running: no Nodes vs tuned backoff vs system Node
//
// At the end of a scale-up it runs `prebake timeline --since 10m` (the binary it built) on
// the cluster and prints the report: the demo's nodes, every phase it can know, kwok's
// marked SIMULATED. With -hold the cluster and prebake serve stay up until Ctrl-C, and the
// demo prints the KUBECONFIG to point `prebake timeline` at.
//
// The cluster gets one tainted Node that no node group owns (kubetest.SystemNode), as every
// cluster that runs cluster-autoscaler in it has; see docs/performance.md for why the
// scheduler needs it.
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
	"os/exec"
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
	"github.com/prebake-dev/prebake/nodetimeline"
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
	systemNode := flag.Bool("system-node", true, "add a tainted Node no group owns ("+kubetest.SystemNodeName+"), as every cluster that runs CA in it has; false leaves the cluster without Nodes, where kube-scheduler retries pods only on its backoff (docs/performance.md)")
	initBackoff := flag.Duration("scheduler-initial-backoff", 0, "kube-scheduler's podInitialBackoffSeconds, whole seconds (0: its default, 1s)")
	maxBackoff := flag.Duration("scheduler-max-backoff", 0, "kube-scheduler's podMaxBackoffSeconds, whole seconds (0: its default, 10s)")
	schedV := flag.Int("scheduler-v", 0, "kube-scheduler's -v (4: every attempt and why it failed, 5: also every queue move); implies -keep")
	keep := flag.Bool("keep", false, "keep the work directory, with the component logs, and print its path")
	hold := flag.Bool("hold", false, "after the scale-up and its `prebake timeline` report, keep the cluster and prebake serve running until Ctrl-C, and print the KUBECONFIG to run `prebake timeline` against it")
	compare := flag.Bool("compare", false, "run the scale-up three times, each on a fresh cluster (no Nodes with the scheduler's defaults; no Nodes with 1s backoff; the system Node with the defaults), and print node Ready → pod Running side by side; -system-node and -scheduler-*-backoff are then ignored")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := &clock{began: time.Now(), out: os.Stdout}

	o := demoOptions{config: *cfgFlag, pods: *pods, cpu: *cpu, keep: *keep || *schedV > 0, compare: *compare, hold: *hold,
		round: roundOptions{
			systemNode: *systemNode,
			scheduler:  kubetest.SchedulerOptions{Verbosity: *schedV, PodInitialBackoff: *initBackoff, PodMaxBackoff: *maxBackoff},
		}}
	err := demo(ctx, c, o)
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

type demoOptions struct {
	config  string
	pods    int
	cpu     string
	keep    bool
	compare bool
	hold    bool
	round   roundOptions
}

// roundOptions shape the cluster of one scale-up.
type roundOptions struct {
	name       string // the round's work subdirectory and, with -compare, its row
	systemNode bool
	scheduler  kubetest.SchedulerOptions
	// report runs `prebake timeline` at the end; hold then waits for Ctrl-C before
	// stopping anything.
	report, hold bool
}

// compareRounds are -compare's variants: the cluster the demo had before the system Node,
// the scheduler knob that shortens its wait, and the system Node.
func compareRounds(verbosity int) []roundOptions {
	return []roundOptions{
		{name: "no Nodes, scheduler defaults (backoff 1s doubling to 10s)", scheduler: kubetest.SchedulerOptions{Verbosity: verbosity}},
		{name: "no Nodes, podInitialBackoffSeconds: 1, podMaxBackoffSeconds: 1", scheduler: kubetest.SchedulerOptions{
			Verbosity: verbosity, PodInitialBackoff: time.Second, PodMaxBackoff: time.Second}},
		{name: "system Node, scheduler defaults", systemNode: true, scheduler: kubetest.SchedulerOptions{Verbosity: verbosity}},
	}
}

// demoEnv is what every round shares.
type demoEnv struct {
	moduleDir, cfgPath, bin, dir string
	cfg                          *config.Config
	pods                         int
	request                      resource.Quantity
	expander                     string
}

// roundResult is what one scale-up measured.
type roundResult struct {
	stats     []timeline.Stat
	instances int
	// readyToRunning has one sample per pod: its node seen Ready → it seen Running.
	readyToRunning []time.Duration
}

func demo(ctx context.Context, c *clock, o demoOptions) error {
	request, err := resource.ParseQuantity(o.cpu)
	if err != nil {
		return fmt.Errorf("-cpu %q: %w", o.cpu, err)
	}
	moduleDir, err := serveproc.ModuleDir(ctx)
	if err != nil {
		return err
	}
	cfgPath := o.config
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
	if o.keep {
		defer c.printf("kept the work directory %s (component logs in <round>/cluster/logs)", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// CA's expanders as deploy/base ships them, the price expander first:
	// prebake is told them, and the stand-in makes their calls.
	expander, err := deploy.CAExpander()
	if err != nil {
		return err
	}

	c.printf("building prebake")
	bin, err := serveproc.Build(ctx, moduleDir, dir)
	if err != nil {
		return err
	}
	env := &demoEnv{moduleDir: moduleDir, cfgPath: cfgPath, bin: bin, dir: dir, cfg: cfg, pods: o.pods, request: request, expander: expander}
	boot := cfg.Providers.Kwok.SimulatedBoot
	inputs := fmt.Sprintf("\nInputs (configured in %s, SIMULATED — not findings):\n  simulated boot, prebaked: %s\n  simulated boot, runtime install: %s\n",
		relTo(moduleDir, cfgPath), boot.Prebaked.Duration, boot.RuntimeInstall.Duration)

	if !o.compare {
		r := o.round
		r.name, r.report, r.hold = "demo", true, o.hold
		res, err := round(ctx, c, env, r)
		if err != nil {
			return err
		}
		fmt.Print(inputs)
		fmt.Printf("\nMeasured (%d instances; stand-in for CA, not CA itself):\n\n%s", res.instances, timeline.Table(res.stats))
		return nil
	}

	rounds := compareRounds(o.round.scheduler.Verbosity)
	results := make([]roundResult, len(rounds))
	for i, r := range rounds {
		c.printf("round %d of %d: %s", i+1, len(rounds), r.name)
		if results[i], err = round(ctx, c, env, r); err != nil {
			return fmt.Errorf("round %q: %w", r.name, err)
		}
	}
	fmt.Print(inputs)
	fmt.Printf("\nMeasured: node Ready → pod Running, per pod (%d pods a round; stand-in for CA, not CA itself):\n\n", o.pods)
	fmt.Println("| cluster | pods | median | p90 | max | end to end, median |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for i, r := range rounds {
		s := timeline.Summarise("", "", "", "", results[i].readyToRunning)
		e2e := "—"
		for _, st := range results[i].stats {
			if st.Phase == timeline.PhaseEndToEnd {
				e2e = timeline.FormatMS(st.MedianMS)
			}
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", r.name, s.N, timeline.FormatMS(s.MedianMS), timeline.FormatMS(s.P90MS), timeline.FormatMS(s.MaxMS), e2e)
	}
	return nil
}

// round brings up a fresh control plane shaped by r, serves the config on it, creates the
// pending pods, lets the stand-in scale them up, and stops everything again.
func round(ctx context.Context, c *clock, env *demoEnv, r roundOptions) (res roundResult, err error) {
	dir := filepath.Join(env.dir, roundDir(r.name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	c.printf("bringing up the %s control plane (the first run builds it from Go modules: 5–20 min)", kubetest.BackendName())
	backend, err := kubetest.NewBackend(ctx, "", kubetest.Options{Dir: filepath.Join(dir, "cluster"), Out: c, Scheduler: r.scheduler})
	if err != nil {
		return res, err
	}
	if err := backend.Start(ctx); err != nil {
		return res, err
	}
	defer func() {
		c.printf("stopping the control plane")
		if err := backend.Stop(context.Background()); err != nil {
			c.printf("stop: %v", err)
		}
	}()
	if r.scheduler.PodInitialBackoff != 0 || r.scheduler.PodMaxBackoff != 0 {
		c.printf("kube-scheduler runs with podInitialBackoff %s, podMaxBackoff %s", r.scheduler.PodInitialBackoff, r.scheduler.PodMaxBackoff)
	}
	rc, err := backend.RESTConfig()
	if err != nil {
		return res, err
	}
	rc.QPS, rc.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return res, err
	}
	if r.systemNode {
		if err := kubetest.AddSystemNode(ctx, backend); err != nil {
			return res, err
		}
		c.printf("added Node %s (tainted %s:%s, in no node group): the Node CA and prebake would run on", kubetest.SystemNodeName, kubetest.SystemNodeTaint.Key, kubetest.SystemNodeTaint.Effect)
	} else {
		c.printf("the cluster has no Node: kube-scheduler retries the pods on its backoff only")
	}

	// The config is served as it is; its kubeconfig comes from $KUBECONFIG when it names none.
	cfg, cfgPath := env.cfg, env.cfgPath
	procEnv := []string{"KUBECONFIG=" + backend.Kubeconfig()}
	if cfg.Providers.Kwok.Kubeconfig != "" {
		c.printf("note: %s sets providers.kwok.kubeconfig; the demo cluster is used only if it points there", cfgPath)
	}
	c.printf("starting prebake serve --config %s --ca-expander=%s", relTo(env.moduleDir, cfgPath), env.expander)
	serve, err := serveproc.Start(ctx, serveproc.Options{Binary: env.bin, Config: cfgPath, Dir: dir, Env: procEnv, Args: []string{"--ca-expander=" + env.expander}})
	if err != nil {
		return res, err
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
		return res, err
	}
	defer conn.Close()
	s, err := standin.New(standin.Options{
		Conn: conn, Kube: kube, Namespace: podNamespace, Expander: env.expander, CAEventsNamespace: metav1.NamespaceSystem,
		OnEvent: func(e standin.Event) { c.printf("%s", e) },
	})
	if err != nil {
		return res, err
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
		return res, err
	}
	c.printf("creating %d pending pods (%s CPU, 256Mi each); the stand-in for cluster-autoscaler scales for them", env.pods, env.request.String())
	for i := range env.pods {
		if _, err := kube.CoreV1().Pods(podNamespace).Create(ctx, pod(fmt.Sprintf("web-%d", i), env.request), metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("create pod: %w", err)
		}
	}
	if err := waitRunning(ctx, kube, env.pods); err != nil {
		return res, err
	}
	c.printf("all %d pods Running", env.pods)

	created, err := createCalled(ctx, kube, cfg)
	if err != nil {
		return res, err
	}
	insts := s.Instances()
	res.instances = len(insts)
	res.stats = timeline.Phases(insts, timeline.Extra{
		CreateCalled: created,
		Boot: map[string]time.Duration{
			string(providers.ImagePrebaked):       boot.Prebaked.Duration,
			string(providers.ImageRuntimeInstall): boot.RuntimeInstall.Duration,
		},
	})
	if res.readyToRunning, err = podReadyToRunning(ctx, kube, s, insts); err != nil {
		return res, err
	}
	if r.report {
		if err := timelineReport(ctx, c, kube, env.bin, backend.Kubeconfig()); err != nil {
			return res, err
		}
	}
	if r.hold {
		fmt.Printf("\nThe cluster and prebake serve keep running until Ctrl-C. In another shell:\n\n"+
			"  KUBECONFIG=%s %s timeline --since 10m\n\n(or bin/prebake after make build; kubectl works with the same KUBECONFIG)\n\n", backend.Kubeconfig(), env.bin)
		<-ctx.Done()
		c.printf("Ctrl-C: stopping")
	}
	return res, nil
}

// timelineReport waits (briefly) until prebake has written each node's timeline up to its
// first pod Running, then runs `prebake timeline --since 10m` on the cluster, as a user
// would, and prints its report.
func timelineReport(ctx context.Context, c *clock, kube kubernetes.Interface, bin, kubeconfig string) error {
	err := wait.Poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: providers.LabelGroup})
		if err != nil {
			return false, err
		}
		for _, n := range l.Items {
			if m, err := nodetimeline.ParseMoments(n.Annotations[nodetimeline.Annotation]); err != nil || m.PodRunning.IsZero() {
				return false, nil
			}
		}
		return len(l.Items) > 0, nil
	})
	if err != nil {
		c.printf("not every node's timeline is complete yet (%v); the report says what is unknown", err)
	}
	c.printf("running: prebake timeline --since 10m")
	cmd := exec.CommandContext(ctx, bin, "timeline", "--kubeconfig", kubeconfig, "--since", "10m")
	cmd.Stdout, cmd.Stderr = os.Stdout, c
	fmt.Println()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("prebake timeline: %w", err)
	}
	return nil
}

// podReadyToRunning is, for each demo pod, the time from its node seen Ready to the pod
// seen Running, both on the stand-in's clock.
func podReadyToRunning(ctx context.Context, kube kubernetes.Interface, s *standin.StandIn, insts []standin.Instance) ([]time.Duration, error) {
	ready := map[string]time.Time{}
	for _, in := range insts {
		if in.NodeName != "" && !in.Ready.IsZero() {
			ready[in.NodeName] = in.Ready
		}
	}
	l, err := kube.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var out []time.Duration
	for _, p := range l.Items {
		_, running, ok := s.PodTimes(p.Namespace + "/" + p.Name)
		if r, known := ready[p.Spec.NodeName]; ok && known && !running.IsZero() {
			out = append(out, running.Sub(r))
		}
	}
	return out, nil
}

// roundDir turns a round's name into a directory name.
func roundDir(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
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
