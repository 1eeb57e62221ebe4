//go:build e2e

package realnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Pod images, made by the test: until the local registry serves them, they are imported
// into the node's containerd (ctr -n k8s.io images import) and pods use them with
// imagePullPolicy Never.
const (
	PauseImage = "prebake.local/e2e/pause:1"
	HelloImage = "prebake.local/e2e/hello:1"
)

// podImagesTar builds testdata/podimage statically and returns a docker-archive tarball (the
// format `docker save` writes and `ctr images import` reads) holding PauseImage and
// HelloImage, one layer each.
func podImagesTar(t *testing.T) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "podimage")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/podimage")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the pod image binary: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	add := func(name string, content []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	type entry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var manifest []entry
	for _, img := range []struct{ ref, entrypoint string }{{PauseImage, "/pause"}, {HelloImage, "/hello"}} {
		layer := fileLayer(t, img.entrypoint, data)
		layerSum := sha256.Sum256(layer)
		config, err := json.Marshal(map[string]any{
			"architecture": "amd64", "os": "linux",
			"config":  map[string]any{"Entrypoint": []string{img.entrypoint}},
			"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(layerSum[:])}},
			"history": []map[string]string{{"created_by": "prebake e2e/realnode"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		configSum := sha256.Sum256(config)
		configName := hex.EncodeToString(configSum[:]) + ".json"
		layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"
		add(configName, config)
		add(layerName, layer)
		manifest = append(manifest, entry{Config: configName, RepoTags: []string{img.ref}, Layers: []string{layerName}})
	}
	m, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	add("manifest.json", m)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return archive.Bytes()
}

// fileLayer is a layer with one executable at path.
func fileLayer(t *testing.T, path string, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: path[1:], Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(fmt.Errorf("layer %s: %w", path, err))
	}
	return b.Bytes()
}
