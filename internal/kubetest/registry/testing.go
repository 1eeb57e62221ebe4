package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/prebake-dev/prebake/internal/tb"
)

// SkipIfUnavailable does nothing for a nil err, skips t with one line for ErrUnavailable
// (a missing go command, module proxy, apt-get or package), except under CI=true, where a
// skipped test would hide a broken runner, and fails t for any other error.
func SkipIfUnavailable(t tb.TB, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true":
		t.Skip(err)
	default:
		t.Fatal(err)
	}
}

// TestLog is an io.Writer that logs each write to t: build progress in a test.
type TestLog struct{ T tb.TB }

func (l TestLog) Write(p []byte) (int, error) {
	l.T.Helper()
	l.T.Log(string(p))
	return len(p), nil
}

// StartTest builds (or reuses) the registry server, starts it on addr (for example
// 127.0.0.1:0) with its storage and log under t.TempDir(), and stops it when t ends,
// logging the tail of its log when t failed. It skips t when the server cannot be built
// here (see SkipIfUnavailable).
func StartTest(ctx context.Context, t tb.TB, addr string) *Server {
	t.Helper()
	bin, err := BuildServer(ctx, BuildOptions{Out: TestLog{t}})
	SkipIfUnavailable(t, err)
	dir := t.TempDir()
	s, err := Start(ctx, Options{Binary: bin, Addr: addr, StorageDir: filepath.Join(dir, "storage"), LogFile: filepath.Join(dir, "registry.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("registry log %s ends:\n%s", s.LogFile(), s.LogTail(30))
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stop registry: %v", err)
		}
	})
	return s
}
