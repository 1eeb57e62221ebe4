package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeBusybox stands in for Debian's package in the unit tests: the images only copy it.
func fakeBusybox(version string) Busybox {
	return Busybox{Binary: []byte("#!busybox " + version + "\n"), Copyright: []byte("GPL-2\n"), Version: version}
}

type tarFile struct {
	hdr  tar.Header
	data []byte
}

// layerFiles reads a layer's uncompressed tar; file data is kept up to keep bytes.
func layerFiles(t *testing.T, l v1.Layer, keep int) []tarFile {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var out []tarFile
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(io.LimitReader(tr, int64(keep)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			t.Fatal(err)
		}
		out = append(out, tarFile{*hdr, data})
	}
}

func mustDigest(t *testing.T, img Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPauseImage(t *testing.T) {
	bin := []byte("\x7fELF pretend pause binary")
	a, err := PauseImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := PauseImage(bytes.Clone(bin))
	if err != nil {
		t.Fatal(err)
	}
	if da, db := mustDigest(t, a), mustDigest(t, b); da != db {
		t.Errorf("two builds of the same binary: digests %s and %s", da, db)
	}
	c, err := PauseImage(append(bytes.Clone(bin), '!'))
	if err != nil {
		t.Fatal(err)
	}
	if mustDigest(t, a) == mustDigest(t, c) {
		t.Error("a different binary gave the same digest")
	}

	mt, _ := a.Image.MediaType()
	if mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	m, err := a.Image.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Errorf("manifest: config %s, layers %+v; want OCI config and one OCI layer", m.Config.MediaType, m.Layers)
	}
	cf, err := a.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/pause"}) || cf.Config.User != "65535:65535" {
		t.Errorf("entrypoint %q user %q, want [/pause] 65535:65535", cf.Config.Entrypoint, cf.Config.User)
	}
	// Fixed times make the digest the same in every process, not only within this one.
	unix0 := time.Unix(0, 0)
	if !cf.Created.Time.Equal(unix0) || len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(unix0) || len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("created %v, history %+v, %d diff IDs; want 1970-01-01T00:00:00Z, 1 entry then, 1", cf.Created, cf.History, len(cf.RootFS.DiffIDs))
	}
	files := layerFiles(t, mustLayers(t, a)[0], 1<<20)
	if len(files) != 1 || files[0].hdr.Name != "pause" || files[0].hdr.Mode != 0o755 || !bytes.Equal(files[0].data, bin) ||
		!files[0].hdr.ModTime.Equal(unix0) || files[0].hdr.Uid != 0 {
		t.Errorf("layer: %+v, want /pause 0755 with the binary, mtime epoch, uid 0", files)
	}

	if _, err := PauseImage(nil); err == nil {
		t.Error("PauseImage(nil) succeeded")
	}
}

