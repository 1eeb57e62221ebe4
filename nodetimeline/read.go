package nodetimeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/providers"
)

// ReadOptions select what Read fetches; they mirror Input's filters.
type ReadOptions struct {
	Since                time.Duration
	Node, Group, Cluster string
	// Now is the report's time; default time.Now.
	Now func() time.Time
	// Progress, when set, gets a line per step (the command's stderr).
	Progress io.Writer
}

// listPage is the page size of every list.
const listPage = 500

// Read lists what Build needs from the cluster: the Nodes of prebake's groups, the pods on
// those in the window, CA's scale-up Events, and the pods those Events name. A list the
// credentials may not make fails with the RBAC verb and resource to grant.
func Read(ctx context.Context, kube kubernetes.Interface, o ReadOptions) (Input, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	in := Input{Now: now(), Since: o.Since, Node: o.Node, Group: o.Group, Cluster: o.Cluster}
	progress := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "prebake timeline: "+format+"\n", args...)
		}
	}

	sel := metav1.ListOptions{}
	if o.Node != "" {
		sel.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.Node).String()
	} else {
		req, err := labels.NewRequirement(providers.LabelGroup, selection.Exists, nil)
		if err != nil {
			return in, err
		}
		s := labels.NewSelector().Add(*req)
		for key, v := range map[string]string{providers.LabelGroup: o.Group, providers.LabelCluster: o.Cluster} {
			if v == "" {
				continue
			}
			r, err := labels.NewRequirement(key, selection.Equals, []string{v})
			if err != nil {
				return in, fmt.Errorf("--group/--cluster %q: %w", v, err)
			}
			s = s.Add(*r)
		}
		sel.LabelSelector = s.String()
	}
	progress("listing Nodes (%s)", orDash(sel.LabelSelector+sel.FieldSelector))
	var err error
	in.Nodes, err = listAll(ctx, func(opts metav1.ListOptions) ([]corev1.Node, string, error) {
		l, err := kube.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	}, sel)
	if err != nil {
		return in, rbacError("list", "nodes", "the cluster", err)
	}
	since := time.Time{}
	if o.Since > 0 && o.Node == "" {
		since = in.Now.Add(-o.Since)
	}
	var inWindow []string
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if since.IsZero() || !n.CreationTimestamp.Time.Before(since) {
			inWindow = append(inWindow, n.Name)
		}
	}
	progress("%d Nodes of prebake's groups, %d made in the window", len(in.Nodes), len(inWindow))

	for _, reason := range []string{ReasonScaledUpGroup, ReasonTriggeredScaleUp} {
		evs, err := listAll(ctx, func(opts metav1.ListOptions) ([]corev1.Event, string, error) {
			l, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		}, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
		if err != nil {
			return in, rbacError("list", "events", "all namespaces", err)
		}
		progress("%d %s Events", len(evs), reason)
		in.Events = append(in.Events, evs...)
	}

	// The pods on each node in the window, a few lists at a time.
	type result struct {
		pods []corev1.Pod
		err  error
	}
	results := make([]result, len(inWindow))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, name := range inWindow {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i].pods, results[i].err = listAll(ctx, func(opts metav1.ListOptions) ([]corev1.Pod, string, error) {
				l, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Continue, nil
			}, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
		})
	}
	wg.Wait()
	have := map[types.NamespacedName]bool{}
	for _, r := range results {
		if r.err != nil {
			return in, rbacError("list", "pods", "all namespaces", r.err)
		}
		for _, p := range r.pods {
			have[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = true
		}
		in.Pods = append(in.Pods, r.pods...)
	}
	// The pods CA's Events name that run elsewhere or not at all (yet).
	var named int
	for _, e := range in.Events {
		key := types.NamespacedName{Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name}
		if e.Reason != ReasonTriggeredScaleUp || e.InvolvedObject.Kind != "Pod" || have[key] {
			continue
		}
		have[key] = true
		l, err := kube.CoreV1().Pods(key.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name).String()})
		if err != nil {
			return in, rbacError("list", "pods", "namespace "+key.Namespace, err)
		}
		in.Pods = append(in.Pods, l.Items...)
		named += len(l.Items)
	}
	progress("%d pods on those Nodes, %d more that CA's Events name", len(in.Pods)-named, named)
	return in, nil
}

// listAll pages through a list.
func listAll[T any](ctx context.Context, list func(metav1.ListOptions) ([]T, string, error), opts metav1.ListOptions) ([]T, error) {
	var out []T
	opts.Limit = listPage
	for {
		items, cont, err := list(opts)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
		if cont == "" || ctx.Err() != nil {
			return out, ctx.Err()
		}
		opts.Continue = cont
	}
}

// RBACError is a list the credentials may not make: it names the verb and resource to
// grant.
type RBACError struct {
	Verb, Resource, Scope string
	Err                   error
}

func (e *RBACError) Error() string {
	return fmt.Sprintf("can't %s %s in %s: forbidden by RBAC; grant the kubeconfig's user the verb %q on %q (API group \"\") in %s, "+
		"e.g. with the prebake-timeline ClusterRole in docs/timeline.md: %v", e.Verb, e.Resource, e.Scope, e.Verb, e.Resource, e.Scope, e.Err)
}

func (e *RBACError) Unwrap() error { return e.Err }

func rbacError(verb, resource, scope string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return &RBACError{Verb: verb, Resource: resource, Scope: scope, Err: err}
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("can't %s %s: the API server does not accept the kubeconfig's credentials (expired token or certificate?): %w", verb, resource, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%s %s: %w", verb, resource, err)
	}
	return fmt.Errorf("%s %s: %w (is the API server in the kubeconfig reachable?)", verb, resource, err)
}
