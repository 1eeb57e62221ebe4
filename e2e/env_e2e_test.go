//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/deploy"
	"github.com/prebake-dev/prebake/e2e/serveproc"
	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/timeline"
	"github.com/prebake-dev/prebake/e2e/wait"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/internal/certs"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok"
)

// Simulated boot times of the scenarios: SIMULATED inputs, scaled down from the defaults
// (20 s / 90 s) so the suite runs in minutes. They are reported as inputs, never as findings.
const (
	bootPrebaked       = 2 * time.Second
	bootRuntimeInstall = 5 * time.Second
)

// kwok provider's machine-record annotations (providers/kwok/record.go, unexported there):
// the test reads when the provider's Create ran, which CA has no way to see.
const (
	leaseAnnotationRequestedAt = kwok.AnnotationRequestedAt
	leaseAnnotationProviderID  = kwok.AnnotationProviderID
)

// group is one node group of a scenario's config.
type group struct {
	ID          string
	MachineType string // default kwok-small
	Zone        string // default zone-a
	MinSize     int
	MaxSize     int
	Prebaked    bool // image: {channel: stable}
	Labels      map[string]string
	Taints      []providers.Taint
}

// env is one scenario: its own clusterName (e2e-<name>), machine-record namespace, pod
// namespace, `prebake serve` process and stand-in.
type env struct {
	t       *testing.T
	ctx     context.Context
	name    string // clusterName, also the pod namespace
	leaseNS string
	dir     string
	kube    kubernetes.Interface

	serve   *serveproc.Process
	conn    *grpc.ClientConn
	standin *standin.StandIn
	runStop context.CancelFunc
	runDone chan struct{}

	eventsMu sync.Mutex // guards events
	events   []string   // recent stand-in events, printed on failure
}

// newEnv prepares a scenario with a deadline; it skips (or fails under CI=true) when the
// cluster could not be set up.
func newEnv(t *testing.T, name string, timeout time.Duration) *env {
	t.Helper()
	kubetest.SkipIfUnavailable(t, suite.err)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	e := &env{
		t: t, ctx: ctx, name: "e2e-" + name, leaseNS: "prebake-e2e-" + name,
		dir: t.TempDir(), kube: suite.kube,
	}
	t.Cleanup(cancel)
	t.Cleanup(e.cleanup)
	e.createNamespace(e.name)
	return e
}

// cleanup stops the stand-in and prebake, prints logs on failure, and removes what the
// scenario left in the cluster so the next one starts clean.
func (e *env) cleanup() {
	if e.runStop != nil {
		e.runStop()
		<-e.runDone
	}
	if e.conn != nil {
		e.conn.Close()
	}
	if e.t.Failed() {
		e.t.Logf("----- control plane logs -----\n%s", suite.backend.LogTails(40))
		if e.serve != nil {
			e.t.Logf("----- last lines of %s -----\n%s", e.serve.LogPath(), e.serve.LogTail(80))
		}
		e.eventsMu.Lock()
		e.t.Logf("----- last stand-in events -----\n%s", strings.Join(e.events, "\n"))
		e.eventsMu.Unlock()
	}
	if e.serve != nil {
		e.serve.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + e.name}
	if err := e.kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		e.t.Logf("cleanup: delete nodes: %v", err)
	}
	for _, ns := range []string{e.name, e.leaseNS} {
		if err := e.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Logf("cleanup: delete namespace %s: %v", ns, err)
		}
	}
}

