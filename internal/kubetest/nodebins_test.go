package kubetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBuildNodeBinariesReusesCache: with a matching stamp and executables in place,
// BuildNodeBinaries returns them without a go command (PATH is emptied); with a stale stamp
// it wants to build and says the go command is missing.
func TestBuildNodeBinariesReusesCache(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no go here: any build attempt fails
	dir := t.TempDir()
	want := nodeBinariesIn(dir)
	paths := []string{want.Kubelet, want.Kubeadm}
	for _, p := range want.CNIPlugins {
		paths = append(paths, p)
	}
	if len(want.CNIPlugins) != 4 {
		t.Fatalf("CNI plugins = %v, want loopback, bridge, host-local and portmap", want.CNIPlugins)
	}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stamp := filepath.Join(dir, "node-stamp")
	if err := os.WriteFile(stamp, []byte(nodeStampContent), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cni-stamp"), []byte(cniStampContent), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := BuildNodeBinaries(context.Background(), BuildOptions{CacheDir: dir})
	if err != nil {
		t.Fatalf("complete cache: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("binaries (-want +got):\n%s", diff)
	}

	if err := os.WriteFile(stamp, []byte("prebake node binaries\nkubernetes v1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = BuildNodeBinaries(context.Background(), BuildOptions{CacheDir: dir})
	if !errors.Is(err, ErrBackendUnavailable) || !strings.Contains(err.Error(), "go command") {
		t.Errorf("stale stamp without go: err = %v, want ErrBackendUnavailable about the go command", err)
	}
	if _, err := os.Stat(stamp); !os.IsNotExist(err) {
		t.Errorf("stale stamp still there after a failed build (err %v)", err)
	}
}

func TestNodeStampNamesVersion(t *testing.T) {
	t.Parallel()
	if !strings.Contains(nodeStampContent, KubernetesVersion) {
		t.Errorf("node stamp %q does not name %s, so a version bump would reuse old binaries", nodeStampContent, KubernetesVersion)
	}
}
