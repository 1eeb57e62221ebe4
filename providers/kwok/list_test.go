package kwok

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/providers"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func testLease(name, cluster, group string, requested time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name:      name,
		Namespace: DefaultNamespace,
		Labels:    ownerLabels(cluster, group, providers.ImagePrebaked, "", name),
		Annotations: map[string]string{
			AnnotationProviderID:  "kwok://" + name,
			annotationMachineType: "kwok-small",
			annotationZone:        "zone-a",
			AnnotationRequestedAt: requested.Format(time.RFC3339Nano),
			annotationBootEndsAt:  requested.Add(time.Second).Format(time.RFC3339Nano),
			annotationNodeLabels:  `{}`,
			annotationNodeTaints:  `[]`,
		},
	}}
}

func testNode(name, cluster, group, providerID string, created time.Time) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Labels:            map[string]string{providers.LabelCluster: cluster, providers.LabelGroup: group, providers.LabelImageKind: "prebaked"},
			CreationTimestamp: metav1.NewTime(created),
		},
		Spec: corev1.NodeSpec{ProviderID: providerID},
	}
}

func TestListOwnershipAndStates(t *testing.T) {
	t.Parallel()
	deleting := testLease("deleting", testCluster, "pool-a", t0)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Minute)}
	deleting.Finalizers = []string{"example.com/hold"}
	deletingNode := testNode("node-deleting", testCluster, "pool-a", "kwok://node-deleting", t0)
	deletingNode.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Minute)}
	deletingNode.Finalizers = []string{"example.com/hold"}
	damaged := testLease("damaged", testCluster, "pool-b", t0)
	damaged.Annotations = nil
	damaged.CreationTimestamp = metav1.NewTime(t0.Truncate(time.Second))

	objs := []runtime.Object{
		testLease("running", testCluster, "pool-a", t0),
		testNode("running", testCluster, "pool-a", "kwok://running", t0.Add(time.Second)),
		testLease("booting", testCluster, "pool-b", t0),
		deleting,
		deletingNode,
		damaged,
		testNode("orphan", testCluster, "pool-a", "kwok://orphan", t0),
		testLease("theirs", "prod", "pool-a", t0),
		testNode("theirs", "prod", "pool-a", "kwok://theirs", t0),
		testNode("hcloud-1", testCluster, "pool-a", "hcloud://1", t0),
		testNode("unlabelled", "", "", "kwok://unlabelled", t0),
	}
	p := newTestProvider(t, fake.NewClientset(objs...), nil)

	inst := func(name, group string, state providers.InstanceState, created time.Time) providers.Instance {
		return providers.Instance{ProviderID: "kwok://" + name, Name: name, Group: group, State: state, ImageKind: providers.ImagePrebaked, CreatedAt: created}
	}
	want := []providers.Instance{
		inst("booting", "pool-b", providers.StateCreating, t0),
		inst("damaged", "pool-b", providers.StateCreating, t0.Truncate(time.Second)),
		inst("deleting", "pool-a", providers.StateDeleting, t0),
		inst("node-deleting", "pool-a", providers.StateDeleting, t0),
		inst("orphan", "pool-a", providers.StateRunning, t0),
		inst("running", "pool-a", providers.StateRunning, t0),
	}
	if diff := cmp.Diff(want, listInstances(t, p)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}
