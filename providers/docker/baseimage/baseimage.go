package baseimage

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// The recipe. Recipe changes whenever Ensure puts something else into the image, so that
// the inputs hash (and with it the tag) changes too.
const (
	Suite   = "bookworm"
	variant = "minbase"
	Recipe  = "prebake-docker-base-v1"
	// Repository is the image repository Ensure tags into; the tag is <Suite>-<hash>.
	Repository = "prebake-docker-base"
	// InitPath is the image's entrypoint: container-init.sh, which execs /sbin/init.
	InitPath = "/usr/local/sbin/prebake-container-init"
	// CloudConfigPath is the base image's cloud-init configuration: NoCloud only.
	CloudConfigPath = "/etc/cloud/cloud.cfg.d/90-prebake-docker.cfg"
	// SeedDir is where NoCloud reads user-data and meta-data; the provider writes both
	// there before the container starts.
	SeedDir = "/var/lib/cloud/seed/nocloud"
	// DefaultMaxAge bounds how stale the image's apt package lists get: pinned versions
	// come from them, and the mirror drops superseded ones.
	DefaultMaxAge = 7 * 24 * time.Hour
)

// Label keys on the image.
const (
	LabelInputsHash = "prebake.dev/inputs-hash"
	LabelBase       = "prebake.dev/base"
)

// debootstrapPackages come with debootstrap itself: what a VM image of Debian boots with.
// cloud-init is installed afterwards with apt, which resolves its virtual dependencies
// (debootstrap does not: python3-cryptography's python3-cffi-backend-api-* stay unmet and
// the bootstrap fails).
var (
	debootstrapPackages = []string{"systemd", "systemd-sysv", "dbus", "iproute2", "curl", "ca-certificates", "kmod", "procps"}
	aptPackages         = []string{"cloud-init"}
)

//go:embed container-init.sh
var containerInit string

// cloudConfig makes NoCloud the only data source (ds-identify then looks nowhere else),
// leaves the network to Docker, and sets a locale the image has (minbase has no locales
// package, and cloud-init's default en_US.UTF-8 makes its locale module fail).
const cloudConfig = `# Written by prebake's docker base image.
datasource_list: [NoCloud, None]
network: {config: disabled}
locale: C.UTF-8
`

// Options configures Ensure.
type Options struct {
	// CacheDir holds the root filesystem tarball; "" means DefaultCacheDir().
	CacheDir string
	// Mirror is the Debian mirror; "" means $PREBAKE_DEBIAN_MIRROR, else deb.debian.org.
	Mirror string
	// MaxAge: an older tarball is made again; 0 means DefaultMaxAge.
	MaxAge time.Duration
	// Out receives progress lines; nil discards them.
	Out io.Writer
}

// Engine is the part of the Docker Engine API client Ensure uses (*client.Client has it).
type Engine interface {
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageImport(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error)
}

// Image is the base image Ensure found or made.
type Image struct {
	Ref        string // Repository:<Suite>-<hash>
	ID         string // sha256:…
	InputsHash string
	// Imported is true when this Ensure imported it (it was not in the engine before).
	Imported bool
	// Built is true when this Ensure ran debootstrap (the tarball was missing or stale).
	Built bool
}

// DefaultCacheDir is <user cache dir>/prebake/docker/base.
func DefaultCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory (set XDG_CACHE_HOME or HOME): %w", err)
	}
	return filepath.Join(base, "prebake", "docker", "base"), nil
}

