package serveproc

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	old := `{"msg":"serving","grpc":"127.0.0.1:1","http":"127.0.0.1:2"}` + "\n"
	fresh := "=== e2e: start 2 ===\n" +
		`{"time":"t","level":"INFO","msg":"increase size"}` + "\n" +
		`{"time":"t","level":"INFO","msg":"serving","grpc":"127.0.0.1:8086","http":"127.0.0.1:8087","tls":false}` + "\n"
	if err := os.WriteFile(path, []byte(old+fresh), 0o644); err != nil {
		t.Fatal(err)
	}
	g, h, ok := findServing(path, int64(len(old)))
	if !ok || g != "127.0.0.1:8086" || h != "127.0.0.1:8087" {
		t.Errorf("findServing after the first start = %q, %q, %v; want the second start's addresses", g, h, ok)
	}
	if _, _, ok := findServing(path, int64(len(old)+len(fresh))); ok {
		t.Error("findServing found a line past the end")
	}
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := tail(path, 2); got != "b\nc" {
		t.Errorf("tail = %q, want %q", got, "b\nc")
	}
}
