package app

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/imagecatalog"
)

// TestCatalogFromConfigMap: imageCatalog.configMap reads the catalog the
// image-refresh CronJob writes, through the cluster client serve already has.
func TestCatalogFromConfigMap(t *testing.T) {
	t.Parallel()
	cat, _, err := imagecatalog.FileStore{Path: "../../../examples/kwok-catalog.yaml"}.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := imagecatalog.Marshal(cat, 3)
	if err != nil {
		t.Fatal(err)
	}
	kube := kubefake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "prebake-images"},
		Data:       map[string]string{imagecatalog.ConfigMapKey: string(doc)},
	})
	src, err := catalogSource(&config.Config{ImageCatalog: config.ImageCatalog{ConfigMap: "kube-system/prebake-images"}}, kube)
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.LoadCatalog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Images) != 1 || len(got.Channels) != 1 || got.Channels[0].Image != cat.Channels[0].Image {
		t.Errorf("catalog from the ConfigMap = %+v, want the example's", got)
	}
	if src, err := catalogSource(&config.Config{}, kube); src != nil || err != nil {
		t.Errorf("no imageCatalog: source %v, err %v; want none", src, err)
	}
}
