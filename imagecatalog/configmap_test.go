package imagecatalog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The client-go fake does not enforce resourceVersion, so these tests check
// the store's own logic; configmap_e2e_test.go proves the compare-and-swap
// against a real kube-apiserver.

func TestConfigMapStoreCreateLoadSave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := fake.NewClientset()
	s := ConfigMapStore{Client: cs.CoreV1(), Namespace: "kube-system", Name: "prebake-images"}
	c, rev, err := s.Load(ctx)
	if err != nil || len(c.Images) != 0 || rev != (Revision{}) {
		t.Fatalf("Load of a missing ConfigMap = %v, %+v, %v; want empty", c, rev, err)
	}
	want := scenario(t)
	if _, err := s.Save(ctx, want, rev); err != nil {
		t.Fatal(err)
	}
	// A second first save loses: the ConfigMap exists now.
	if _, err := s.Save(ctx, want, rev); !errors.Is(err, ErrConflict) {
		t.Errorf("second create: %v, want ErrConflict", err)
	}
	got, rev, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("loaded (-want +got):\n%s", d)
	}
	if rev.Generation != 1 {
		t.Errorf("generation %d, want 1", rev.Generation)
	}
	// Save keeps keys, labels and annotations that are not ours.
	cm, _ := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "prebake-images", metav1.GetOptions{})
	cm.Data["README"] = "managed by prebake images"
	cm.Annotations = map[string]string{"owner": "platform"}
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, rev, _ = s.Load(ctx)
	next, _, err := Deprecate(got, "E", "bad", got.Images[0].Created)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, next, rev); err != nil {
		t.Fatal(err)
	}
	cm, _ = cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "prebake-images", metav1.GetOptions{})
	if cm.Data["README"] == "" || cm.Annotations["owner"] != "platform" || !strings.Contains(cm.Data[ConfigMapKey], "generation: 2") {
		t.Errorf("after save: data keys %v, annotations %v", cm.Data, cm.Annotations)
	}
}

func TestConfigMapStoreMapsConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := fake.NewClientset()
	s := ConfigMapStore{Client: cs.CoreV1(), Namespace: "ns", Name: "cat"}
	if _, err := s.Save(ctx, scenario(t), Revision{}); err != nil {
		t.Fatal(err)
	}
	// The API server answers 409 when the resourceVersion is stale.
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if obj.ResourceVersion != "fresh" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, obj.Name, errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	c, rev, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rev.Hash = "rv:stale"
	if _, err := s.Save(ctx, c, rev); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "resourceVersion stale") {
		t.Errorf("stale save: %v, want ErrConflict naming the resourceVersion", err)
	}
	// Deleted since loaded: a conflict too.
	if err := cs.CoreV1().ConfigMaps("ns").Delete(ctx, "cat", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, c, rev); !errors.Is(err, ErrConflict) {
		t.Errorf("save after delete: %v, want ErrConflict", err)
	}
	// A document someone broke by hand is an error naming the ConfigMap.
	if _, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cat", Namespace: "ns"},
		Data: map[string]string{ConfigMapKey: "kind: Nope\n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load(ctx); err == nil || !strings.Contains(err.Error(), "configmap://ns/cat#catalog.yaml") {
		t.Errorf("load of a broken document: %v, want an error naming configmap://ns/cat#catalog.yaml", err)
	}
}
