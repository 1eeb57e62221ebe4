//go:build e2e

package deploy

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/prebake-dev/prebake/internal/kubetest"
)

// TestOverlaysServerDryRun applies every render with
// `kubectl apply --dry-run=server` to the hermetic API server: schemas,
// defaulting, validation and RBAC escalation checks of a real
// kube-apiserver, without running anything. Namespaces a render creates are
// applied for real first, since a dry-run cannot place objects in a
// namespace that does not exist yet. Overlays in renderOnly are skipped
// with their reason.
func TestOverlaysServerDryRun(t *testing.T) {
	kc := kubectl(t)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	b, err := kubetest.NewBackend(ctx, kubetest.BackendHermetic, kubetest.Options{Dir: filepath.Join(t.TempDir(), "cluster"), Out: testWriter{t}})
	kubetest.SkipIfUnavailable(t, err)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	apply := func(manifest []byte, args ...string) error {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, kc, append([]string{"--kubeconfig", b.Kubeconfig(), "apply", "-f", "-"}, args...)...)
		cmd.Stdin, cmd.Stderr = bytes.NewReader(manifest), &stderr
		out, err := cmd.Output()
		if err != nil {
			return &applyError{err: err, stderr: stderr.String()}
		}
		t.Logf("%s", out)
		return nil
	}

	// The dry-run must be able to fail, or passing proves nothing.
	t.Run("rejects an invalid object", func(t *testing.T) {
		bad := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bad, namespace: kube-system}\nspec:\n  replicas: -1\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: c}}\n    spec: {containers: [{name: c, image: x}]}\n"
		if err := apply([]byte(bad), "--dry-run=server"); err == nil {
			t.Fatal("server-side dry-run accepted a Deployment with replicas -1 and a selector that does not match")
		}
	})

	staged := stage(t)
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			if reason, ok := renderOnly[name]; ok {
				t.Skipf("render-only (checked by TestOverlays): %s", reason)
			}
			rendered := render(t, kc, staged, name)
			var namespaces [][]byte
			for _, o := range decode(t, rendered) {
				if o.GetKind() == "Namespace" {
					y, err := yaml.Marshal(o.Object)
					if err != nil {
						t.Fatal(err)
					}
					namespaces = append(namespaces, y)
				}
			}
			if len(namespaces) > 0 {
				if err := apply(bytes.Join(namespaces, []byte("---\n"))); err != nil {
					t.Fatalf("create namespaces: %v", err)
				}
			}
			if err := apply(rendered, "--dry-run=server"); err != nil {
				t.Fatalf("kubectl apply --dry-run=server overlays/%s: %v", name, err)
			}
		})
	}
}

type applyError struct {
	err    error
	stderr string
}

func (e *applyError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
