package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is a container image built here, with the repository and tag it is pushed and
// exported under (the registry host is added then).
type Image struct {
	Repository string // for example prebake/pause
	Tag        string
	Image      v1.Image
}

// Digest is the image's manifest digest, sha256:<hex>.
func (i Image) Digest() (string, error) {
	h, err := i.Image.Digest()
	if err != nil {
		return "", fmt.Errorf("image %s:%s: %w", i.Repository, i.Tag, err)
	}
	return h.String(), nil
}

// Every file, layer and config carries this time, so the same inputs give the same digest.
var epoch = time.Unix(0, 0).UTC()

// Repositories of the images.
const (
	PauseRepository    = "prebake/pause"
	WorkloadRepository = "prebake/busybox"
	LargeRepository    = "prebake/large"
)

// WorkloadPort is the port the workload and large images' default command serves HTTP on.
const WorkloadPort = 8080

// busyboxApplets get a /bin symlink to busybox in the workload image, so pods can run them
// by name (for example command: ["sleep", "3600"]).
var busyboxApplets = []string{
	"cat", "date", "echo", "env", "false", "hostname", "httpd", "id", "ls", "mkdir", "nc",
	"ps", "rm", "sh", "sleep", "true", "wget",
}

// PauseImage is the pod sandbox image: one layer holding /pause (the binary BuildPause
// makes), entrypoint /pause, user 65535:65535 like the upstream pause image, linux/amd64.
func PauseImage(pauseBinary []byte) (Image, error) {
	if len(pauseBinary) == 0 {
		return Image{}, errors.New("PauseImage: the pause binary is empty; pass the file BuildPause returns")
	}
	layer, err := smallLayer([]tarEntry{{name: "pause", mode: 0o755, data: pauseBinary}})
	if err != nil {
		return Image{}, fmt.Errorf("pause layer: %w", err)
	}
	img, err := assemble([]v1.Layer{layer}, []string{"prebake: the pause program (internal/kubetest/registry/pause)"}, v1.Config{
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
		WorkingDir: "/",
		Labels:     map[string]string{"dev.prebake.image": "pause"},
	})
	if err != nil {
		return Image{}, err
	}
	return Image{Repository: PauseRepository, Tag: "1", Image: img}, nil
}

// busyboxLayer is the base layer of the workload and large images: busybox, its applet
// symlinks, its copyright file and the page its httpd serves.
func busyboxLayer(bb Busybox) (v1.Layer, error) {
	if len(bb.Binary) == 0 || bb.Version == "" {
		return nil, errors.New("busybox layer: Busybox.Binary or Busybox.Version is empty; pass what FetchBusybox returns")
	}
	entries := []tarEntry{
		{name: "bin/", mode: 0o755},
		{name: "bin/busybox", mode: 0o755, data: bb.Binary},
	}
	for _, a := range busyboxApplets {
		entries = append(entries, tarEntry{name: "bin/" + a, link: "busybox"})
	}
	entries = append(entries,
		tarEntry{name: "tmp/", mode: 0o1777},
		tarEntry{name: "usr/", mode: 0o755},
		tarEntry{name: "usr/share/", mode: 0o755},
		tarEntry{name: "usr/share/doc/", mode: 0o755},
		tarEntry{name: "usr/share/doc/busybox-static/", mode: 0o755},
		tarEntry{name: "usr/share/doc/busybox-static/copyright", mode: 0o644, data: bb.Copyright},
		tarEntry{name: "www/", mode: 0o755},
		tarEntry{name: "www/index.html", mode: 0o644, data: []byte("prebake workload image\n")},
	)
	return smallLayer(entries)
}

