package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubefake "k8s.io/client-go/kubernetes/fake"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/deploy"
	"github.com/prebake-dev/prebake/externalgrpc"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// The provider configs deploy/ ships (every component that generates
// prebake-config, found by shippedConfigs so a new one is not missed), each
// served with the expanders deploy/base runs CA with: prebake is told the
// same value, and for every group of every config it answers what those
// expanders call (the price expander: PricingNodePrice of the group's
// template node and PricingPodPrice). This is what the real CA 1.36.1
// found broken. deploy's TestOverlays holds every rendered overlay to the
// same --ca-expander.
func TestShippedConfigsServeTheShippedExpanders(t *testing.T) {
	t.Parallel()
	expander, err := deploy.CAExpander()
	if err != nil {
		t.Fatal(err)
	}
	told, ok, err := deploy.BaseArg("prebake.yaml", "prebake", "--ca-expander")
	if err != nil || !ok || told != expander {
		t.Fatalf("deploy/base's prebake --ca-expander = %q (%v, %v), want CA's --expander %q", told, ok, err, expander)
	}
	for component, path := range shippedConfigs(t) {
		t.Run(component, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			standIns(t, cfg)
			bc, err := buildCore(context.Background(), cfg, component, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), kubefake.NewClientset())
			if err != nil {
				t.Fatal(err)
			}
			if err := bc.core.CheckExpanders(expander); err != nil {
				t.Errorf("the shipped config can't serve the shipped expanders: %v", err)
			}
			srv := externalgrpc.NewServer(bc.core)
			now := time.Now()
			start, end := timestamppb.New(now), timestamppb.New(now.Add(time.Hour))
			for _, g := range cfg.NodeGroups {
				b, err := bc.core.TemplateNode(g.ID)
				if err != nil {
					t.Fatal(err)
				}
				tmpl := &corev1.Node{}
				if err := tmpl.Unmarshal(b); err != nil {
					t.Fatal(err)
				}
				node := &protos.ExternalGrpcNode{Name: "template-node-for-" + g.ID + "-1", Labels: tmpl.Labels}
				if np, err := srv.PricingNodePrice(t.Context(), &protos.PricingNodePriceRequest{Node: node, StartTimestamp: start, EndTimestamp: end}); err != nil || np.GetPrice() <= 0 {
					t.Errorf("group %s: PricingNodePrice = %v, %v; want a price", g.ID, np.GetPrice(), err)
				}
				pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("500Mi"),
				}}}}}}
				pb, err := pod.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				if pp, err := srv.PricingPodPrice(t.Context(), &protos.PricingPodPriceRequest{PodBytes: pb, StartTimestamp: start, EndTimestamp: end}); err != nil || pp.GetPrice() <= 0 {
					t.Errorf("PricingPodPrice of CA's stabilisation pod = %v, %v; want a price", pp.GetPrice(), err)
				}
			}
		})
	}
}

// componentsDir is deploy/components, from this package.
const componentsDir = "../../../deploy/components"

// shippedConfigs returns the prebake config of every component in
// deploy/components whose kustomization generates the prebake-config
// ConfigMap, by component name: the configs prebake serve runs with in
// some shipped overlay.
func shippedConfigs(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(componentsDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(componentsDir, e.Name(), "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			ConfigMapGenerator []struct {
				Name  string   `json:"name"`
				Files []string `json:"files"`
			} `json:"configMapGenerator"`
		}
		if err := sigsyaml.Unmarshal(raw, &k); err != nil {
			t.Fatalf("deploy/components/%s/kustomization.yaml: %v", e.Name(), err)
		}
		for _, g := range k.ConfigMapGenerator {
			if g.Name != "prebake-config" {
				continue
			}
			// A file entry is "path" or "key=path"; prebake serve reads
			// the key config.yaml (--config in deploy/base/prebake.yaml).
			for _, f := range g.Files {
				key, file, found := strings.Cut(f, "=")
				if !found {
					key, file = filepath.Base(f), f
				}
				if key == "config.yaml" {
					out[e.Name()] = filepath.Join(componentsDir, e.Name(), file)
				}
			}
			if out[e.Name()] == "" {
				t.Errorf("deploy/components/%s generates prebake-config without a config.yaml key", e.Name())
			}
		}
	}
	// The four that ship today: if discovery finds fewer, it is broken.
	for _, c := range []string{"kwok", "hcloud", "hcloud-bootstrap", "static"} {
		if out[c] == "" {
			t.Errorf("no prebake config found for deploy/components/%s (found %v)", c, out)
		}
	}
	return out
}

// standIns points what a shipped config needs of its cluster at stand-ins:
// the Hetzner API at hcloudfake, secrets and files at temporary ones, the
// clusters at an address nothing is asked of (the test makes no call that
// needs them).
func standIns(t *testing.T, cfg *config.Config) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kubeconfig := write("kubeconfig", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n")
	if k := cfg.Providers.Kwok; k != nil {
		k.Kubeconfig = kubeconfig
	}
	if h := cfg.Providers.Hcloud; h != nil {
		f := hcloudfake.New(hcloudfake.Options{Token: "tok"})
		t.Cleanup(f.Close)
		h.Endpoint, h.Token = f.URL(), config.SecretRef{File: write("token", "tok\n")}
	}
	if s := cfg.Providers.Static; s != nil {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		block, err := ssh.MarshalPrivateKey(key, "")
		if err != nil {
			t.Fatal(err)
		}
		s.Kubeconfig = kubeconfig
		s.PrivateKey = config.SecretRef{File: write("id_ed25519", string(pem.EncodeToMemory(block)))}
		s.KnownHosts = write("known_hosts", "")
	}
	if cfg.ImageCatalog.ConfigMap != "" {
		cfg.ImageCatalog.Kubeconfig = kubeconfig
	}
}
