package app

import (
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/bootstrap"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/static/statictest"
)

// TestServeRendersBootstrapUserData runs `prebake serve` on
// examples/hcloud.yaml plus a bootstrap block that points at a real
// kube-apiserver: every server the fake Hetzner API receives carries
// #cloud-config with the node script and its own join token, which exists as
// a bootstrap-token Secret in the cluster.
func TestServeRendersBootstrapUserData(t *testing.T) {
	kc := statictest.StartCluster(t)
	t.Setenv("HCLOUD_TOKEN", "serve-test-token")
	f := hcloudfake.New(hcloudfake.Options{Token: "serve-test-token"})
	t.Cleanup(f.Close)
	example, err := os.ReadFile("../../../examples/hcloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(example), "# endpoint: https://api.hetzner.cloud/v1", "endpoint: "+f.URL(), 1) + `
bootstrap:
  apiServerEndpoint: 10.0.0.1:6443
  caCertHashes: ["sha256:abababababababababababababababababababababababababababababababab"]
  kubeconfig: ` + kc.Kubeconfig + `
  components:
    - {name: containerd, version: 1.6.20~ds1-1+b1}
`
	ctx := t.Context()
	c := serveConfig(t, cfg)
	if _, err := c.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "cx-fsn1", Delta: 2}); err != nil {
		t.Fatal(err)
	}
	c.until("2 servers", 15*time.Second, func() bool { return len(f.Servers()) == 2 })
	kube, err := kubernetes.NewForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: bootstrap.ManagedByLabel + "=" + bootstrap.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 2 {
		t.Fatalf("%d join-token Secrets, want 2 (one per server)", len(secrets.Items))
	}
	for _, s := range f.Servers() {
		ud := s.UserData
		if !strings.HasPrefix(ud, "#cloud-config\n") || !strings.Contains(ud, "kubeadm join") || !strings.Contains(ud, s.Name) {
			t.Errorf("server %s user-data is not the rendered node script:\n%.300s", s.Name, ud)
		}
		found := 0
		for _, sec := range secrets.Items {
			id := strings.TrimPrefix(sec.Name, "bootstrap-token-")
			if strings.Contains(ud, id+"."+string(sec.Data["token-secret"])) {
				found++
			}
		}
		if found != 1 {
			t.Errorf("server %s user-data carries %d of the cluster's join tokens, want exactly its own", s.Name, found)
		}
	}
}