func (e *env) createNamespace(name string) {
	e.t.Helper()
	_, err := e.kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("create namespace %s: %v", name, err)
	}
	// The ServiceAccount admission plugin refuses pods until KCM made "default".
	e.waitFor("serviceaccount "+name+"/default", 60*time.Second, func(ctx context.Context) (bool, error) {
		_, err := e.kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

var configTemplate = template.Must(template.New("config").Funcs(template.FuncMap{
	"ms": func(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) },
}).Parse(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: {{.Cluster}}
refreshInterval: 10s
workers: {parallelism: 8, qps: 20, burst: 40, retries: 3}
providers:
  kwok:
    kubeconfig: {{.Kubeconfig}}
    namespace: {{.LeaseNS}}
    # SIMULATED boot times, scaled down for the e2e suite.
    simulatedBoot: {prebaked: {{ms .BootPrebaked}}, runtimeInstall: {{ms .BootRuntimeInstall}}}
    capacity: {zone-b: 0}
imageCatalog: {file: {{.Catalog}}}
nodeGroups:
{{- range .Groups}}
  - id: {{.ID}}
    provider: kwok
    minSize: {{.MinSize}}
    maxSize: {{.MaxSize}}
    machineType: {{or .MachineType "kwok-small"}}
    location: {{or .Zone "zone-a"}}
{{- if .Labels}}
    labels:
{{- range $k, $v := .Labels}}
      {{$k}}: "{{$v}}"
{{- end}}
{{- end}}
{{- if .Taints}}
    taints:
{{- range .Taints}}
      - {key: {{.Key}}, value: "{{.Value}}", effect: {{.Effect}}}
{{- end}}
{{- end}}
{{- if .Prebaked}}
    image: {channel: stable}
{{- end}}
{{- end}}
`))

// writeConfig writes the scenario's ProviderConfig and returns its path.
func (e *env) writeConfig(groups ...group) string {
	e.t.Helper()
	path := filepath.Join(e.dir, "prebake.yaml")
	f, err := os.Create(path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	catalog, err := filepath.Abs(filepath.Join("..", "examples", "kwok-catalog.yaml"))
	if err != nil {
		e.t.Fatal(err)
	}
	err = configTemplate.Execute(f, map[string]any{
		"Catalog": catalog, "Cluster": e.name, "Kubeconfig": suite.backend.Kubeconfig(), "LeaseNS": e.leaseNS,
		"BootPrebaked": bootPrebaked, "BootRuntimeInstall": bootRuntimeInstall, "Groups": groups,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return path
}

// startServe runs `prebake serve` on config; with tlsBundle set it serves mTLS.
func (e *env) startServe(config string, tlsBundle *certs.Bundle) {
	e.t.Helper()
	o := serveproc.Options{Binary: suite.prebake, Config: config, Dir: e.dir, Args: []string{"--ca-expander=" + shippedExpander(e.t)}}
	if tlsBundle != nil {
		o.TLSCert, o.TLSKey, o.ClientCA = tlsBundle.ServerCert, tlsBundle.ServerKey, tlsBundle.CACert
	}
	p, err := serveproc.Start(e.ctx, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.serve = p
}

// dial connects to prebake serve; without creds, in plaintext.
func (e *env) dial(creds credentials.TransportCredentials) *grpc.ClientConn {
	e.t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(e.serve.GRPCAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		e.t.Fatal(err)
	}
	return conn
}

// newStandIn makes the scenario's stand-in for CA over conn (plaintext to prebake serve
// when nil) and starts its watches; run also starts its loop.
func (e *env) newStandIn(conn grpc.ClientConnInterface, run bool) *standin.StandIn {
	e.t.Helper()
	if conn == nil {
		e.conn = e.dial(nil)
		conn = e.conn
	}
	s, err := standin.New(standin.Options{
		Conn: conn, Kube: e.kube, Namespace: e.name, Expander: shippedExpander(e.t), CAEventsNamespace: metav1.NamespaceSystem,
		Logger:  slog.New(slog.NewTextHandler(eventLog{e}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnEvent: func(ev standin.Event) { e.addEvent(ev.At.Format("15:04:05.000") + " " + ev.String()) },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(e.ctx)
	if err := s.Start(runCtx); err != nil {
		stop()
		e.t.Fatal(err)
	}
	e.standin, e.runStop, e.runDone = s, stop, make(chan struct{})
	if run {
		go func() {
			defer close(e.runDone)
			_ = s.Run(runCtx)
		}()
	} else {
		close(e.runDone)
	}
	return s
}

// shippedExpander is the --expander deploy/base runs CA with: the scenarios
// drive prebake through the same expanders, the price expander's calls
// included, and prebake is told them (--ca-expander) as deploy/base tells it.
func shippedExpander(t testing.TB) string {
	t.Helper()
	v, err := deploy.CAExpander()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// eventLog keeps the stand-in's log lines with its events, for printing on failure.
type eventLog struct{ e *env }

func (l eventLog) Write(b []byte) (int, error) {
	l.e.addEvent(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (e *env) addEvent(line string) {
	e.eventsMu.Lock()
	defer e.eventsMu.Unlock()
	e.events = append(e.events, line)
	if len(e.events) > 300 {
		e.events = slices.Delete(e.events, 0, len(e.events)-300)
	}
}

// runStandIn starts the loop of a stand-in made with run=false.
func (e *env) runStandIn() {
	e.t.Helper()
	runCtx, stop := context.WithCancel(e.ctx)
	prevStop := e.runStop
	e.runStop = func() { stop(); prevStop() }
	e.runDone = make(chan struct{})
	go func() {
		defer close(e.runDone)
		_ = e.standin.Run(runCtx)
	}()
}

// podSpec describes the pods a scenario creates.
type podSpec struct {
	CPU         string            // request; memory is 256Mi
	Selector    map[string]string // added to prebake.dev/cluster=<env>
	Tolerations []corev1.Toleration
}

// createPods creates n pods named prefix-<i> in the scenario's namespace and returns their
// namespace/name keys. They select this scenario's nodes only.
func (e *env) createPods(prefix string, n int, spec podSpec) []string {
	e.t.Helper()
	pods := make([]*corev1.Pod, n)
	for i := range n {
		pods[i] = e.pod(fmt.Sprintf("%s-%d", prefix, i), spec)
	}
	return e.createPodSet(pods)
}

// createPodSet creates pods, 16 at a time, and returns their namespace/name keys.
func (e *env) createPodSet(pods []*corev1.Pod) []string {
	e.t.Helper()
	keys := make([]string, len(pods))
	errs := make(chan error, len(pods))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, p := range pods {
		keys[i] = p.Namespace + "/" + p.Name
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := e.kube.CoreV1().Pods(p.Namespace).Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("create pod %s: %w", p.Name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}
	return keys
}

func (e *env) pod(name string, spec podSpec) *corev1.Pod {
	sel := map[string]string{providers.LabelCluster: e.name}
	for k, v := range spec.Selector {
		sel[k] = v
	}
	zero := int64(0)
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.name, Labels: map[string]string{"app": "e2e"}},
		Spec: corev1.PodSpec{
			NodeSelector:                  sel,
			Tolerations:                   spec.Tolerations,
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  &no,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.invalid/e2e:0", // kwok never pulls it
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse(spec.CPU),
					corev1.ResourceMemory: resource.MustParse("256Mi"),
				}},
			}},
		},
	}
}

// waitFor polls cond every 50 ms until it reports true, fails the test when the deadline
// (or the scenario's) passes, and returns how long it took. A cond error is retried; the
// last one is reported.
func (e *env) waitFor(what string, timeout time.Duration, cond func(context.Context) (bool, error)) time.Duration {
	e.t.Helper()
	start := time.Now()
	if err := wait.Poll(e.ctx, timeout, 50*time.Millisecond, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
	return time.Since(start)
}

// podsRunning reports whether every pod of keys is Running.
func (e *env) podsRunning(ctx context.Context, keys []string) (running int, err error) {
	list, err := e.kube.CoreV1().Pods(e.name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	for _, p := range list.Items {
		if want[p.Namespace+"/"+p.Name] && p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	return running, nil
}

// ourNodes lists the Nodes carrying this scenario's cluster label.
func (e *env) ourNodes(ctx context.Context) ([]corev1.Node, error) {
	l, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + e.name})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// leases lists this scenario's machine records by name.
func (e *env) leases(ctx context.Context) (map[string]time.Time, error) {
	l, err := e.kube.CoordinationV1().Leases(e.leaseNS).List(ctx, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + e.name})
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(l.Items))
	for _, le := range l.Items {
		t, _ := time.Parse(time.RFC3339Nano, le.Annotations[leaseAnnotationRequestedAt])
		out[le.Name] = t
	}
	return out, nil
}

// createCalled maps instance ids to the moment the kwok provider's Create ran for them.
func (e *env) createCalled() map[string]time.Time {
	l, err := e.kube.CoordinationV1().Leases(e.leaseNS).List(e.ctx, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + e.name})
	if err != nil {
		e.t.Logf("read machine records: %v", err)
		return nil
	}
	out := map[string]time.Time{}
	for _, le := range l.Items {
		if t, err := time.Parse(time.RFC3339Nano, le.Annotations[leaseAnnotationRequestedAt]); err == nil {
			out[le.Annotations[leaseAnnotationProviderID]] = t
		}
	}
	return out
}

func (e *env) targetSize(group string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	// WaitForReady: right after a restart the connection may still be reconnecting.
	resp, err := e.standin.Client().NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: group}, grpc.WaitForReady(true))
	if err != nil {
		e.t.Fatalf("NodeGroupTargetSize %s: %v", group, err)
	}
	return int(resp.GetTargetSize())
}

func (e *env) listInstances(ctx context.Context, group string) ([]*protos.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := e.standin.Client().NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: group}, grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}
	return resp.GetInstances(), nil
}

// record adds the scenario's measurements to the timeline report.
func (e *env) record(name, title string, facts []timeline.Fact, notes ...string) timeline.Scenario {
	insts := e.standin.Instances()
	requested := 0
	for _, in := range insts {
		if in.Requested {
			requested++
		}
	}
	sc := timeline.Scenario{
		Name: name, Title: title, Instances: requested,
		Inputs: bootInputs(bootPrebaked, bootRuntimeInstall),
		Phases: timeline.Phases(insts, timeline.Extra{
			CreateCalled: e.createCalled(),
			Boot:         map[string]time.Duration{string(providers.ImagePrebaked): bootPrebaked, string(providers.ImageRuntimeInstall): bootRuntimeInstall},
		}),
		RPC:   timeline.RPCStats(e.standin.RPCLatencies()),
		Facts: facts,
		Notes: notes,
	}
	sc.Inputs = append(sc.Inputs, timeline.Input{Name: "stand-in loop interval (not CA's 10 s scan interval)", Value: standin.DefaultInterval.String()})
	if text, err := e.serve.Metrics(e.ctx); err != nil {
		e.t.Logf("scrape /metrics: %v", err)
	} else {
		sc.Metrics = pluginMetrics(text)
	}
	suite.report.Add(sc)
	if len(sc.Phases) > 0 {
		e.t.Logf("timeline of %s:\n%s", name, timeline.Table(sc.Phases))
	}
	return sc
}

func bootInputs(prebaked, runtimeInstall time.Duration) []timeline.Input {
	return []timeline.Input{
		{Name: "simulated boot, prebaked image (SIMULATED)", Value: prebaked.String()},
		{Name: "simulated boot, runtime install (SIMULATED)", Value: runtimeInstall.String()},
	}
}

// pluginMetrics reads prebake's own view of the create path from /metrics.
func pluginMetrics(text string) []timeline.Stat {
	hs, err := timeline.ParseHistograms(text, "prebake_instance_phase_seconds")
	if err != nil {
		return nil
	}
	var out []timeline.Stat
	if h, ok := timeline.Merge(hs, map[string]string{"phase": "api_accepted"}); ok && h.Count > 0 {
		out = append(out, timeline.HistogramStat(timeline.PhaseAPIAccepted, "IncreaseSize recorded the instance", "provider Create returned",
			"prebake_instance_phase_seconds{phase=\"api_accepted\"}", h))
	}
	return out
}

// tlsCreds is a client TLS config for prebake serve at 127.0.0.1.
func tlsCreds(rootCA string, clientCert, clientKey string) credentials.TransportCredentials {
	cfg := &tls.Config{ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, RootCAs: mustPool(rootCA)}
	if clientCert != "" {
		cert, err := tls.LoadX509KeyPair(clientCert, clientKey)
		if err != nil {
			panic(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg)
}
