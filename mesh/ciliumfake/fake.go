package ciliumfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/rest"
)

// ExecFunc is what a command run through pods/exec does: it returns what the command
// prints and its exit code.
type ExecFunc func(pod, container string, argv []string) (stdout, stderr string, exitCode int)

// ExecCall is one pods/exec request the fake served.
type ExecCall struct {
	Namespace, Pod, Container string
	Command                   []string
}

// Cluster is one fake cluster. Its methods are safe for concurrent use.
type Cluster struct {
	srv *httptest.Server

	mu         sync.Mutex // guards the fields below
	objects    map[string][]byte
	pods       map[string][]corev1.Pod // namespace → pods, in insertion order
	exec       ExecFunc
	calls      []ExecCall
	forbidExec string
}

// New starts a cluster on 127.0.0.1 holding objs (see Add). Close stops it.
func New(objs ...runtime.Object) *Cluster {
	c := &Cluster{objects: map[string][]byte{}, pods: map[string][]corev1.Pod{}}
	for _, o := range objs {
		c.Add(o)
	}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	return c
}

// Close stops the server.
func (c *Cluster) Close() { c.srv.Close() }

// URL is the API server's URL.
func (c *Cluster) URL() string { return c.srv.URL }

// RESTConfig is a client config of the cluster, without client-side rate limit (QPS -1):
// tests poll it every millisecond.
func (c *Cluster) RESTConfig() *rest.Config { return &rest.Config{Host: c.srv.URL, QPS: -1} }

// Add stores obj (a *corev1.Secret, ConfigMap or Pod, or an *appsv1.DaemonSet or
// Deployment), replacing one of the same kind, namespace and name.
func (c *Cluster) Add(obj runtime.Object) {
	gvk, path := pathOf(obj)
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects[path] = data
	if p, ok := obj.(*corev1.Pod); ok {
		ns := p.Namespace
		c.pods[ns] = slices.DeleteFunc(c.pods[ns], func(q corev1.Pod) bool { return q.Name == p.Name })
		c.pods[ns] = append(c.pods[ns], *p.DeepCopy())
	}
}

// Install adds what the Cilium chart installs and the status reader looks up, in ns: the
// DaemonSet cilium (selector k8s-app=cilium) with agents running pods, and, when
// apiservers > 0, the Deployment clustermesh-apiserver (selector
// k8s-app=clustermesh-apiserver) with that many running pods. Every pod is Ready. It
// returns the pods' names.
func (c *Cluster) Install(ns string, agents, apiservers int) (agentPods, apiserverPods []string) {
	add := func(app string, n int) []string {
		sel := map[string]string{"k8s-app": app}
		var names []string
		for i := range n {
			name := fmt.Sprintf("%s-p%d", app, i+1)
			names = append(names, name)
			c.Add(RunningPod(ns, name, sel, true))
		}
		return names
	}
	c.Add(&appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cilium"},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "cilium"}}},
	})
	agentPods = add("cilium", agents)
	if apiservers > 0 {
		c.Add(&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clustermesh-apiserver"},
			Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "clustermesh-apiserver"}}},
		})
		apiserverPods = add("clustermesh-apiserver", apiservers)
	}
	return agentPods, apiserverPods
}

// RunningPod is a pod in phase Running, with the condition Ready as ready says.
func RunningPod(ns, name string, podLabels map[string]string, ready bool) *corev1.Pod {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: podLabels},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}},
	}
}

// SetExec sets what commands run through pods/exec do; without it they print nothing
// and exit 0.
func (c *Cluster) SetExec(f ExecFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exec = f
}

// ForbidExec answers every pods/exec with 403, naming user, as an API server does for a
// user without create on pods/exec; "" allows exec again.
func (c *Cluster) ForbidExec(user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forbidExec = user
}

// Execs returns the exec requests served so far, in order.
func (c *Cluster) Execs() []ExecCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

func (c *Cluster) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/namespaces/{ns}/{resource}[/{name}[/{sub}]] or /apis/apps/v1/namespaces/...
	var rest []string
	switch {
	case len(parts) >= 4 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces":
		rest = parts[3:]
	case len(parts) >= 5 && parts[0] == "apis" && parts[1] == "apps" && parts[2] == "v1" && parts[3] == "namespaces":
		rest = parts[4:]
	default:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	if len(rest) == 4 && rest[1] == "pods" && rest[3] == "exec" {
		c.serveExec(w, r, rest[0], rest[2])
		return
	}
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: rest[min(1, len(rest)-1)]}, r.Method))
		return
	}
	switch {
	case len(rest) == 2 && rest[1] == "pods" && parts[0] == "api":
		c.listPods(w, r, rest[0])
	case len(rest) == 3:
		c.mu.Lock()
		data, ok := c.objects[strings.Join(parts, "/")]
		c.mu.Unlock()
		if !ok {
			writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: rest[1]}, rest[2]))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	default:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
	}
}