// Mirror is the Debian mirror used when Options.Mirror is empty.
func Mirror() string {
	if m := os.Getenv("PREBAKE_DEBIAN_MIRROR"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// InputsHash is the sha256 of everything that goes into the image: the recipe, suite,
// packages, mirror, the init script and the cloud-init configuration.
func InputsHash(mirror string) string {
	h := sha256.New()
	for _, s := range []string{Recipe, Suite, variant, strings.Join(debootstrapPackages, ","),
		strings.Join(aptPackages, ","), mirror, containerInit, cloudConfig} {
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RefFor is the image reference for an inputs hash.
func RefFor(hash string) string { return Repository + ":" + Suite + "-" + hash[:12] }

func (o Options) withDefaults() (Options, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Mirror == "" {
		o.Mirror = Mirror()
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.CacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return o, err
		}
		o.CacheDir = d
	}
	d, err := filepath.Abs(o.CacheDir)
	o.CacheDir = d
	return o, err
}

// Ensure returns the base image for the current inputs: the image in the engine when it is
// there and younger than MaxAge; else it imports the cached root filesystem tarball, making
// that first (debootstrap, minutes) when it is missing or older than MaxAge. Concurrent
// Ensures of one CacheDir wait for each other (flock). Making the tarball needs root and
// debootstrap; ErrPrerequisite says which is missing.
func Ensure(ctx context.Context, engine Engine, opts Options) (Image, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Image{}, fmt.Errorf("docker base image: %w", err)
	}
	hash := InputsHash(opts.Mirror)
	img := Image{Ref: RefFor(hash), InputsHash: hash}
	logf := func(format string, args ...any) {
		fmt.Fprintf(opts.Out, "docker base image: %s\n", fmt.Sprintf(format, args...))
	}

	if id, ok, err := current(ctx, engine, img.Ref, hash, opts.MaxAge); err != nil {
		return Image{}, err
	} else if ok {
		img.ID = id
		return img, nil
	}

	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return Image{}, fmt.Errorf("docker base image: create cache dir: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(opts.CacheDir, ".lock"))
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	// Someone else may have imported it while we waited for the lock.
	if id, ok, err := current(ctx, engine, img.Ref, hash, opts.MaxAge); err != nil {
		return Image{}, err
	} else if ok {
		img.ID = id
		return img, nil
	}

	tarball, built, err := ensureTarball(ctx, opts, hash, logf)
	if err != nil {
		return Image{}, err
	}
	img.Built = built

	began := time.Now()
	logf("importing %s into Docker as %s", tarball, img.Ref)
	id, err := importTarball(ctx, engine, tarball, img.Ref, hash)
	if err != nil {
		return Image{}, err
	}
	img.ID, img.Imported = id, true
	logf("imported %s (%s) in %s", img.Ref, shortID(id), time.Since(began).Round(100*time.Millisecond))
	return img, nil
}

// EnsureTarball makes the cached root filesystem tarball Ensure imports, without touching
// the engine: for a CI step that fills the cache before the tests (debootstrap takes minutes).
// It returns the tarball's path and whether it was made now.
func EnsureTarball(ctx context.Context, opts Options) (string, bool, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", false, fmt.Errorf("docker base image: %w", err)
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return "", false, fmt.Errorf("docker base image: create cache dir: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(opts.CacheDir, ".lock"))
	if err != nil {
		return "", false, err
	}
	defer unlock()
	return ensureTarball(ctx, opts, InputsHash(opts.Mirror), func(format string, args ...any) {
		fmt.Fprintf(opts.Out, "docker base image: %s\n", fmt.Sprintf(format, args...))
	})
}

// ensureTarball makes the tarball for hash unless a young enough one is cached; the caller
// holds the cache's lock.
func ensureTarball(ctx context.Context, opts Options, hash string, logf func(string, ...any)) (string, bool, error) {
	tarball := filepath.Join(opts.CacheDir, Suite+"-"+hash[:12]+".tar")
	if st, err := os.Stat(tarball); err == nil && time.Since(st.ModTime()) < opts.MaxAge {
		logf("reusing root filesystem %s", tarball)
		return tarball, false, nil
	}
	if err := buildTarball(ctx, tarball, opts, logf); err != nil {
		return "", false, err
	}
	return tarball, true, nil
}

// current reports the image's id when ref exists with the wanted inputs hash and is younger
// than maxAge.
func current(ctx context.Context, engine Engine, ref, hash string, maxAge time.Duration) (string, bool, error) {
	ins, err := engine.ImageInspect(ctx, ref)
	if client.IsErrNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("docker base image: inspect %s: %w", ref, err)
	}
	if ins.Config == nil || ins.Config.Labels[LabelInputsHash] != hash {
		return "", false, nil
	}
	if created, err := time.Parse(time.RFC3339Nano, ins.Created); err == nil && time.Since(created) >= maxAge {
		return "", false, nil
	}
	return ins.ID, true, nil
}

// importChanges are the Dockerfile instructions applied at import. STOPSIGNAL would belong
// here but the engine's import refuses it (Docker 20.10: "stopsignal is not a valid change
// command"): the provider sets SIGRTMIN+3, systemd's halt signal, on each container.
func importChanges(hash string) []string {
	return []string{
		fmt.Sprintf(`ENTRYPOINT [%q]`, InitPath),
		`CMD []`,
		`ENV container=docker`,
		fmt.Sprintf(`LABEL %s=%s`, LabelInputsHash, hash),
		fmt.Sprintf(`LABEL %s=debian-%s`, LabelBase, Suite),
	}
}

func importTarball(ctx context.Context, engine Engine, tarball, ref, hash string) (string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return "", fmt.Errorf("docker base image: %w", err)
	}
	defer f.Close()
	rc, err := engine.ImageImport(ctx, image.ImportSource{Source: f, SourceName: "-"}, ref, image.ImportOptions{
		Changes: importChanges(hash),
		Message: "prebake docker base image, Debian " + Suite,
	})
	if err != nil {
		return "", fmt.Errorf("docker base image: import %s: %w", ref, err)
	}
	defer rc.Close()
	if err := readJSONStream(rc); err != nil {
		return "", fmt.Errorf("docker base image: import %s: %w", ref, err)
	}
	ins, err := engine.ImageInspect(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("docker base image: inspect %s after import: %w", ref, err)
	}
	return ins.ID, nil
}

// readJSONStream reads the engine's progress messages to the end and returns the first error
// one carries.
func readJSONStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the engine's reply: %w", err)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			return errors.New(msg.ErrorDetail.Message)
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

func lock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("docker base image: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("docker base image: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("docker base image: waiting for %s (another build holds it): %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// progress copies a command's output lines to logf (debootstrap's "I: Retrieving …" lines)
// and to the log file.
func progress(r io.Reader, log io.Writer, logf func(string, ...any), began time.Time) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	last := time.Time{}
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		// debootstrap prints one I: line per package; one a second is enough to show progress.
		if strings.HasPrefix(line, "I: ") && time.Since(last) >= time.Second || strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ") {
			logf("[%4.0fs] %s", time.Since(began).Seconds(), line)
			last = time.Now()
		}
	}
	// A line longer than the buffer stops the scanner; keep draining so the command never
	// blocks on a full pipe.
	_, _ = io.Copy(log, r)
}
