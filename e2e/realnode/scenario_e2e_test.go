//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/deploy"
	"github.com/prebake-dev/prebake/e2e/serveproc"
	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/wait"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
)

// scenario is one real-node run: its own cluster name (so its own containers, volumes and
// zone network), pod namespace, `prebake serve` process and CA stand-in.
type scenario struct {
	t       *testing.T
	ctx     context.Context
	w       *World
	cluster string
	config  string
	serve   *serveproc.Process
	conn    *grpc.ClientConn
	standin *standin.StandIn
	stop    context.CancelFunc
	done    chan struct{}

	eventsMu sync.Mutex
	events   []string
}

// newScenario writes the config and starts prebake serve and the stand-in (with CA's
// --expander chain as deploy/base runs it). Everything of the cluster is removed when t ends,
// also when it fails, and t fails if anything is left.
func newScenario(t *testing.T, w *World, suffix string, timeout time.Duration, o ConfigOptions) *scenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	s := &scenario{t: t, ctx: ctx, w: w, cluster: w.Name + "-" + suffix}
	o.Cluster = s.cluster
	s.config = tempFile(t, "prebake.yaml")
	if err := w.WriteConfig(s.config, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanup)
	s.createNamespace()
	p, err := serveproc.Start(ctx, serveproc.Options{Binary: w.Prebake, Config: s.config, Dir: t.TempDir(),
		Args: []string{"--ca-expander=" + shippedExpander(t)}})
	if err != nil {
		t.Fatal(err)
	}
	s.serve = p
	if s.conn, err = grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	si, err := standin.New(standin.Options{
		Conn: s.conn, Kube: w.Kube, Namespace: s.cluster, Expander: shippedExpander(t), CAEventsNamespace: metav1.NamespaceSystem,
		Logger:  slog.New(slog.NewTextHandler(eventLog{s}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnEvent: func(ev standin.Event) { s.addEvent(ev.At.Format("15:04:05.000") + " " + ev.String()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	if err := si.Start(runCtx); err != nil {
		stop()
		t.Fatal(err)
	}
	s.standin, s.stop, s.done = si, stop, make(chan struct{})
	go func() {
		defer close(s.done)
		_ = si.Run(runCtx)
	}()
	return s
}

func shippedExpander(t testing.TB) string {
	t.Helper()
	v, err := deploy.CAExpander()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type eventLog struct{ s *scenario }

func (l eventLog) Write(b []byte) (int, error) {
	l.s.addEvent(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (s *scenario) addEvent(line string) {
	s.eventsMu.Lock()
	defer s.eventsMu.Unlock()
	s.events = append(s.events, line)
	if len(s.events) > 200 {
		s.events = slices.Delete(s.events, 0, len(s.events)-200)
	}
}

// cleanup stops the stand-in and prebake, prints logs on failure, removes the cluster's
// Nodes, pods and everything in the engine, and fails t if the engine still holds any of it.
func (s *scenario) cleanup() {
	t := s.t
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if t.Failed() && s.serve != nil {
		t.Logf("----- last lines of %s -----\n%s", s.serve.LogPath(), s.serve.LogTail(60))
		s.eventsMu.Lock()
		t.Logf("----- last stand-in events -----\n%s", strings.Join(s.events, "\n"))
		s.eventsMu.Unlock()
	}
	if s.serve != nil {
		s.serve.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + s.cluster}
	if err := s.w.Kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		t.Logf("cleanup: delete nodes: %v", err)
	}
	if err := s.w.Kube.CoreV1().Namespaces().Delete(ctx, s.cluster, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Logf("cleanup: delete namespace: %v", err)
	}
	if err := removeWorld(ctx, s.w.Engine, s.cluster); err != nil {
		t.Errorf("cleanup: remove cluster %s from the engine: %v", s.cluster, err)
	}
	if left, err := Leftovers(ctx, s.w.Engine, s.cluster); err != nil || len(left) > 0 {
		t.Errorf("cleanup: the engine still holds what cluster %s made (%v): %v", s.cluster, err, left)
	}
}

func (s *scenario) createNamespace() {
	t := s.t
	_, err := s.w.Kube.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.cluster}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", s.cluster, err)
	}
	// The ServiceAccount admission plugin refuses pods until KCM made "default".
	if err := wait.Poll(s.ctx, 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := s.w.Kube.CoreV1().ServiceAccounts(s.cluster).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		t.Fatalf("serviceaccount %s/default: %v", s.cluster, err)
	}
}

// createPod creates a pod that only a node of group fits (its nodeSelector), tolerating the
// taints, running the workload image.
func (s *scenario) createPod(name, group string, tolerate []providers.Taint) string {
	return s.createPodOf(name, group, s.w.WorkloadImage, tolerate)
}

// createPodOf is createPod with the pod's image (one with busybox's sleep).
func (s *scenario) createPodOf(name, group, image string, tolerate []providers.Taint) string {
	t := s.t
	zero := int64(0)
	no := false
	var tol []corev1.Toleration
	for _, tt := range tolerate {
		tol = append(tol, corev1.Toleration{Key: tt.Key, Operator: corev1.TolerationOpEqual, Value: tt.Value, Effect: corev1.TaintEffect(tt.Effect)})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cluster},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{providers.LabelCluster: s.cluster, providers.LabelGroup: group},
			Tolerations:                   tol,
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  &no,
			Containers: []corev1.Container{{
				Name: "app", Image: image, Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
			}},
		},
	}
	if _, err := s.w.Kube.CoreV1().Pods(s.cluster).Create(s.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return s.cluster + "/" + name
}

// groupContainers lists the group's containers.
func (s *scenario) groupContainers(ctx context.Context, group string) ([]container.Summary, error) {
	return containersOf(ctx, s.w.Engine, s.cluster, filters.Arg("label", providers.LabelGroup+"="+group))
}

// waitPodRunning waits until the pod runs. While it waits, a node of group whose bootstrap
// status says failed ends the wait with the node's own error (its status, and kubeadm's and
// the script's lines from cloud-init's log).
func (s *scenario) waitPodRunning(key, group string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(s.ctx, bound)
	defer cancel()
	ns, name, _ := strings.Cut(key, "/")
	for {
		p, err := s.w.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return nil
		}
		if err := s.failedNode(ctx, group); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("pod %s not Running after %s: %v", key, bound, ctx.Err())
			if p != nil {
				msg += fmt.Sprintf("; phase %s, conditions %+v", p.Status.Phase, p.Status.Conditions)
			}
			cs, _ := s.groupContainers(context.Background(), group)
			for _, c := range cs {
				st, _, _ := Status(context.Background(), s.w.Engine, c.ID)
				msg += "\n" + NodeError(context.Background(), s.w.Engine, c.ID, strings.TrimPrefix(c.Names[0], "/"), st).Error()
			}
			return fmt.Errorf("%s", msg)
		case <-time.After(time.Second):
		}
	}
}

// failedNode is the node error of the first container of group whose bootstrap failed.
func (s *scenario) failedNode(ctx context.Context, group string) error {
	cs, err := s.groupContainers(ctx, group)
	if err != nil {
		return nil
	}
	for _, c := range cs {
		if c.State != container.StateRunning {
			continue
		}
		if st, ok, err := Status(ctx, s.w.Engine, c.ID); err == nil && ok && st.Result == "failed" {
			return NodeError(ctx, s.w.Engine, c.ID, strings.TrimPrefix(c.Names[0], "/"), st)
		}
	}
	return nil
}

// instanceOf is the stand-in's record of the instance whose pods include key.
func (s *scenario) instanceOf(key string) (standin.Instance, bool) {
	for _, in := range s.standin.Instances() {
		if slices.Contains(in.Pods, key) {
			return in, true
		}
	}
	return standin.Instance{}, false
}

// waitInstance waits until the stand-in's record of key's instance has all of what done
// checks (the watches record asynchronously).
func (s *scenario) waitInstance(key string, done func(standin.Instance) bool) standin.Instance {
	s.t.Helper()
	var in standin.Instance
	if err := wait.Poll(s.ctx, 30*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		var ok bool
		in, ok = s.instanceOf(key)
		return ok && done(in), nil
	}); err != nil {
		s.t.Fatalf("the stand-in's record of %s: %v; last %+v", key, err, in)
	}
	return in
}

// template is the group's template node, as CA gets it.
func (s *scenario) template(group string) *corev1.Node {
	s.t.Helper()
	resp, err := s.standin.Client().NodeGroupTemplateNodeInfo(s.ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: group}, grpc.WaitForReady(true))
	if err != nil {
		s.t.Fatalf("NodeGroupTemplateNodeInfo %s: %v", group, err)
	}
	n := &corev1.Node{}
	if err := n.Unmarshal(resp.GetNodeBytes()); err != nil {
		s.t.Fatal(err)
	}
	return n
}

