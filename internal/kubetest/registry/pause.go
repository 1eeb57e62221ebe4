package registry

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// pauseSource is the pause program (pause/main.go). BuildPause compiles this copy in a
// wrapper module in the cache, so the build depends neither on the working directory nor
// on prebake's go.mod.
//
//go:embed pause/main.go
var pauseSource []byte

// pauseLdflags strip the symbol table and the build ID, so the binary's bytes (and with
// them the image digest) depend only on the source and the Go toolchain.
const pauseLdflags = "-s -w -buildid="

// BuildPause compiles the pause program statically (CGO_ENABLED=0, GOOS=linux,
// GOARCH=amd64, -trimpath) into <CacheDir>/pause/<key>/pause and returns its path, or the
// cached binary when one was built for the same key: a hash of the source, the go
// command's GOVERSION and the flags.
func BuildPause(ctx context.Context, opts BuildOptions) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	if _, err := exec.LookPath("go"); err != nil {
		return "", fmt.Errorf("%w: the go command is not on PATH; install Go 1.26 to build the pause image", ErrUnavailable)
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	goVersion := strings.TrimSpace(string(out))
	sum := sha256.Sum256([]byte(strings.Join([]string{string(pauseSource), goVersion, pauseLdflags, "linux/amd64 CGO_ENABLED=0 -trimpath"}, "\n")))
	key := hex.EncodeToString(sum[:6])
	b, err := newBuilder(ctx, opts, filepath.Join(opts.CacheDir, "pause", key))
	if err != nil {
		return "", err
	}
	defer b.close()
	bin := filepath.Join(b.dir, "pause")
	stamp := fmt.Sprintf("prebake pause %s\n%s\n", key, goVersion)
	if b.stampMatches(stamp) && checkExecutable(bin) == nil {
		b.logf("reusing pause binary %s", bin)
		return bin, nil
	}
	b.logf("building the pause binary with %s into %s", goVersion, bin)
	if err := b.openLog(); err != nil {
		return "", err
	}
	work := filepath.Join(b.dir, "work")
	if err := writeWrapper(work, "module prebake.local/pause\n\ngo 1.26.0\n"); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), pauseSource, 0o644); err != nil {
		return "", fmt.Errorf("build pause: %w", err)
	}
	if err := b.goBuild(ctx, work, []string{"GOOS=linux", "GOARCH=amd64"},
		"build", "-trimpath", "-ldflags", pauseLdflags, "-o", bin+".tmp", "."); err != nil {
		return "", err
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", fmt.Errorf("build pause: %w", err)
	}
	if err := b.writeStamp(stamp); err != nil {
		return "", err
	}
	return bin, nil
}
