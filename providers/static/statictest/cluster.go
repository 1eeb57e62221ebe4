package statictest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/internal/tb"
)

// syncBuffer is a bytes.Buffer safe for the cluster's writers and the
// test's reader.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Cluster is a running hermetic control plane.
type Cluster struct {
	// Config is the admin client config.
	Config *rest.Config
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
}

// StartCluster starts a hermetic control plane (internal/kubetest: etcd,
// kube-apiserver and the rest, on loopback) for the test and returns its
// admin client config and kubeconfig; it stops at the test's cleanup. It needs the
// binaries cached by `go run ./internal/kubetest/cmd/e2e-cluster build`: without
// them the test skips with one line, except under CI=true, where they are
// built (or the test fails).
func StartCluster(t tb.TB) *Cluster {
	t.Helper()
	dir, err := kubetest.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	_, stampErr := os.Stat(filepath.Join(dir, "stamp"))
	if stampErr != nil && os.Getenv("CI") != "true" {
		t.Skipf("skipping: needs the hermetic control plane in %s (go run ./internal/kubetest/cmd/e2e-cluster build)", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out := &syncBuffer{}
	bins, err := kubetest.Build(ctx, kubetest.BuildOptions{Out: out})
	if err != nil {
		t.Fatalf("control-plane binaries: %v\n%s", err, out)
	}
	h, err := kubetest.NewHermetic(kubetest.HermeticOptions{Binaries: bins, Dir: t.TempDir(), Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatalf("start the hermetic control plane: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := h.Stop(context.Background()); err != nil {
			t.Errorf("stop the hermetic control plane: %v", err)
		}
	})
	rc, err := h.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 200, 400
	return &Cluster{Config: rc, Kubeconfig: h.Kubeconfig()}
}