func (c *Cluster) listPods(w http.ResponseWriter, r *http.Request, ns string) {
	sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []corev1.Pod{}}
	c.mu.Lock()
	for _, p := range c.pods[ns] {
		if sel.Matches(labels.Set(p.Labels)) {
			list.Items = append(list.Items, *p.DeepCopy())
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&list)
}

// serveExec serves pods/exec as kube-apiserver's stream translator does for a WebSocket
// client: protocol v5 only, an empty first message on stdout, the output, then the exit
// status on the error channel.
func (c *Cluster) serveExec(w http.ResponseWriter, r *http.Request, ns, pod string) {
	q := r.URL.Query()
	c.mu.Lock()
	forbid, f := c.forbidExec, c.exec
	_, exists := c.objects["api/v1/namespaces/"+ns+"/pods/"+pod]
	c.mu.Unlock()
	switch {
	case forbid != "":
		writeStatus(w, apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, pod,
			fmt.Errorf("User %q cannot create resource \"pods/exec\" in API group \"\" in the namespace %q", forbid, ns)))
		return
	case !exists:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, pod))
		return
	case !wsstream.IsWebSocketRequestWithStreamCloseProtocol(r):
		writeStatus(w, apierrors.NewBadRequest("the fake serves pods/exec over WebSocket with v5.channel.k8s.io only"))
		return
	}
	call := ExecCall{Namespace: ns, Pod: pod, Container: q.Get("container"), Command: q["command"]}
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()

	channels := make([]wsstream.ChannelType, 5)
	channels[remotecommandconsts.StreamStdIn] = wsstream.IgnoreChannel
	channels[remotecommandconsts.StreamStdOut] = wsstream.WriteChannel
	channels[remotecommandconsts.StreamStdErr] = wsstream.WriteChannel
	channels[remotecommandconsts.StreamErr] = wsstream.WriteChannel
	channels[remotecommandconsts.StreamResize] = wsstream.ReadChannel
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		remotecommandconsts.StreamProtocolV5Name: {Binary: true, Channels: channels},
	})
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return
	}
	defer conn.Close()
	if _, err := streams[remotecommandconsts.StreamStdOut].Write([]byte{}); err != nil {
		return
	}
	stdout, stderr, code := "", "", 0
	if f != nil {
		stdout, stderr, code = f(pod, call.Container, call.Command)
	}
	_, _ = streams[remotecommandconsts.StreamStdOut].Write([]byte(stdout))
	_, _ = streams[remotecommandconsts.StreamStdErr].Write([]byte(stderr))
	st := metav1.Status{Status: metav1.StatusSuccess}
	if code != 0 {
		st = metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  remotecommandconsts.NonZeroExitCodeReason,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: remotecommandconsts.ExitCodeCauseType, Message: fmt.Sprint(code)}}},
			Message: fmt.Sprintf("command terminated with non-zero exit code: exit status %d", code),
		}
	}
	data, _ := json.Marshal(st)
	_, _ = streams[remotecommandconsts.StreamErr].Write(data)
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(&st)
}

// pathOf returns obj's kind and its path in the API, without the leading slash.
func pathOf(obj runtime.Object) (schema.GroupVersionKind, string) {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	core := func(kind, resource string) (schema.GroupVersionKind, string) {
		return corev1.SchemeGroupVersion.WithKind(kind), "api/v1/namespaces/" + m.GetNamespace() + "/" + resource + "/" + m.GetName()
	}
	apps := func(kind, resource string) (schema.GroupVersionKind, string) {
		return appsv1.SchemeGroupVersion.WithKind(kind), "apis/apps/v1/namespaces/" + m.GetNamespace() + "/" + resource + "/" + m.GetName()
	}
	switch obj.(type) {
	case *corev1.Secret:
		return core("Secret", "secrets")
	case *corev1.ConfigMap:
		return core("ConfigMap", "configmaps")
	case *corev1.Pod:
		return core("Pod", "pods")
	case *appsv1.DaemonSet:
		return apps("DaemonSet", "daemonsets")
	case *appsv1.Deployment:
		return apps("Deployment", "deployments")
	}
	panic(fmt.Sprintf("ciliumfake: cannot hold a %T", obj))
}
