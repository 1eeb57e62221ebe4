// Package canary is prebake's own image canary: an image passes when one
// machine of a configured node group, booted from it the way a scale-up
// boots one (autoscaling.Core.Reserve: the group's request, the workers'
// create and delete path), joined the cluster as a Ready Node that says it
// is that image. Whatever happens, the machine, its Node and its join
// tokens are gone when Check returns.
package canary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// Defaults.
const (
	DefaultTimeout = 10 * time.Minute
	defaultPoll    = 2 * time.Second
	defaultCleanup = 2 * time.Minute
	// progressEvery is how often an unchanged wait is reported again.
	progressEvery = 30 * time.Second
)

// Options tune a JoinCanary.
type Options struct {
	// Timeout bounds the wait for a Ready Node once the cloud accepted the
	// machine (the create itself is bounded like a scale-up's: the workers'
	// call timeout and retries); 0 means DefaultTimeout.
	Timeout time.Duration
	// Poll is how often the Node is read; 0 means 2s.
	Poll time.Duration
	// CleanupTimeout bounds the deletes that always follow; 0 means 2m.
	CleanupTimeout time.Duration
	// Progress receives one line whenever what the canary sees changes
	// (and every 30s while it doesn't); nil discards them.
	Progress io.Writer
}

// JoinCanary is prebake's own imagecatalog.Canary: an image passes when a
// machine of one configured node group, booted from it the way a scale-up
// boots one, joined the cluster as a Ready Node that says it is that image.
//
// The machine is a Reservation of the core: the group's request with the
// image under test and one more taint, providers.TaintCanary=<group>:
// NoSchedule, since the canary deletes its Node without a drain; made and
// deleted by the group provider's workers (user-data rendering with a fresh
// join token, rate limit, retries, error classes), so Shutdown waits for a
// canary in flight. While it exists the machine counts toward the group,
// here and in every prebake serve that lists it: a group at maxSize is
// refused.
//
// Whatever happens (pass, failure, timeout, ctx cancelled) Check deletes the
// machine and its Node and revokes its join tokens before it returns.
type JoinCanary struct {
	core  *autoscaling.Core
	group autoscaling.GroupDetail
	nodes kubernetes.Interface
	opts  Options
}

