package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prebake-dev/prebake/internal/kubetest/spawn"
)

// Component names. They are also the binary names, the log file names (logs/<name>.log) and
// the pid file names (pids/<name>.pid), in start order.
const (
	compEtcd      = "etcd"
	compAPIServer = "kube-apiserver"
	compKCM       = "kube-controller-manager"
	compScheduler = "kube-scheduler"
	compKwok      = "kwok"
)

// Per-step readiness timeouts. The spec measured 3–4 s for the whole start on an idle 2-core
// machine; these leave room for a machine busy compiling.
const (
	etcdTimeout      = 60 * time.Second
	apiserverTimeout = 120 * time.Second
	componentTimeout = 90 * time.Second
	saTimeout        = 90 * time.Second
)

// HermeticOptions configures a Hermetic cluster.
type HermeticOptions struct {
	// Binaries are the control-plane binaries, usually from Build.
	Binaries Binaries
	// Dir is the work directory: pki/, logs/, data/, pids/ and admin.kubeconfig live there.
	// One Dir belongs to one cluster at a time.
	Dir string
	// Out receives progress lines; nil discards them.
	Out io.Writer

	// EtcdServers, when set, is the etcd kube-apiserver stores into (for example
	// Etcd.URL), and no etcd is started: several API servers share one etcd, each under
	// its own EtcdPrefix, which makes them separate clusters at the cost of one etcd.
	EtcdServers string
	// EtcdPrefix is kube-apiserver's --etcd-prefix; empty means its default, /registry.
	EtcdPrefix string
	// APIServerOnly starts no kube-controller-manager, kube-scheduler or kwok, and Start
	// returns once kube-apiserver is ready: enough for clients that only store objects
	// (Secrets, ConfigMaps), at a fraction of the CPU and memory. There is no default
	// ServiceAccount then, and no pod ever runs.
	APIServerOnly bool
	// Join, when set, makes the cluster one that real nodes join with kubeadm (join.go).
	// It needs the full control plane (not APIServerOnly).
	Join *JoinOptions
	// Scheduler tunes kube-scheduler (verbosity, backoff); the zero value keeps its defaults.
	Scheduler SchedulerOptions
}

// Hermetic is a control plane of local processes (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok) on loopback ports picked at Start.
type Hermetic struct {
	opts HermeticOptions
	dir  string // absolute opts.Dir

	mu    sync.Mutex // guards the fields below.
	sp    *spawn.Spawner
	procs []*process // in start order
}

type hermeticPorts struct {
	etcdClient, etcdPeer, apiserver, kcm, scheduler, kwok int
}

// NewHermetic returns a stopped hermetic cluster; call Start.
func NewHermetic(opts HermeticOptions) (*Hermetic, error) {
	dir, err := absDir("HermeticOptions.Dir", opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("hermetic cluster: %w", err)
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Join != nil {
		j := *opts.Join
		if err := j.validate(); err != nil {
			return nil, fmt.Errorf("hermetic cluster: %w", err)
		}
		if opts.APIServerOnly {
			return nil, errors.New("hermetic cluster: Join needs kube-controller-manager; unset APIServerOnly")
		}
		opts.Join = &j
	}
	return &Hermetic{opts: opts, dir: dir}, nil
}

// Kubeconfig returns the path of the admin kubeconfig (user in group system:masters). It is
// written by Start.
func (h *Hermetic) Kubeconfig() string { return filepath.Join(h.dir, "admin.kubeconfig") }

// RESTConfig returns a client configuration for the admin user.
func (h *Hermetic) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
}

// PIDs returns the pid of each running component.
func (h *Hermetic) PIDs() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	pids := make(map[string]int, len(h.procs))
	for _, p := range h.procs {
		pids[p.name] = p.cmd.Process.Pid
	}
	return pids
}

// Start reaps processes left in Dir by an earlier run, generates certificates, starts every
// component and waits until each is healthy and the default ServiceAccount exists. On failure
// it stops whatever it started and returns an error that ends with the log tails.
func (h *Hermetic) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.procs) > 0 {
		return errors.New("hermetic cluster: already started; call Stop first")
	}
	if err := h.opts.Binaries.check(); err != nil {
		return fmt.Errorf("hermetic cluster: %w", err)
	}
	if err := ReapStale(h.dir); err != nil {
		return fmt.Errorf("hermetic cluster: %w", err)
	}
	// A port picked as free can be taken by someone else before the component binds it.
	// That is rare and not our bug, so try once more with new ports.
	err := h.startLocked(ctx)
	if err != nil && h.bindConflict() && ctx.Err() == nil {
		fmt.Fprintf(h.opts.Out, "hermetic: a port was taken while starting; retrying with new ports\n")
		err = h.startLocked(ctx)
	}
	return err
}

