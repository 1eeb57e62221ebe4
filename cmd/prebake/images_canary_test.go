package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// canaryCloud is the Hetzner fake with a ProviderConfig that also has a
// bootstrap block (join tokens in the fake cluster), and that cluster.
type canaryCloud struct {
	cliCloud
	kube *kubefake.Clientset
}

func newCanaryCloud(t *testing.T) canaryCloud {
	t.Helper()
	cloud := newCLICloud(t)
	cfg, err := os.ReadFile(cloud.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, []byte(`bootstrap:
  apiServerEndpoint: 10.0.0.1:6443
  caCertHashes: ["sha256:abababababababababababababababababababababababababababababababab"]
  components:
    - {name: containerd, version: 1.6.20~ds1-1+b1}
`)...)
	if err := os.WriteFile(cloud.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	return canaryCloud{cloud, kubefake.NewClientset()}
}

// runKubelet stands in for the kubelets of group g's servers until ctx
// ends: each server that is not a builder and not being deleted registers
// once as a Ready Node with its labels, the canary taint when its user-data
// asks for it, and report as bootstrap's annotation.
func runKubelet(ctx context.Context, t *testing.T, c canaryCloud, report string) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	registered := map[int64]bool{}
	for {
		for _, s := range c.fake.Servers() {
			if s.Labels[providers.LabelGroup] != "g" || s.Status == "deleting" || registered[s.ID] {
				continue
			}
			registered[s.ID] = true
			n := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: s.Name, Annotations: map[string]string{bootstrap.NodeAnnotation: report}, Labels: map[string]string{
					providers.LabelCluster: "test", providers.LabelGroup: "g", providers.LabelImage: s.Labels[providers.LabelImage],
					providers.LabelImageKind: s.Labels[providers.LabelImageKind],
				}},
				Spec:   corev1.NodeSpec{ProviderID: fmt.Sprintf("hcloud://%d", s.ID)},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
			}
			if strings.Contains(s.UserData, "key: prebake.dev/canary") && strings.HasPrefix(s.UserData, "#cloud-config") {
				n.Spec.Taints = []corev1.Taint{{Key: providers.TaintCanary, Value: "g", Effect: corev1.TaintEffectNoSchedule}}
			}
			if _, err := c.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
				t.Errorf("kubelet of %s: %v", s.Name, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runImagesWith is runImagesSplit with the fake cluster in place of the real one.
func runImagesWith(t *testing.T, c canaryCloud, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newImagesCommandWith(imagesDeps{kube: c.kube})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as main's root does
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// background runs fn until the test ends.
func background(t *testing.T, fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fn(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The canary through the CLI: refresh builds a candidate, boots one
// machine of group g from it, promotes it once that machine's Node is
// Ready and says prebaked, and leaves no server, Node or join token. A
// machine whose bootstrap installed at runtime fails the canary: nothing is
// promoted, and still nothing is left.
func TestImagesCLIRefreshCanaryGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, report string
		wantErr      string // "" means promoted
	}{
		{name: "prebaked node", report: "prebaked=true total=2100ms manifest=3ms/ok plan=20ms/ok install=0ms/skipped configure=40ms/ok kubelet=5ms/ok join=2000ms/ok"},
		{name: "runtime install", report: "prebaked=true total=90000ms manifest=3ms/ok plan=20ms/ok install=88000ms/ok join=2000ms/ok",
			wantErr: "bootstrap ran a runtime install on a prebaked image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cloud := newCanaryCloud(t)
			background(t, func(ctx context.Context) { runKubelet(ctx, t, cloud, tc.report) })
			cat := filepath.Join(cloud.dir, "images.yaml")
			out, progress, err := runImagesWith(t, cloud, "refresh", "--recipe", writeRecipe(t, cloud.dir, cliVersions()), "--catalog", cat,
				"--config", cloud.config, "--poll", "5ms", "--canary-group", "g", "--canary-timeout", "1m", "-o", "json")
			var res []imagecatalog.RefreshResult
			if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || len(res) != 1 || !res[0].Built {
				t.Fatalf("refresh: %v, output %v\n%s\nprogress:\n%s", err, jerr, out, progress)
			}
			stable, _, rerr := runImagesSplit(t, "resolve", "--catalog", cat)
			if tc.wantErr == "" {
				if err != nil || !res[0].Promoted {
					t.Fatalf("refresh = %+v, %v; want promoted\nprogress:\n%s", res[0], err, progress)
				}
				if rerr != nil || stable != res[0].Image+"\n" {
					t.Errorf("stable = %q, %v; want %s", stable, rerr, res[0].Image)
				}
				for _, want := range []string{"running canary join of one hcloud machine of group g", "canary g: booting machine g-", "canary g: passed: g-"} {
					if !strings.Contains(progress, want) {
						t.Errorf("progress lacks %q:\n%s", want, progress)
					}
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || res[0].Promoted {
					t.Fatalf("refresh = %+v, %v; want not promoted and %q\nprogress:\n%s", res[0], err, tc.wantErr, progress)
				}
				if rerr == nil {
					t.Errorf("stable resolves to %q after a failed canary", stable)
				}
			}
			// Nothing left behind: one builder and one canary server were
			// made (the kubelet tainted the canary's Node only because its
			// user-data asked for the taint), and both are gone.
			if n := cloud.fake.Calls("POST", "/servers"); n != 2 {
				t.Errorf("%d servers created, want the builder and the canary", n)
			}
			if n := cloud.fake.Live(); n != 0 {
				t.Errorf("%d servers left", n)
			}
			nodes, _ := cloud.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			if len(nodes.Items) != 0 {
				t.Errorf("%d Nodes left", len(nodes.Items))
			}
			secrets, _ := cloud.kube.CoreV1().Secrets(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{})
			if len(secrets.Items) != 0 {
				t.Errorf("%d join tokens left", len(secrets.Items))
			}
			if !strings.Contains(progress, "1 join token(s) revoked") {
				t.Errorf("progress lacks the revoked token:\n%s", progress)
			}
		})
	}
}

func TestImagesCLIRefreshCanaryFlags(t *testing.T) {
	t.Parallel()
	cloud := newCanaryCloud(t)
	cat := filepath.Join(cloud.dir, "images.yaml")
	recipe := writeRecipe(t, cloud.dir, cliVersions())
	if out, progress, err := runImagesWith(t, cloud, "build", "--recipe", recipe, "--catalog", cat, "--config", cloud.config, "--poll", "5ms"); err != nil {
		t.Fatalf("build: %v\n%s\n%s", err, out, progress)
	}
	args := []string{"refresh", "--recipe", recipe, "--catalog", cat, "--config", cloud.config, "--poll", "5ms"}
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"both canaries", []string{"--canary-group", "g", "--canary-command", "true"}, "--canary-group and --canary-command are two canaries: give one of them"},
		{"unknown group", []string{"--canary-group", "nope"}, `--canary-group "nope"`},
		{"unknown group, dry run", []string{"--canary-group", "nope", "--dry-run"}, "has no such node group (it has: [g])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := runImagesWith(t, cloud, append(args, tc.extra...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refresh %v = %v, want %q", tc.extra, err, tc.want)
			}
		})
	}
	posts := cloud.fake.Calls("POST", "/servers")
	out, _, err := runImagesWith(t, cloud, append(args, "--canary-group", "g", "--canary-timeout", "3m", "--dry-run")...)
	if err != nil || !strings.Contains(out, "would run canary join of one hcloud machine of group g (timeout 3m0s) on") {
		t.Errorf("refresh --dry-run --canary-group: %v\n%s", err, out)
	}
	if n := cloud.fake.Calls("POST", "/servers") - posts; n != 0 {
		t.Errorf("the dry run created %d servers", n)
	}
	if _, _, err := runImagesSplit(t, "resolve", "--catalog", cat); err == nil {
		t.Error("stable resolves after a dry run")
	}
}