func mustLayers(t *testing.T, img Image) []v1.Layer {
	t.Helper()
	ls, err := img.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func TestWorkloadImage(t *testing.T) {
	bb := fakeBusybox("1:1.35.0-4+deb12u1+b1")
	a, err := WorkloadImage(bb)
	if err != nil {
		t.Fatal(err)
	}
	b, err := WorkloadImage(fakeBusybox("1:1.35.0-4+deb12u1+b1"))
	if err != nil {
		t.Fatal(err)
	}
	if da, db := mustDigest(t, a), mustDigest(t, b); da != db {
		t.Errorf("two builds of the same busybox: digests %s and %s", da, db)
	}
	c, err := WorkloadImage(fakeBusybox("1:1.36.1-1"))
	if err != nil {
		t.Fatal(err)
	}
	if mustDigest(t, a) == mustDigest(t, c) {
		t.Error("another busybox gave the same digest")
	}
	if a.Repository != WorkloadRepository || a.Tag != "1.35.0-4-deb12u1-b1" {
		t.Errorf("name %s:%s, want %s:1.35.0-4-deb12u1-b1", a.Repository, a.Tag, WorkloadRepository)
	}
	cf, err := a.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Cmd[0] != "httpd" || cf.Config.Labels["dev.prebake.busybox-version"] != bb.Version {
		t.Errorf("config %+v: want httpd as the command and the busybox version label", cf.Config)
	}
	byName := map[string]tarFile{}
	for _, f := range layerFiles(t, mustLayers(t, a)[0], 1<<20) {
		byName[f.hdr.Name] = f
	}
	if f := byName["bin/busybox"]; !bytes.Equal(f.data, bb.Binary) || f.hdr.Mode != 0o755 {
		t.Errorf("bin/busybox: mode %o, %d bytes; want 0755 and the binary", f.hdr.Mode, len(f.data))
	}
	for _, applet := range []string{"sh", "sleep", "httpd"} {
		if f := byName["bin/"+applet]; f.hdr.Typeflag != tar.TypeSymlink || f.hdr.Linkname != "busybox" {
			t.Errorf("bin/%s: %+v, want a symlink to busybox", applet, f.hdr)
		}
	}
	if _, ok := byName["usr/share/doc/busybox-static/copyright"]; !ok {
		t.Error("the layer lacks busybox's copyright file")
	}

	if _, err := WorkloadImage(Busybox{}); err == nil {
		t.Error("WorkloadImage(Busybox{}) succeeded")
	}
}

func TestLargeImageSize(t *testing.T) {
	bb := fakeBusybox("1:1.35.0-4")
	const size = 3<<20 + 5 // not a multiple of the layer count: the last layer takes the rest
	opts := LargeOptions{Size: size, Layers: 3}
	a, err := LargeImage(bb, opts)
	if err != nil {
		t.Fatal(err)
	}
	layers := mustLayers(t, a)
	if len(layers) != 1+opts.Layers {
		t.Fatalf("%d layers, want the busybox layer plus %d", len(layers), opts.Layers)
	}
	base, err := WorkloadImage(bb)
	if err != nil {
		t.Fatal(err)
	}
	baseDigest, _ := mustLayers(t, base)[0].Digest()
	if d, _ := layers[0].Digest(); d != baseDigest {
		t.Errorf("base layer %s differs from the workload image's %s; nodes could not share it", d, baseDigest)
	}
	var total, compressed int64
	for i, l := range layers[1:] {
		files := layerFiles(t, l, 64)
		var data []tarFile
		for _, f := range files {
			if f.hdr.Typeflag == tar.TypeReg {
				data = append(data, f)
			}
		}
		if len(data) != 1 || !strings.HasPrefix(data[0].hdr.Name, "data/blob-") {
			t.Fatalf("layer %d: files %+v, want one data/blob-N", i+1, files)
		}
		total += data[0].hdr.Size
		n, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		compressed += n
	}
	if total != size {
		t.Errorf("data files hold %d bytes, want the configured %d", total, size)
	}
	if n, err := CompressedSize(a); err != nil || n < compressed+int64(len(bb.Binary)) {
		t.Errorf("CompressedSize = %d, %v; want at least the data layers' %d plus busybox", n, err, compressed)
	}
	// Incompressible: what goes over the wire is at least the data.
	if compressed < size {
		t.Errorf("compressed data layers are %d bytes, less than the %d bytes of data: not incompressible", compressed, size)
	}
	if compressed > size+size/100+64<<10 {
		t.Errorf("compressed data layers are %d bytes for %d bytes of data: more than 1%% + tar overhead", compressed, size)
	}

	// Incompressible data: gzip at its default level cannot shrink a data layer.
	for i, l := range layers[1:] {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var cw countWriter
		zw, _ := gzip.NewWriterLevel(&cw, gzip.DefaultCompression)
		n, err := io.Copy(zw, rc)
		rc.Close()
		if err != nil || zw.Close() != nil {
			t.Fatal(err)
		}
		if cw.n < n*99/100 {
			t.Errorf("data layer %d: gzip shrinks its %d bytes to %d: the data is compressible", i+1, n, cw.n)
		}
	}

	b, err := LargeImage(bb, opts)
	if err != nil {
		t.Fatal(err)
	}
	if da, db := mustDigest(t, a), mustDigest(t, b); da != db {
		t.Errorf("two builds of the same options: digests %s and %s", da, db)
	}
	c, err := LargeImage(bb, LargeOptions{Size: size + 1, Layers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if mustDigest(t, a) == mustDigest(t, c) {
		t.Error("another size gave the same digest")
	}
	// The digest in the manifest must be that of the bytes served.
	rc, err := layers[1].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if d, _ := layers[1].Digest(); d.Hex != hex.EncodeToString(h.Sum(nil)) {
		t.Errorf("layer 1 digest %s is not the sha256 of its compressed bytes", d)
	}

	for _, bad := range []LargeOptions{{Size: 0}, {Size: -1}, {Size: 10, Layers: -1}, {Size: 2, Layers: 3}} {
		if _, err := LargeImage(bb, bad); err == nil || !strings.Contains(err.Error(), "LargeOptions.") {
			t.Errorf("LargeImage(%+v) = %v, want an error naming the field", bad, err)
		}
	}
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

func TestWriteArchive(t *testing.T) {
	bb := fakeBusybox("1:1.35.0-4")
	pause, err := PauseImage([]byte("pause"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := WorkloadImage(bb)
	if err != nil {
		t.Fatal(err)
	}
	large, err := LargeImage(bb, LargeOptions{Size: 1 << 16, Layers: 2})
	if err != nil {
		t.Fatal(err)
	}
	const host = "172.18.0.1:5000"
	var a, b bytes.Buffer
	if err := WriteArchive(&a, host, pause, work, large); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&b, host, pause, work, large); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two archives of the same images differ")
	}

	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(a.Bytes()))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := files[hdr.Name]; dup {
			t.Errorf("%s is in the archive twice", hdr.Name)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = data
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	for name, data := range files {
		if hexd, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexd != "" {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexd {
				t.Errorf("blob %s has the content of sha256:%x", name, sum)
			}
		}
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, m := range index.Manifests {
		names[m.Annotations[annotationContainerdName]] = m.Digest.String()
		if _, ok := files["blobs/sha256/"+m.Digest.Hex]; !ok {
			t.Errorf("manifest %s is not in the archive", m.Digest)
		}
	}
	for _, img := range []Image{pause, work, large} {
		p, err := Reference(host, img)
		if err != nil {
			t.Fatal(err)
		}
		if names[p.Ref] != p.Digest || names[p.ByDigest] != p.Digest {
			t.Errorf("index names %v lack %s and %s pointing at %s", names, p.Ref, p.ByDigest, p.Digest)
		}
		m, err := img.Image.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			if _, ok := files["blobs/sha256/"+d.Digest.Hex]; !ok {
				t.Errorf("%s: blob %s (%s) is not in the archive", p.Ref, d.Digest, d.MediaType)
			}
		}
	}
	if len(index.Manifests) != 6 {
		t.Errorf("index has %d entries, want 2 names for each of 3 images", len(index.Manifests))
	}
}

func TestReference(t *testing.T) {
	img, err := PauseImage([]byte("pause"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Reference("127.0.0.1:5000", img)
	if err != nil {
		t.Fatal(err)
	}
	d := mustDigest(t, img)
	if p.Ref != "127.0.0.1:5000/prebake/pause:1" || p.Digest != d || p.ByDigest != "127.0.0.1:5000/prebake/pause@"+d {
		t.Errorf("Reference = %+v", p)
	}
	if _, err := Reference("http://127.0.0.1:5000", img); err == nil {
		t.Error("a host with a scheme was accepted")
	}
	img.Tag = "no:colons"
	if _, err := Reference("127.0.0.1:5000", img); err == nil {
		t.Error("an invalid tag was accepted")
	}
	for _, ref := range []string{"127.0.0.1:5000/prebake/pause:1", "127.0.0.1:5000/prebake/pause@" + d} {
		if _, _, _, err := splitRef(ref); err != nil {
			t.Errorf("splitRef(%q): %v", ref, err)
		}
	}
	for _, ref := range []string{"prebake/pause:1", "127.0.0.1:5000/prebake/pause", "127.0.0.1:5000/Prebake/pause:1"} {
		if _, _, _, err := splitRef(ref); err == nil {
			t.Errorf("splitRef(%q) accepted it", ref)
		}
	}
}
