package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// What the built-in status reader runs: the agent DaemonSet and its container, the
// clustermesh-apiserver Deployment and its KVStoreMesh container, as the Cilium v1.20.2 chart
// names them (install/kubernetes/cilium/templates/cilium-agent/daemonset.yaml,
// clustermesh-apiserver/deployment.yaml), and the status commands of Cilium's command
// reference (Documentation/cmdref/cilium-dbg_status.md,
// clustermesh-apiserver_kvstoremesh-dbg_status.md).
const (
	AgentDaemonSet          = "cilium"
	AgentContainer          = "cilium-agent"
	ClusterMeshDeployment   = "clustermesh-apiserver"
	KVStoreMeshContainer    = "kvstoremesh"
	maxStatusOutput         = 16 << 20
	defaultExecReadTimeout  = 30 * time.Second
	execRBACHint            = "the kubeconfig user needs the verb create on pods/exec (and get, for API servers before Kubernetes 1.35), get on daemonsets and deployments and list on pods, in %s (docs/mesh.md, \"Waiting for Cilium\"); or pass --status-command, or --no-wait"
	kvstoremeshDisabledHint = "is KVStoreMesh enabled? With clustermesh.apiserver.kvstoremesh.enabled=false pass --kvstoremesh=false"
)

var (
	agentStatusCommand       = []string{"cilium-dbg", "status", "-o", "json"}
	kvstoremeshStatusCommand = []string{"clustermesh-apiserver", "kvstoremesh-dbg", "status", "-o", "json"}
)

// ExecStatusOptions configures ExecStatus.
type ExecStatusOptions struct {
	// Namespace is Cilium's namespace; empty means kube-system.
	Namespace string
	// KVStoreMesh asks every clustermesh-apiserver pod's KVStoreMesh too.
	KVStoreMesh bool
	// ReadTimeout bounds one status read of a cluster (all its execs); 0 means 30 s.
	ReadTimeout time.Duration
}

// ExecStatus is the built-in StatusReader of the cilium backend. For a cluster it does
// through the Kubernetes API (the pods/exec subresource, as kubectl exec does: WebSocket,
// falling back to SPDY) what a user would type:
//
//	kubectl -n kube-system exec ds/cilium -c cilium-agent -- cilium-dbg status -o json
//	kubectl -n kube-system exec <pod> -c kvstoremesh -- clustermesh-apiserver kvstoremesh-dbg status -o json
//
// the first in one agent pod (a running one, ready when there is one, the first by name),
// the second, with KVStoreMesh, in every running clustermesh-apiserver pod, since each
// replica keeps its own copy of the peers. It parses the output with ParseMeshStatus.
type ExecStatus struct {
	opts    ExecStatusOptions
	configs map[string]*rest.Config
	clients map[string]kubernetes.Interface
}

var _ StatusReader = (*ExecStatus)(nil)

// NewExecStatus returns the reader of the clusters whose REST configs are given, by
// cluster name (see KubeConfigs).
func NewExecStatus(configs map[string]*rest.Config, opts ExecStatusOptions) (*ExecStatus, error) {
	if opts.Namespace == "" {
		opts.Namespace = DefaultCiliumNamespace
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = defaultExecReadTimeout
	}
	r := &ExecStatus{opts: opts, configs: configs, clients: make(map[string]kubernetes.Interface, len(configs))}
	var errs []error
	for name, cfg := range configs {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %q: %w", name, err))
			continue
		}
		r.clients[name] = cs
	}
	return r, errors.Join(errs...)
}