// New returns the canary of group on a core built from the serve config
// (autoscaling.New; Start it before Check). nodes is the cluster the
// machine joins.
func New(c *autoscaling.Core, nodes kubernetes.Interface, group string, o Options) (*JoinCanary, error) {
	g, err := c.Group(group)
	if err != nil {
		return nil, fmt.Errorf("canary group: %w", err)
	}
	if nodes == nil {
		return nil, fmt.Errorf("canary group %q: no cluster to watch its Node in: give the kubeconfig of the cluster its machines join (the provider's kubeconfig or bootstrap.kubeconfig, $KUBECONFIG, or in-cluster)", group)
	}
	if !g.Capabilities.BootsImages {
		return nil, fmt.Errorf("canary group %q: provider %q can't boot custom images, so it can't boot the image under test; pick a group of a provider that can", group, g.Provider)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Poll <= 0 {
		o.Poll = defaultPoll
	}
	if o.CleanupTimeout <= 0 {
		o.CleanupTimeout = defaultCleanup
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return &JoinCanary{core: c, group: g, nodes: nodes, opts: o}, nil
}

func (j *JoinCanary) String() string {
	return Description(j.group.Provider, j.group.ID, j.opts.Timeout)
}

// Description is how a JoinCanary of group names itself in progress lines
// and refresh results.
func Description(provider, group string, timeout time.Duration) string {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return fmt.Sprintf("join of one %s machine of group %s (timeout %s)", provider, group, timeout)
}

func (j *JoinCanary) progress(format string, args ...any) {
	fmt.Fprintf(j.opts.Progress, "canary %s: %s\n", j.group.ID, fmt.Sprintf(format, args...))
}

// Check boots one machine of the group from im, waits until its Node is
// Ready, labelled with im.ID and (where bootstrap ran) reports a prebaked
// boot, and cleans up. nil means the image passed.
func (j *JoinCanary) Check(ctx context.Context, im imagecatalog.Image) (err error) {
	g := j.group
	fail := func(err error) error {
		return fmt.Errorf("canary on group %q, image %s: %w", g.ID, im.ID, err)
	}
	if im.ID == "" {
		return fail(errors.New("the image has no id"))
	}
	if im.Provider != "" && im.Provider != g.Provider {
		return fail(fmt.Errorf("the image is for provider %q but the group's provider is %q; pick a group of %s", im.Provider, g.Provider, im.Provider))
	}
	if k, kerr := im.Key(); kerr == nil {
		if err := fitsGroup(k, g.Image); err != nil {
			return fail(err)
		}
	}
	// A fresh List, so the maxSize check counts what exists now.
	j.core.Sync(ctx, true)
	r, err := j.core.Reserve(g.ID, im.ID, providers.Taint{Key: providers.TaintCanary, Value: g.ID, Effect: string(corev1.TaintEffectNoSchedule)})
	if err != nil {
		return fail(err)
	}
	machine := r.Machine().Name
	j.progress("booting machine %s from image %s (tainted %s=%s:NoSchedule)", machine, im.ID, providers.TaintCanary, g.ID)
	var nodeSeen string // the Node name, once one registered
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.opts.CleanupTimeout)
		defer cancel()
		if cerr := j.cleanup(cctx, r, nodeSeen); cerr != nil {
			err = errors.Join(err, fail(fmt.Errorf("cleanup: %w", cerr)))
		}
	}()

	start := time.Now()
	if cerr := r.Create(ctx); cerr != nil {
		var ce *autoscaling.CreateError
		if !errors.As(cerr, &ce) {
			return fail(fmt.Errorf("cancelled while the machine was being created: %w", cerr))
		}
		what := "create failed"
		if ce.Class == providers.ErrorOutOfResources {
			what = "no capacity"
		}
		if ctx.Err() != nil {
			what += " (cancelled)"
		}
		return fail(fmt.Errorf("%s (%s): %s", what, ce.Code, ce.Message))
	}
	wctx, cancel := context.WithTimeout(ctx, j.opts.Timeout)
	defer cancel()
	t := time.NewTicker(j.opts.Poll)
	defer t.Stop()
	var (
		reported time.Time
		last     string
	)
	for {
		s := j.look(wctx, r)
		if s.String() != last || time.Since(reported) >= progressEvery {
			j.progress("after %s: %s", time.Since(start).Round(time.Second), s)
			reported, last = time.Now(), s.String()
		}
		if s.Node != "" {
			nodeSeen = s.Node
		}
		passed, verr := judge(s, im.ID, g.ID, g.RendersUserData)
		if verr != nil {
			return fail(fmt.Errorf("%w; saw: %s", verr, s))
		}
		if passed {
			j.progress("passed: %s joined as a Ready node of image %s", s.Node, im.ID)
			return nil
		}
		select {
		case <-wctx.Done():
			why := fmt.Sprintf("no Ready node after %s", j.opts.Timeout)
			if ctx.Err() != nil {
				why = "cancelled: " + ctx.Err().Error()
			}
			return fail(fmt.Errorf("%s; last saw: %s", why, s))
		case <-t.C:
		}
	}
}

// fitsGroup checks that an image of key k is one group g (whose query key
// is want) boots: its arch, and its OS release and k8s minor where the
// group pins them. A recipe of several keys needs a canary group per key.
func fitsGroup(k, want imagecatalog.Key) error {
	for _, f := range []struct{ what, got, want string }{
		{"arch", k.Arch, want.Arch}, {"os", k.OS, want.OS}, {"k8s minor", k.K8sMinor, want.K8sMinor},
	} {
		if f.want != imagecatalog.Any && f.got != f.want {
			return fmt.Errorf("the image's %s is %s but the group boots %s; run refresh with --only for the keys this group can test", f.what, f.got, f.want)
		}
	}
	return nil
}

// sight is what the canary saw of its machine and Node at one moment.
type sight struct {
	Machine string // the machine's name
	// State is the machine's state as the core last listed it, or "gone".
	State      string
	MachineErr string
	Node       string // "" until a Node of the machine registered
	// Ready is the Ready condition: True, False or Unknown with its
	// reason, or "absent".
	Ready string
	// Blocking are taints that keep the node from counting as ready.
	Blocking  []string
	Image     string // the Node's LabelImage
	ImageKind string // the Node's LabelImageKind
	Tainted   bool   // the Node carries the canary taint
	Bootstrap string // the Node's bootstrap.NodeAnnotation, "" when absent
	ready     bool
}

func (s sight) String() string {
	if s.Machine == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "machine %s %s", s.Machine, s.State)
	if s.MachineErr != "" {
		fmt.Fprintf(&b, " (error: %s)", s.MachineErr)
	}
	if s.Node == "" {
		b.WriteString("; no Node registered")
		return b.String()
	}
	fmt.Fprintf(&b, "; Node %s registered, Ready=%s", s.Node, s.Ready)
	if len(s.Blocking) > 0 {
		fmt.Fprintf(&b, ", taints %s", strings.Join(s.Blocking, ","))
	}
	fmt.Fprintf(&b, ", labels %s=%q %s=%q, canary taint %v", providers.LabelImage, s.Image, providers.LabelImageKind, s.ImageKind, s.Tainted)
	if s.Bootstrap == "" {
		fmt.Fprintf(&b, ", no %s annotation", bootstrap.NodeAnnotation)
	} else {
		fmt.Fprintf(&b, ", %s=%q", bootstrap.NodeAnnotation, s.Bootstrap)
	}
	return b.String()
}

