package standin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func tmpl(cpu string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Allocatable: alloc, Capacity: alloc},
	}
}

func pod(name, cpu string, selector map[string]string, tols ...corev1.Toleration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{
			NodeSelector: selector,
			Tolerations:  tols,
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi"),
			}}}},
		},
	}
}

func pods(n int, cpu string, selector map[string]string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = pod(string(rune('a'+i)), cpu, selector)
	}
	return out
}

var batchTaint = corev1.Taint{Key: "workload", Value: "batch", Effect: corev1.TaintEffectNoSchedule}

// outcome is the comparable summary of a plan.
type outcome struct {
	Absorbed  int
	Group     string
	NodePods  []int // pods per new node
	Skipped   map[string]string
	Remaining int
}

func summarise(p plan) outcome {
	o := outcome{Absorbed: len(p.Absorbed), Remaining: len(p.Remaining), Skipped: p.Skipped}
	if p.Best != nil {
		o.Group = p.Best.Group
		for _, n := range p.Best.Nodes {
			o.NodePods = append(o.NodePods, len(n))
		}
	}
	if len(o.Skipped) == 0 {
		o.Skipped = nil
	}
	return o
}

func TestPlanScaleUp(t *testing.T) {
	small := tmpl("1900m", map[string]string{"pool": "small"})
	large := tmpl("7900m", map[string]string{"pool": "large", "workload": "batch"}, batchTaint)
	batchTol := corev1.Toleration{Key: "workload", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule}

	tests := []struct {
		name     string
		pending  []*corev1.Pod
		existing []simNode
		groups   []groupInput
		want     outcome
	}{
		{
			name:    "scale from zero: one pod, one node",
			pending: pods(1, "500m", nil),
			groups:  []groupInput{{ID: "small", Template: small, Max: 10}},
			want:    outcome{Group: "small", NodePods: []int{1}, Remaining: 1},
		},
		{
			name:    "first-fit binpacking: 5 × 500m on 1900m nodes is 3 + 2",
			pending: pods(5, "500m", nil),
			groups:  []groupInput{{ID: "small", Template: small, Max: 10}},
			want:    outcome{Group: "small", NodePods: []int{3, 2}, Remaining: 5},
		},
		{
			name:    "upcoming nodes absorb what they can; the rest scales up",
			pending: pods(5, "500m", nil),
			groups:  []groupInput{{ID: "small", Template: small, Target: 1, Max: 10, Upcoming: 1}},
			want:    outcome{Absorbed: 3, Group: "small", NodePods: []int{2}, Remaining: 2},
		},
		{
			name:     "free room on a Ready node absorbs the pod",
			pending:  pods(1, "500m", nil),
			existing: []simNode{{name: "n1", labels: map[string]string{"pool": "small"}, free: small.Status.Allocatable}},
			groups:   []groupInput{{ID: "small", Template: small, Target: 1, Max: 10}},
			want:     outcome{Absorbed: 1},
		},
		{
			name:    "room up to max size only",
			pending: pods(5, "500m", nil),
			groups:  []groupInput{{ID: "small", Template: small, Target: 9, Max: 10}},
			want:    outcome{Group: "small", NodePods: []int{3}, Remaining: 5},
		},
		{
			name:    "nodeSelector picks the group",
			pending: []*corev1.Pod{pod("p", "500m", map[string]string{"pool": "large"}, batchTol)},
			groups:  []groupInput{{ID: "small", Template: small, Max: 10}, {ID: "large", Template: large, Max: 5}},
			want:    outcome{Group: "large", NodePods: []int{1}, Remaining: 1, Skipped: map[string]string{"small": "no pending pod fits its template"}},
		},
		{
			name:    "a taint keeps pods without the toleration off",
			pending: []*corev1.Pod{pod("p", "500m", map[string]string{"pool": "large"})},
			groups:  []groupInput{{ID: "large", Template: large, Max: 5}},
			want:    outcome{Remaining: 1, Skipped: map[string]string{"large": "no pending pod fits its template"}},
		},
		{
			name:    "a pod too big for every template",
			pending: pods(1, "3", nil),
			groups:  []groupInput{{ID: "small", Template: small, Max: 10}},
			want:    outcome{Remaining: 1, Skipped: map[string]string{"small": "no pending pod fits its template"}},
		},
		{
			name:    "backed off and full groups are skipped; the next group takes the pod",
			pending: pods(1, "500m", nil),
			groups: []groupInput{
				{ID: "stockout", Template: small, Max: 10, Skip: "backed off"},
				{ID: "full", Template: small, Target: 3, Max: 3},
				{ID: "fallback", Template: small, Max: 10},
			},
			want: outcome{Group: "fallback", NodePods: []int{1}, Remaining: 1,
				Skipped: map[string]string{"stockout": "backed off", "full": "at max size"}},
		},
		{
			name:    "equal options: the group listed first wins",
			pending: pods(1, "500m", nil),
			groups:  []groupInput{{ID: "a", Template: small, Max: 10}, {ID: "b", Template: small, Max: 10}},
			want:    outcome{Group: "a", NodePods: []int{1}, Remaining: 1},
		},
		{
			name:    "equal pods: fewer nodes wins",
			pending: pods(4, "500m", nil),
			groups:  []groupInput{{ID: "small", Template: small, Max: 10}, {ID: "big", Template: tmpl("7900m", nil), Max: 10}},
			want:    outcome{Group: "big", NodePods: []int{4}, Remaining: 4},
		},
		{
			name:    "a group without a template can't be chosen",
			pending: pods(1, "500m", nil),
			groups:  []groupInput{{ID: "none", Max: 10}},
			want:    outcome{Remaining: 1, Skipped: map[string]string{"none": "no template"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := summarise(planScaleUp(tt.pending, tt.existing, tt.groups))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanDoesNotChangeItsInputs(t *testing.T) {
	free := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	existing := []simNode{{name: "n", free: free}}
	planScaleUp(pods(1, "500m", nil), existing, nil)
	if got := existing[0].free[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("planScaleUp changed the caller's free room to %s", got.String())
	}
}

func TestTolerates(t *testing.T) {
	taint := &corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		tol  corev1.Toleration
		want bool
	}{
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpEqual, Value: "v"}, true},
		{corev1.Toleration{Key: "k", Value: "v"}, true},
		{corev1.Toleration{Key: "k", Value: "other"}, false},
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{corev1.Toleration{Key: "other", Operator: corev1.TolerationOpExists}, false},
	}
	for _, tt := range tests {
		if got := tolerates(tt.tol, taint); got != tt.want {
			t.Errorf("tolerates(%+v) = %v, want %v", tt.tol, got, tt.want)
		}
	}
}

func TestPodRequests(t *testing.T) {
	p := pod("p", "500m", nil)
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("64Mi"),
	}}}}
	got := podRequests(p)
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "2", corev1.ResourceMemory: "256Mi", corev1.ResourcePods: "1"} {
		if q := got[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %s, want %s", name, q.String(), want)
		}
	}
}