// MeshStatus reads what Cilium in cluster reports: one agent and, with KVStoreMesh, every
// KVStoreMesh.
func (r *ExecStatus) MeshStatus(ctx context.Context, cluster string) (MeshStatus, error) {
	cs := r.clients[cluster]
	if cs == nil {
		return MeshStatus{}, fmt.Errorf("cluster %q: no Kubernetes client", cluster)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.ReadTimeout)
	defer cancel()

	agents, err := r.pods(ctx, cs, "daemonset", AgentDaemonSet)
	if err != nil {
		return MeshStatus{}, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	agent := pickAgent(agents)
	var st MeshStatus
	out, err := r.exec(ctx, cluster, agent, AgentContainer, agentStatusCommand)
	if err != nil {
		return MeshStatus{}, err
	}
	if err := r.parseInto(&st, out, cluster, agent, AgentContainer, false); err != nil {
		return MeshStatus{}, err
	}
	if !r.opts.KVStoreMesh {
		return st, nil
	}
	apiservers, err := r.pods(ctx, cs, "deployment", ClusterMeshDeployment)
	if err != nil {
		return MeshStatus{}, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	for _, p := range apiservers {
		out, err := r.exec(ctx, cluster, p.Name, KVStoreMeshContainer, kvstoremeshStatusCommand)
		if err != nil {
			return MeshStatus{}, err
		}
		if err := r.parseInto(&st, out, cluster, p.Name, KVStoreMeshContainer, true); err != nil {
			return MeshStatus{}, err
		}
	}
	return st, nil
}

// parseInto parses one pod's output, which must be one document of the expected kind.
func (r *ExecStatus) parseInto(st *MeshStatus, out []byte, cluster, pod, container string, kvstoremesh bool) error {
	argv := agentStatusCommand
	if kvstoremesh {
		argv = kvstoremeshStatusCommand
	}
	where := fmt.Sprintf("cluster %q: pod %s/%s, container %s: %s", cluster, r.opts.Namespace, pod, container, strings.Join(argv, " "))
	s, err := ParseMeshStatus(bytes.NewReader(out))
	if err != nil {
		return fmt.Errorf("%s printed something else than Cilium's status JSON: %w", where, err)
	}
	name := r.opts.Namespace + "/" + pod
	switch {
	case !kvstoremesh && len(s.Agents) == 1 && len(s.KVStoreMesh) == 0:
		st.Agents = append(st.Agents, s.Agents[0])
		st.AgentPods = append(st.AgentPods, name)
	case kvstoremesh && len(s.KVStoreMesh) == 1 && len(s.Agents) == 0:
		st.KVStoreMesh = append(st.KVStoreMesh, s.KVStoreMesh[0])
		st.KVStoreMeshPods = append(st.KVStoreMeshPods, name)
	default:
		return fmt.Errorf("%s: printed %d agent and %d KVStoreMesh documents, want one of its own kind", where, len(s.Agents), len(s.KVStoreMesh))
	}
	return nil
}

// pods returns the running pods of the named DaemonSet or Deployment (its selector, as
// kubectl exec ds/… resolves it), sorted by name; none is an error.
func (r *ExecStatus) pods(ctx context.Context, cs kubernetes.Interface, kind, name string) ([]corev1.Pod, error) {
	ns := r.opts.Namespace
	var (
		sel *metav1.LabelSelector
		err error
	)
	switch kind {
	case "daemonset":
		ds, gerr := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err = gerr; err == nil {
			sel = ds.Spec.Selector
		}
	default:
		d, gerr := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err = gerr; err == nil {
			sel = d.Spec.Selector
		}
	}
	switch {
	case apierrors.IsNotFound(err) && kind == "deployment":
		return nil, fmt.Errorf("deployment %s/%s not found: %s", ns, name, kvstoremeshDisabledHint)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s %s/%s not found: is Cilium installed in %s? (--namespace)", kind, ns, name, ns)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("get %s %s/%s: %w; "+execRBACHint, kind, ns, name, err, ns)
	case err != nil:
		return nil, fmt.Errorf("get %s %s/%s: %w", kind, ns, name, err)
	case sel == nil:
		return nil, fmt.Errorf("%s %s/%s has no selector", kind, ns, name)
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: selector: %w", kind, ns, name, err)
	}
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("list the pods of %s %s/%s: %w; "+execRBACHint, kind, ns, name, err, ns)
	}
	if err != nil {
		return nil, fmt.Errorf("list the pods of %s %s/%s: %w", kind, ns, name, err)
	}
	running := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
		return p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil
	})
	if len(running) == 0 {
		return nil, fmt.Errorf("no running pod of %s %s/%s (%d pods match %s)", kind, ns, name, len(list.Items), selector)
	}
	slices.SortFunc(running, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return running, nil
}

// pickAgent returns the first ready pod, else the first (pods is sorted and not empty).
func pickAgent(pods []corev1.Pod) string {
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return p.Name
			}
		}
	}
	return pods[0].Name
}

// exec runs argv in the pod's container and returns its stdout. Like kubectl exec, it
// speaks WebSocket (remote command protocol v5) and falls back to SPDY when the API
// server cannot upgrade to it.
func (r *ExecStatus) exec(ctx context.Context, cluster, pod, container string, argv []string) ([]byte, error) {
	ns := r.opts.Namespace
	where := fmt.Sprintf("cluster %q: exec in pod %s/%s, container %s: %s", cluster, ns, pod, container, strings.Join(argv, " "))
	url := r.clients[cluster].CoreV1().RESTClient().Post().
		Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec).
		URL()
	cfg := r.configs[cluster]
	spdyExec, err := remotecommand.NewSPDYExecutor(cfg, "POST", url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	wsExec, err := remotecommand.NewWebSocketExecutor(cfg, "GET", url.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	executor, err := remotecommand.NewFallbackExecutor(wsExec, spdyExec, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	stdout := &cappedBuffer{max: maxStatusOutput}
	stderr := &cappedBuffer{max: 64 << 10}
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
	out, over := stdout.contents()
	switch {
	case err != nil && apierrors.IsForbidden(err):
		return nil, fmt.Errorf("%s: %w; "+execRBACHint, where, err, ns)
	case err != nil:
		errOut, _ := stderr.contents()
		return nil, fmt.Errorf("%s: %w%s", where, err, tail(string(errOut), 5))
	case over:
		return nil, fmt.Errorf("%s: printed more than %d MiB", where, maxStatusOutput>>20)
	}
	return out, nil
}

// cappedBuffer keeps the first max bytes written to it and notes that more came. It is
// safe for concurrent use: when the context ends, StreamWithContext returns while its
// copying goroutines may still write.
type cappedBuffer struct {
	max int

	mu   sync.Mutex // guards buf and over
	buf  bytes.Buffer
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); len(p) > room {
		b.over = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

// contents returns a copy of what was kept, and whether more was written.
func (b *cappedBuffer) contents() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes()), b.over
}
