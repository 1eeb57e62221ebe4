package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/prebake-dev/prebake/internal/certs"
)

// serviceDNSName is the host of "address" in the base's cloud-config: the
// server certificate must carry it.
const serviceDNSName = "prebake.kube-system.svc"

// renderOnly names the overlays that cannot be applied to the hermetic API
// server, with the reason.
var renderOnly = map[string]string{
	"mtls-certmanager": "needs the cert-manager CRDs (Issuer, Certificate), which are not ours to copy into the test cluster",
}

// overlays lists deploy/overlays, so a new overlay is tested without
// registering it anywhere.
func overlays(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no overlays in deploy/overlays")
	}
	sort.Strings(names)
	return names
}

// kubectl returns the kubectl to render with. Without one the test skips
// with one line, except under CI=true, where it fails.
func kubectl(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubectl not found (CI=true): %v", err)
		}
		t.Skipf("kubectl not found, deploy/ renders not checked: %v", err)
	}
	return path
}

// stage copies deploy/ into a temporary directory and writes the
// mtls-files certificates there the way the docs say to, so a render never
// depends on (or writes) files in the repository.
func stage(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, dir := range []string{"base", "components", "overlays"} {
		if err := os.CopyFS(filepath.Join(dst, dir), os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
	}
	tlsDir := filepath.Join(dst, "components", "mtls-files", "tls")
	if err := os.RemoveAll(tlsDir); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Generate(tlsDir, []string{serviceDNSName}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dst
}

// render runs `kubectl kustomize` on one overlay of a staged tree.
func render(t *testing.T, kubectlPath, staged, overlay string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), kubectlPath, "kustomize", filepath.Join(staged, "overlays", overlay))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize overlays/%s: %v\n%s", overlay, err, stderr.String())
	}
	return stdout.Bytes()
}

// decode splits a multi-document render into objects.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := decodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (o.GetName() == name || strings.HasPrefix(o.GetName(), name+"-") && isHashSuffix(strings.TrimPrefix(o.GetName(), name+"-"))) {
			return o
		}
	}
	return nil
}

// isHashSuffix says whether s is the 10-character suffix kustomize appends
// to generated ConfigMaps and Secrets.
func isHashSuffix(s string) bool {
	if len(s) != 10 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