func (h *Hermetic) startLocked(ctx context.Context) (err error) {
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(h.opts.Out, "[%5.1fs] hermetic: %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	defer func() {
		if err != nil {
			tails := h.LogTails(40)
			_ = h.stopLocked()
			err = fmt.Errorf("hermetic cluster: start failed: %w\n%s", err, tails)
		}
	}()

	dirs := map[string]string{}
	for _, d := range []string{"pki", "logs", "pids", "data", "run"} {
		dirs[d] = filepath.Join(h.dir, d)
	}
	// Data and component cert dirs are per start: a fresh cluster every time.
	for _, d := range []string{dirs["data"], dirs["run"]} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clean %s: %w", d, err)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}

	pk, err := generatePKI(dirs["pki"], h.extraServingIPs()...)
	if err != nil {
		return err
	}
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	pt := hermeticPorts{
		etcdClient: ports[0], etcdPeer: ports[1], apiserver: ports[2],
		kcm: ports[3], scheduler: ports[4], kwok: ports[5],
	}
	apiURL := "https://" + net.JoinHostPort(h.listenHost(), strconv.Itoa(pt.apiserver))
	kubeconfig := h.Kubeconfig()
	if err := writeKubeconfig(kubeconfig, apiURL, pk); err != nil {
		return err
	}
	logf("certificates and kubeconfig written; ports etcd=%d apiserver=%d kcm=%d scheduler=%d kwok=%d",
		pt.etcdClient, pt.apiserver, pt.kcm, pt.scheduler, pt.kwok)

	h.sp = spawn.New()
	bins := h.opts.Binaries
	env := os.Environ()
	start := func(name, bin string, env []string, args ...string) (*process, error) {
		args = append(args, h.joinArgs(name)...)
		p, err := startProcess(h.sp, name, bin, args, env, dirs["logs"], dirs["pids"])
		if err != nil {
			return nil, err
		}
		h.procs = append(h.procs, p)
		return p, nil
	}

	// etcd, unless the API server uses one that runs elsewhere.
	etcdURL := h.opts.EtcdServers
	if etcdURL == "" {
		etcdURL = "http://127.0.0.1:" + strconv.Itoa(pt.etcdClient)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(pt.etcdPeer)
		etcd, err := start(compEtcd, bins.Etcd, withoutEtcdEnv(env), etcdArgs(filepath.Join(dirs["data"], "etcd"), etcdURL, peerURL)...)
		if err != nil {
			return err
		}
		if err := waitEtcd(ctx, etcd, etcdURL); err != nil {
			return err
		}
		logf("etcd healthy")
	}

	// kube-apiserver
	apiserverArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + h.listenHost(),
		"--advertise-address=" + h.listenHost(),
		"--secure-port=" + strconv.Itoa(pt.apiserver),
		"--cert-dir=" + filepath.Join(dirs["run"], "apiserver-certs"),
		"--tls-cert-file=" + pk.ServingCert,
		"--tls-private-key-file=" + pk.ServingKey,
		"--client-ca-file=" + pk.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pk.SAPub,
		"--service-account-signing-key-file=" + pk.SAKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		"--requestheader-client-ca-file=" + pk.CACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		// Loopback may not be an Endpoints address, so the default reconciler would
		// complain forever about the kubernetes Service.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	if h.opts.EtcdPrefix != "" {
		apiserverArgs = append(apiserverArgs, "--etcd-prefix="+h.opts.EtcdPrefix)
	}
	apiserver, err := start(compAPIServer, bins.KubeAPIServer, env, apiserverArgs...)
	if err != nil {
		return err
	}
	admin, err := adminHTTPClient(pk)
	if err != nil {
		return err
	}
	defer admin.CloseIdleConnections()
	if err := waitFor(ctx, "kube-apiserver /readyz", apiserverTimeout, apiserver, func(ctx context.Context) error {
		return getOK(ctx, admin, apiURL+"/readyz", "ok")
	}); err != nil {
		return err
	}
	logf("kube-apiserver ready")
	if h.opts.APIServerOnly {
		logf("cluster ready (kube-apiserver only): KUBECONFIG=%s", kubeconfig)
		return nil
	}

	// The rest only need the apiserver; start them together and wait for each.
	kcm, err := start(compKCM, bins.KubeControllerManager, env,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(pt.kcm),
		"--cert-dir="+filepath.Join(dirs["run"], "kcm-certs"),
		"--service-account-private-key-file="+pk.SAKey,
		"--root-ca-file="+pk.CACert,
		"--cluster-signing-cert-file="+pk.CACert,
		"--cluster-signing-key-file="+pk.CAKey,
		"--use-service-account-credentials=false",
		"--node-monitor-grace-period=40s",
	)
	if err != nil {
		return err
	}
	schedArgs, err := h.opts.Scheduler.schedulerArgs(kubeconfig, dirs["run"], pt.scheduler)
	if err != nil {
		return err
	}
	scheduler, err := start(compScheduler, bins.KubeScheduler, env, schedArgs...)
	if err != nil {
		return err
	}
	kwokAddr := "127.0.0.1:" + strconv.Itoa(pt.kwok)
	kwok, err := start(compKwok, bins.Kwok, env, kwokArgs(kubeconfig, bins.KwokStages, kwokAddr)...)
	if err != nil {
		return err
	}
	plain := &http.Client{}
	defer plain.CloseIdleConnections()
	// KCM and the scheduler serve /healthz on a self-signed certificate made at their start.
	selfSigned := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer selfSigned.CloseIdleConnections()
	if err := waitFor(ctx, "kube-controller-manager /healthz", componentTimeout, kcm, func(ctx context.Context) error {
		return getOK(ctx, selfSigned, "https://127.0.0.1:"+strconv.Itoa(pt.kcm)+"/healthz", "ok")
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, "kube-scheduler /healthz", componentTimeout, scheduler, func(ctx context.Context) error {
		return getOK(ctx, selfSigned, "https://127.0.0.1:"+strconv.Itoa(pt.scheduler)+"/healthz", "ok")
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, "kwok /healthz", componentTimeout, kwok, func(ctx context.Context) error {
		return getOK(ctx, plain, "http://"+kwokAddr+"/healthz", "")
	}); err != nil {
		return err
	}
	logf("kube-controller-manager, kube-scheduler and kwok healthy")

	// The ServiceAccount admission plugin rejects pods until KCM has made this.
	cs, err := h.clientset()
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "serviceaccount default/default", saTimeout, kcm, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if h.opts.Join != nil {
		if err := h.setupJoin(ctx, logf); err != nil {
			return err
		}
	}
	logf("cluster ready: KUBECONFIG=%s", kubeconfig)
	return nil
}

// etcdArgs are the flags of a single-member etcd on loopback, for tests: no fsync.
func etcdArgs(dataDir, clientURL, peerURL string) []string {
	return []string{
		"--name=hermetic",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=hermetic=" + peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func waitEtcd(ctx context.Context, p *process, url string) error {
	plain := &http.Client{}
	defer plain.CloseIdleConnections()
	return waitFor(ctx, "etcd /health", etcdTimeout, p, func(ctx context.Context) error {
		return getOK(ctx, plain, url+"/health", `"health":"true"`)
	})
}

// EtcdOptions configures an Etcd.
type EtcdOptions struct {
	// Binaries holds the etcd binary, usually from Build.
	Binaries Binaries
	// Dir is the work directory: data/, logs/ and pids/ live there.
	Dir string
	// Out receives progress lines; nil discards them.
	Out io.Writer
}

// Etcd is a single etcd process on loopback, for several Hermetic API servers to share
// (HermeticOptions.EtcdServers, each with its own EtcdPrefix).
type Etcd struct {
	opts EtcdOptions
	dir  string // absolute opts.Dir

	mu   sync.Mutex // guards the fields below.
	sp   *spawn.Spawner
	proc *process
	url  string
}

// NewEtcd returns a stopped etcd; call Start.
func NewEtcd(opts EtcdOptions) (*Etcd, error) {
	dir, err := absDir("EtcdOptions.Dir", opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	return &Etcd{opts: opts, dir: dir}, nil
}

// URL is the client URL, valid after Start.
func (e *Etcd) URL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.url
}

// Start reaps an etcd left in Dir by an earlier run, starts a fresh one (empty data) and
// waits until it is healthy.
func (e *Etcd) Start(ctx context.Context) (err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc != nil {
		return errors.New("etcd: already started; call Stop first")
	}
	if err := checkExecutable(e.opts.Binaries.Etcd); err != nil {
		return fmt.Errorf("etcd binary: %w (run cluster.Build to make it)", err)
	}
	if err := ReapStale(e.dir); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	data := filepath.Join(e.dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return fmt.Errorf("etcd: clean %s: %w", data, err)
	}
	for _, d := range []string{data, filepath.Join(e.dir, "logs"), filepath.Join(e.dir, "pids")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("etcd: create %s: %w", d, err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	e.sp = spawn.New()
	defer func() {
		if err != nil {
			tail, _ := tailFile(filepath.Join(e.dir, "logs", compEtcd+".log"), 40)
			_ = e.stopLocked()
			err = fmt.Errorf("etcd: start failed: %w\n%s", err, tail)
		}
	}()
	e.proc, err = startProcess(e.sp, compEtcd, e.opts.Binaries.Etcd, etcdArgs(filepath.Join(data, "etcd"), url, peerURL),
		withoutEtcdEnv(os.Environ()), filepath.Join(e.dir, "logs"), filepath.Join(e.dir, "pids"))
	if err != nil {
		return err
	}
	if err := waitEtcd(ctx, e.proc, url); err != nil {
		return err
	}
	e.url = url
	fmt.Fprintf(e.opts.Out, "etcd: healthy at %s\n", url)
	return nil
}

// Stop stops etcd (SIGTERM, SIGKILL after 10 s). Stopping a stopped etcd is a no-op.
func (e *Etcd) Stop(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopLocked()
}

func (e *Etcd) stopLocked() error {
	var err error
	if e.proc != nil {
		err = e.proc.stop()
		e.proc = nil
	}
	if e.sp != nil {
		e.sp.Close()
		e.sp = nil
	}
	e.url = ""
	if err != nil {
		return fmt.Errorf("etcd: stop: %w", err)
	}
	return nil
}

// kwokArgs is shared with the kind backend, which runs kwok on the host against kind's API.
func kwokArgs(kubeconfig, stages, serverAddr string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + stages,
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=" + KwokNodeAnnotationValue,
		"--node-lease-duration-seconds=40",
		"--cidr=10.244.0.0/16",
		"--server-address=" + serverAddr,
	}
}

// Stop stops every component in reverse start order (SIGTERM to its process group, SIGKILL
// after 10 s) and removes the pid files. Logs, certificates and the kubeconfig stay in Dir.
// Stopping a stopped cluster is a no-op. Stop does not honour ctx: it is bounded by the grace
// periods, and giving up early would leave processes behind.
func (h *Hermetic) Stop(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopLocked()
}

func (h *Hermetic) stopLocked() error {
	var errs []error
	for _, p := range slices.Backward(h.procs) {
		if err := p.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	h.procs = nil
	if h.sp != nil {
		h.sp.Close()
		h.sp = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hermetic cluster: stop: %w", err)
	}
	return nil
}

// LogTails returns the last n lines of each component's log, for printing on failure. It
// only reads files, so it may be called at any time, also while Start runs.
func (h *Hermetic) LogTails(n int) string {
	var b strings.Builder
	for _, name := range []string{compEtcd, compAPIServer, compKCM, compScheduler, compKwok} {
		path := filepath.Join(h.dir, "logs", name+".log")
		tail, err := tailFile(path, n)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		fmt.Fprintf(&b, "----- last %d lines of %s -----\n", n, path)
		if err != nil {
			fmt.Fprintf(&b, "(cannot read: %v)\n", err)
			continue
		}
		b.WriteString(tail)
		b.WriteString("\n")
	}
	return b.String()
}

// bindConflict reports whether a component log says a port was already taken.
func (h *Hermetic) bindConflict() bool {
	logs, _ := filepath.Glob(filepath.Join(h.dir, "logs", "*.log"))
	for _, l := range logs {
		tail, err := tailFile(l, 200)
		if err == nil && strings.Contains(tail, "address already in use") {
			return true
		}
	}
	return false
}

// AddNode creates a copy of node annotated so that kwok manages it: kwok marks it Ready
// within about a second, gives its pods IPs from 10.244.0.0/16 and reports them Running.
// Set status.capacity and status.allocatable; kwok fills in a huge allocatable otherwise.
func (h *Hermetic) AddNode(ctx context.Context, node *corev1.Node) error {
	cs, err := h.clientset()
	if err != nil {
		return err
	}
	return addFakeNode(ctx, cs, node)
}

// RemoveNode deletes the node; a node that does not exist is not an error.
func (h *Hermetic) RemoveNode(ctx context.Context, name string) error {
	cs, err := h.clientset()
	if err != nil {
		return err
	}
	return removeNode(ctx, cs, name)
}

func (h *Hermetic) clientset() (kubernetes.Interface, error) {
	cfg, err := h.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("hermetic cluster: load %s (is the cluster started?): %w", h.Kubeconfig(), err)
	}
	return kubernetes.NewForConfig(cfg)
}

// withoutEtcdEnv drops ETCD_* variables: etcd reads them as flags and warns about unknown ones.
func withoutEtcdEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "ETCD_") })
}

func adminHTTPClient(p *pki) (*http.Client, error) {
	cert, err := tls.X509KeyPair(p.adminPEM, p.adminKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load admin client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.caPEM) {
		return nil, errors.New("load CA certificate: no PEM data")
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
	}}}, nil
}

// getOK GETs url and wants status 200 and, if want is not empty, a body containing want.
func getOK(ctx context.Context, c *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if want != "" && !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: body %q lacks %q", url, strings.TrimSpace(string(body)), want)
	}
	return nil
}