// judge decides on one sight: passed, failed for good (err), or neither
// (wait). needReport: the machine's user-data is bootstrap's, whose node
// script annotates its Node with what it did.
func judge(s sight, image, group string, needReport bool) (passed bool, err error) {
	switch {
	case s.State == "gone":
		return false, errors.New("the machine vanished from the cloud")
	case s.MachineErr != "":
		return false, fmt.Errorf("the cloud reports the machine failed: %s", s.MachineErr)
	case s.Node == "":
		return false, nil
	case s.Image != image:
		return false, fmt.Errorf("the Node carries %s=%q, not the image under test", providers.LabelImage, s.Image)
	case !s.Tainted:
		return false, fmt.Errorf("the Node lacks the taint %s=%s:NoSchedule the canary asked for (a userDataFile that ignores the group's taints?); pods may have landed on it", providers.TaintCanary, group)
	}
	if s.Bootstrap != "" {
		r, err := bootstrap.ParseNodeAnnotation(s.Bootstrap)
		if err != nil {
			return false, err
		}
		if !r.Prebaked {
			return false, errors.New("bootstrap found no image manifest and installed at runtime: the image is not prebaked")
		}
		if r.RanInstall() {
			return false, errors.New("bootstrap ran a runtime install on a prebaked image: the image lacks components (or versions) it should carry")
		}
	}
	if !s.ready {
		return false, nil
	}
	if needReport && s.Bootstrap == "" {
		return false, nil // the script annotates shortly after the join
	}
	return true, nil
}

// look reads the machine's state from the core and its Node from the
// cluster.
func (j *JoinCanary) look(ctx context.Context, r *autoscaling.Reservation) sight {
	m := r.Machine()
	s := sight{Machine: m.Name, State: m.State.String()}
	if m.Gone {
		s.State = "gone"
	}
	if m.Error != nil {
		s.MachineErr = m.Error.Code + ": " + m.Error.Message
	}
	pid, name := m.ProviderID, m.Name
	n, err := j.findNode(ctx, pid, name)
	if err != nil {
		s.Ready = "unknown (" + err.Error() + ")"
		return s
	}
	if n == nil {
		return s
	}
	s.Node, s.Ready = n.Name, "absent"
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			s.Ready = string(cond.Status)
			if cond.Status != corev1.ConditionTrue && cond.Reason != "" {
				s.Ready += " (" + cond.Reason + ")"
			}
		}
	}
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeNetworkUnavailable:
			s.Blocking = append(s.Blocking, t.Key)
		case providers.TaintCanary:
			s.Tainted = t.Value == j.group.ID && t.Effect == corev1.TaintEffectNoSchedule
		}
	}
	s.Image, s.ImageKind = n.Labels[providers.LabelImage], n.Labels[providers.LabelImageKind]
	s.Bootstrap = n.Annotations[bootstrap.NodeAnnotation]
	s.ready = providers.NodeReady(n)
	return s
}

// findNode returns the group's Node with this providerID (or, before the
// kubelet set one, this name), nil when none registered yet.
func (j *JoinCanary) findNode(ctx context.Context, providerID, name string) (*corev1.Node, error) {
	sel := providers.LabelCluster + "=" + j.core.Cluster() + "," + providers.LabelGroup + "=" + j.group.ID
	list, err := j.nodes.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list the group's Nodes: %w", err)
	}
	for i := range list.Items {
		n := &list.Items[i]
		if providerID != "" && n.Spec.ProviderID == providerID || n.Name == name {
			return n, nil
		}
	}
	return nil, nil
}

// cleanup deletes the canary's machine and Node and revokes its join
// tokens; each step runs even when another failed.
func (j *JoinCanary) cleanup(ctx context.Context, r *autoscaling.Reservation, nodeName string) error {
	var errs []error
	machine := r.Machine().Name
	revoked, err := r.Release(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	// The Node after the machine, so no kubelet registers it again: the one
	// seen, and one that registered since the last look.
	names := []string{nodeName}
	if n, err := j.findNode(ctx, r.Machine().ProviderID, machine); err != nil {
		errs = append(errs, err)
	} else if n != nil {
		names = append(names, n.Name)
	}
	for _, name := range slices.Compact(names) {
		if name == "" {
			continue
		}
		err := j.nodes.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete Node %s: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		j.progress("cleanup of %s incomplete: %v", machine, err)
		return err
	}
	j.progress("cleaned up: machine %s and its Node deleted, %d join token(s) revoked", machine, revoked)
	return nil
}