func (s *scenario) listed(group string) []*protos.Instance {
	s.t.Helper()
	resp, err := s.standin.Client().NodeGroupNodes(s.ctx, &protos.NodeGroupNodesRequest{Id: group}, grpc.WaitForReady(true))
	if err != nil {
		s.t.Fatalf("NodeGroupNodes %s: %v", group, err)
	}
	return resp.GetInstances()
}

func (s *scenario) targetSize(group string) int {
	s.t.Helper()
	resp, err := s.standin.Client().NodeGroupTargetSize(s.ctx, &protos.NodeGroupTargetSizeRequest{Id: group}, grpc.WaitForReady(true))
	if err != nil {
		s.t.Fatalf("NodeGroupTargetSize %s: %v", group, err)
	}
	return int(resp.GetTargetSize())
}

// checkAgainstTemplate fails t where the real Node differs from the group's template: its
// providerID is not the one NodeGroupNodes lists, a template label is missing or has another
// value (the hostname excepted: the template's is its own), its taints are not the
// template's (the kubelet's own not-ready and unreachable taints aside), or its allocatable
// cpu, memory or pods are not the template's.
func (s *scenario) checkAgainstTemplate(node *corev1.Node, tmpl *corev1.Node, listedID string) {
	t := s.t
	if node.Spec.ProviderID != listedID {
		t.Errorf("node %s: providerID %q, but NodeGroupNodes lists %q", node.Name, node.Spec.ProviderID, listedID)
	}
	for k, v := range tmpl.Labels {
		if k == corev1.LabelHostname {
			continue
		}
		if got, ok := node.Labels[k]; !ok || got != v {
			t.Errorf("node %s: label %s=%q, the template has %q", node.Name, k, got, v)
		}
	}
	own := func(ts []corev1.Taint) []string {
		var out []string
		for _, x := range ts {
			if strings.HasPrefix(x.Key, "node.kubernetes.io/") || strings.HasPrefix(x.Key, "node.cloudprovider.kubernetes.io/") {
				continue
			}
			out = append(out, x.Key+"="+x.Value+":"+string(x.Effect))
		}
		slices.Sort(out)
		return out
	}
	if a, b := own(node.Spec.Taints), own(tmpl.Spec.Taints); !slices.Equal(a, b) {
		t.Errorf("node %s: taints %v, the template has %v", node.Name, a, b)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		got, want := node.Status.Allocatable[r], tmpl.Status.Allocatable[r]
		if got.Cmp(want) != 0 {
			t.Errorf("node %s: allocatable %s %s, the template has %s", node.Name, r, got.String(), want.String())
		}
	}
}

