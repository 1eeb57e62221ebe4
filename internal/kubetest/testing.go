package kubetest

import (
	"context"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/internal/tb"
)

// TestLog is an io.Writer that logs each write to t: the components' progress in a test.
type TestLog struct{ T tb.TB }

func (l TestLog) Write(p []byte) (int, error) {
	l.T.Helper()
	l.T.Log(string(p))
	return len(p), nil
}

// StartTest starts the default backend for t (skipping t when it is unavailable, failing it
// under CI=true), stops it when t ends, printing the components' log tails when t failed,
// and returns it with an admin clientset.
func StartTest(ctx context.Context, t tb.TB) (Backend, kubernetes.Interface) {
	t.Helper()
	b, err := NewBackend(ctx, "", Options{Dir: filepath.Join(t.TempDir(), "cluster"), Out: TestLog{t}})
	SkipIfUnavailable(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", b.LogTails(30))
		}
		if err := b.Stop(context.Background()); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rc, err := b.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b, cs
}