func workloadConfig(bb Busybox, image string) v1.Config {
	return v1.Config{
		// The default command serves /www over HTTP; a pod that only needs to run sets
		// command: ["sleep", "3600"].
		Cmd:          []string{"httpd", "-f", "-p", fmt.Sprint(WorkloadPort), "-h", "/www"},
		Env:          []string{"PATH=/bin"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", WorkloadPort): {}},
		Labels: map[string]string{
			"dev.prebake.image":           image,
			"dev.prebake.busybox-version": bb.Version,
		},
	}
}

// WorkloadImage is a small image for pods: Debian's busybox-static with applet symlinks in
// /bin; its default command serves /www with busybox httpd on WorkloadPort. Its tag is the
// package version (epoch dropped, + and ~ turned into -).
func WorkloadImage(bb Busybox) (Image, error) {
	layer, err := busyboxLayer(bb)
	if err != nil {
		return Image{}, err
	}
	img, err := assemble([]v1.Layer{layer}, []string{"prebake: busybox-static " + bb.Version}, workloadConfig(bb, "workload"))
	if err != nil {
		return Image{}, err
	}
	return Image{Repository: WorkloadRepository, Tag: versionTag(bb.Version), Image: img}, nil
}

// versionTag turns a Debian version into a valid image tag: 1:1.35.0-4+deb12u1+b1 becomes
// 1.35.0-4-deb12u1-b1.
func versionTag(v string) string {
	if i := strings.IndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	return strings.NewReplacer("+", "-", "~", "-").Replace(v)
}

// LargeOptions configures LargeImage.
type LargeOptions struct {
	// Size is the total size in bytes of the data files; it must be positive.
	Size int64
	// Layers is how many data layers Size is split into (the last takes the remainder);
	// 0 means 4.
	Layers int
}

// LargeImage is the workload image plus Layers layers of incompressible pseudo-random data
// (/data/blob-<i>, Size bytes in all), for measuring the pull of a large image against one
// baked into the node. The data comes from ChaCha8 seeded by the layer's index and Size, so
// the same options give the same digest; it is generated on the fly, never held in memory or
// on disk. Data layers are gzip at level 0 (stored blocks): compressing random data gains
// nothing, and a node unpacking it pays the same as for any incompressible layer.
func LargeImage(bb Busybox, opts LargeOptions) (Image, error) {
	if opts.Size <= 0 {
		return Image{}, fmt.Errorf("LargeOptions.Size is %d; pass the data size in bytes, for example 500<<20", opts.Size)
	}
	if opts.Layers == 0 {
		opts.Layers = 4
	}
	if opts.Layers < 0 || int64(opts.Layers) > opts.Size {
		return Image{}, fmt.Errorf("LargeOptions.Layers is %d; pass between 1 and Size", opts.Layers)
	}
	base, err := busyboxLayer(bb)
	if err != nil {
		return Image{}, err
	}
	layers := []v1.Layer{base}
	history := []string{"prebake: busybox-static " + bb.Version}
	per := opts.Size / int64(opts.Layers)
	for i := range opts.Layers {
		n := per
		if i == opts.Layers-1 {
			n = opts.Size - per*int64(opts.Layers-1)
		}
		l, err := randomLayer(i, n, opts.Size)
		if err != nil {
			return Image{}, fmt.Errorf("large image layer %d: %w", i, err)
		}
		layers = append(layers, l)
		history = append(history, fmt.Sprintf("prebake: %d bytes of pseudo-random data", n))
	}
	cfg := workloadConfig(bb, "large")
	cfg.Labels["dev.prebake.large-size"] = fmt.Sprint(opts.Size)
	img, err := assemble(layers, history, cfg)
	if err != nil {
		return Image{}, err
	}
	return Image{Repository: LargeRepository, Tag: fmt.Sprintf("%d-%d", opts.Size, opts.Layers), Image: img}, nil
}

// randomLayer is a layer with one file, data/blob-<index>, of n pseudo-random bytes.
func randomLayer(index int, n, total int64) (v1.Layer, error) {
	var seed [32]byte
	h := sha256.New()
	fmt.Fprintf(h, "prebake large image\n%d\n%d\n", total, index)
	copy(seed[:], h.Sum(nil))
	name := fmt.Sprintf("data/blob-%d", index)
	opener := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			err := writeHeader(tw, tarEntry{name: "data/", mode: 0o755})
			if err == nil {
				err = tw.WriteHeader(fileHeader(name, 0o644, n))
			}
			if err == nil {
				_, err = io.CopyN(tw, rand.NewChaCha8(seed), n)
			}
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}
	return tarball.LayerFromOpener(opener, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.NoCompression))
}

// tarEntry is a file (data set), a directory (name ends in /) or a symlink (link set).
type tarEntry struct {
	name string
	mode int64
	data []byte
	link string
}

func fileHeader(name string, mode, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: size, ModTime: epoch, Format: tar.FormatPAX}
}

func writeHeader(tw *tar.Writer, e tarEntry) error {
	var hdr *tar.Header
	switch {
	case e.link != "":
		hdr = &tar.Header{Typeflag: tar.TypeSymlink, Name: e.name, Linkname: e.link, Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}
	case strings.HasSuffix(e.name, "/"):
		hdr = &tar.Header{Typeflag: tar.TypeDir, Name: e.name, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
	default:
		hdr = fileHeader(e.name, e.mode, int64(len(e.data)))
	}
	return tw.WriteHeader(hdr)
}

// smallLayer is an in-memory layer of entries, in the order given, every header with uid and
// gid 0 and mtime epoch, gzip at the best compression.
func smallLayer(entries []tarEntry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := writeHeader(tw, e); err != nil {
			return nil, err
		}
		if len(e.data) > 0 {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
}

// assemble makes an OCI image (OCI manifest and config media types) for linux/amd64 of
// layers, with one history entry per layer, cfg as its runtime config and every time epoch.
func assemble(layers []v1.Layer, history []string, cfg v1.Config) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: history[i]}}
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, fmt.Errorf("assemble image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("assemble image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("assemble image: %w", err)
	}
	return img, nil
}

// CompressedSize is what pulling img transfers: its manifest, config and layer blobs.
func CompressedSize(img Image) (int64, error) {
	m, err := img.Image.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.Image.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