// nodeByProviderID is the Node with that providerID.
func (s *scenario) nodeByProviderID(id string) *corev1.Node {
	s.t.Helper()
	l, err := s.w.Kube.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + s.cluster})
	if err != nil {
		s.t.Fatal(err)
	}
	for i := range l.Items {
		if l.Items[i].Spec.ProviderID == id {
			return &l.Items[i]
		}
	}
	s.t.Fatalf("no Node with providerID %s", id)
	return nil
}

// containerOf is the container behind a docker://<name> providerID.
func (s *scenario) containerOf(providerID string) (container.InspectResponse, error) {
	return s.w.containerOf(s.ctx, providerID)
}

// containerOf is the container of a docker providerID.
func (w *World) containerOf(ctx context.Context, providerID string) (container.InspectResponse, error) {
	return w.Engine.ContainerInspect(ctx, strings.TrimPrefix(providerID, "docker://"))
}

// nodeReport is the node's prebake.dev/bootstrap annotation, parsed.
func nodeReport(t *testing.T, n *corev1.Node) bootstrap.NodeReport {
	t.Helper()
	v, ok := n.Annotations[bootstrap.NodeAnnotation]
	if !ok {
		t.Fatalf("node %s has no %s annotation", n.Name, bootstrap.NodeAnnotation)
	}
	r, err := bootstrap.ParseNodeAnnotation(v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// podEvents are the messages of the pod's events of reason.
func (s *scenario) podEvents(name, reason string) []string {
	l, err := s.w.Kube.CoreV1().Events(s.cluster).List(s.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		if e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}
