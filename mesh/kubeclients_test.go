package mesh

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestKubeClients(t *testing.T) {
	t.Parallel()
	cfg := clientcmdapi.NewConfig()
	for _, n := range []string{"ctx-a", "b"} {
		cfg.Clusters[n] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		cfg.AuthInfos[n] = &clientcmdapi.AuthInfo{Token: "t"}
		cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	// a uses its context, b the context named like it.
	clients, err := KubeClients([]Cluster{{Name: "a", Context: "ctx-a"}, {Name: "b"}}, path)
	if err != nil || clients["a"] == nil || clients["b"] == nil {
		t.Fatalf("KubeClients: %v, %v", clients, err)
	}
	_, err = KubeClients([]Cluster{{Name: "c", Source: "clusters.yaml:7"}}, path)
	if err == nil || !strings.Contains(err.Error(), `cluster "c" (clusters.yaml:7): kubeconfig context "c"`) {
		t.Errorf("missing context: err %v, want one naming the cluster and context", err)
	}
}
