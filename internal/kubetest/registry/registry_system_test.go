//go:build system

package registry

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRegistryPushPull builds the registry server (cold: minutes; then cached), pushes
// the pause, workload and a small large image by tag, pulls each back by digest and by
// tag, checks every blob, then stops the registry and sees it refuse, and restarts it on
// the same storage and sees the images again.
func TestRegistryPushPull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin, err := BuildServer(ctx, BuildOptions{Out: TestLog{t}})
	SkipIfUnavailable(t, err)
	pauseBin, err := BuildPause(ctx, BuildOptions{Out: TestLog{t}})
	SkipIfUnavailable(t, err)
	pauseData, err := os.ReadFile(pauseBin)
	if err != nil {
		t.Fatal(err)
	}
	pause, err := PauseImage(pauseData)
	if err != nil {
		t.Fatal(err)
	}
	bb := fakeBusybox("1:1.35.0-4") // the registry only stores bytes; Debian's busybox is for the containerd test
	work, err := WorkloadImage(bb)
	if err != nil {
		t.Fatal(err)
	}
	large, err := LargeImage(bb, LargeOptions{Size: 8 << 20, Layers: 2})
	if err != nil {
		t.Fatal(err)
	}
	imgs := []Image{pause, work, large}

	dir := t.TempDir()
	opts := Options{Binary: bin, Addr: "127.0.0.1:0", StorageDir: filepath.Join(dir, "storage"), LogFile: filepath.Join(dir, "registry.log")}
	srv, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registry log ends:\n%s", srv.LogTail(30))
		}
		if !stopped {
			if err := srv.Stop(); err != nil {
				t.Error(err)
			}
		}
	})

	pushed, err := PushAll(ctx, srv.Host(), imgs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pushed {
		checkPulled(ctx, t, imgs[i], p.ByDigest, p.Digest)
		checkPulled(ctx, t, imgs[i], p.Ref, p.Digest)
	}
	// Pushing again uploads nothing new and succeeds.
	if _, err := Push(ctx, srv.Host(), work); err != nil {
		t.Errorf("second push of the same image: %v", err)
	}
	if !strings.Contains(srv.LogTail(200), "PUT /v2/prebake/busybox/manifests/") {
		t.Errorf("the registry log does not show the pushes:\n%s", srv.LogTail(20))
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if !srv.Exited() {
		t.Fatal("Stop returned with the registry process still running")
	}
	if _, err := Pull(ctx, pushed[0].ByDigest); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("pull from a stopped registry: %v, want connection refused", err)
	}
	if _, err := Push(ctx, srv.Host(), pause); err == nil {
		t.Error("push to a stopped registry succeeded")
	}

	// The storage outlives the process: a registry restarted on it serves the same digests.
	srv2, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv2.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if srv2.Host() == srv.Host() {
		t.Logf("the restarted registry got the same port %s", srv2.Host())
	}
	for i, img := range imgs {
		p, err := Reference(srv2.Host(), img)
		if err != nil {
			t.Fatal(err)
		}
		checkPulled(ctx, t, img, p.ByDigest, pushed[i].Digest)
	}
}

// checkPulled pulls ref and compares manifest, config and layers with img.
func checkPulled(ctx context.Context, t *testing.T, img Image, ref, digest string) {
	t.Helper()
	got, err := Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != digest {
		t.Errorf("%s: pulled digest %s, pushed %s", ref, got.Digest, digest)
	}
	raw, _ := img.Image.RawManifest()
	cfg, _ := img.Image.RawConfigFile()
	if !bytes.Equal(got.Manifest, raw) || !bytes.Equal(got.Config, cfg) {
		t.Errorf("%s: pulled manifest or config differs from the pushed one", ref)
	}
	if got.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("%s: served as %q, want the OCI manifest media type", ref, got.MediaType)
	}
	layers := mustLayers(t, img)
	if len(got.Layers) != len(layers) {
		t.Fatalf("%s: pulled %d layers, pushed %d", ref, len(got.Layers), len(layers))
	}
	for i, l := range layers {
		d, _ := l.Digest()
		size, _ := l.Size()
		if got.Layers[i].Digest != d.String() || got.Layers[i].Size != size {
			t.Errorf("%s: layer %d pulled as %+v, pushed %s (%d bytes)", ref, i, got.Layers[i], d, size)
		}
	}
}
