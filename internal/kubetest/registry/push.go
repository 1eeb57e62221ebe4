package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Pushed is an image in a registry.
type Pushed struct {
	// Ref is host/repository:tag.
	Ref string
	// Digest is the manifest digest, sha256:<hex>.
	Digest string
	// ByDigest is host/repository@<Digest>: the reference a pod spec or a recipe's
	// containerImages list pins.
	ByDigest string
}

// Reference returns where img goes in the registry at host (host:port).
func Reference(host string, img Image) (Pushed, error) {
	if err := checkHostPort(host); err != nil {
		return Pushed{}, err
	}
	if !repositoryRE.MatchString(img.Repository) || !tagRE.MatchString(img.Tag) {
		return Pushed{}, fmt.Errorf("image %q:%q: not a valid repository and tag (OCI distribution spec)", img.Repository, img.Tag)
	}
	d, err := img.Digest()
	if err != nil {
		return Pushed{}, err
	}
	base := host + "/" + img.Repository
	return Pushed{Ref: base + ":" + img.Tag, Digest: d, ByDigest: base + "@" + d}, nil
}

// The OCI distribution spec's grammar for repository names and tags.
var (
	repositoryRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagRE        = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
)

// Push uploads img to the plain-HTTP registry at host (host:port) under its tag, with no
// credentials, and returns its references. It speaks the OCI distribution spec's push
// (one POST and one PUT per missing blob, then the manifest by tag) itself: the one flow
// needed here, without go-containerregistry's remote package and the Docker credential
// configuration code it links in.
func Push(ctx context.Context, host string, img Image) (Pushed, error) {
	p, err := Reference(host, img)
	if err != nil {
		return Pushed{}, err
	}
	c := client{base: "http://" + host + "/v2/" + img.Repository}
	layers, err := img.Image.Layers()
	if err != nil {
		return Pushed{}, fmt.Errorf("push %s: %w", p.Ref, err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return Pushed{}, fmt.Errorf("push %s: %w", p.Ref, err)
		}
		size, err := l.Size()
		if err != nil {
			return Pushed{}, fmt.Errorf("push %s: %w", p.Ref, err)
		}
		if err := c.putBlob(ctx, d.String(), size, l.Compressed); err != nil {
			return Pushed{}, fmt.Errorf("push %s: layer %s: %w", p.Ref, d, err)
		}
	}
	cfg, err := img.Image.RawConfigFile()
	if err != nil {
		return Pushed{}, fmt.Errorf("push %s: %w", p.Ref, err)
	}
	cfgName, err := img.Image.ConfigName()
	if err != nil {
		return Pushed{}, fmt.Errorf("push %s: %w", p.Ref, err)
	}
	if err := c.putBlob(ctx, cfgName.String(), int64(len(cfg)), bytesOpener(cfg)); err != nil {
		return Pushed{}, fmt.Errorf("push %s: config: %w", p.Ref, err)
	}
	raw, err := img.Image.RawManifest()
	if err != nil {
		return Pushed{}, fmt.Errorf("push %s: %w", p.Ref, err)
	}
	mt, err := img.Image.MediaType()
	if err != nil {
		return Pushed{}, fmt.Errorf("push %s: %w", p.Ref, err)
	}
	resp, err := c.do(ctx, http.MethodPut, c.base+"/manifests/"+img.Tag, string(mt), bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return Pushed{}, fmt.Errorf("push %s: manifest: %w", p.Ref, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return Pushed{}, fmt.Errorf("push %s: PUT manifest answered %s", p.Ref, resp.Status)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != p.Digest {
		return Pushed{}, fmt.Errorf("push %s: the registry stored the manifest as %s, want %s", p.Ref, got, p.Digest)
	}
	return p, nil
}

// Pulled is an image as fetched from a registry: its manifest, config and layer blobs,
// each checked against the digest that names it.
type Pulled struct {
	Digest    string // the manifest's digest
	MediaType string
	Manifest  []byte
	Config    []byte
	// Layers are the layers' digests with their blob sizes as fetched.
	Layers []PulledLayer
}

// PulledLayer is one fetched layer blob.
type PulledLayer struct {
	Digest string
	Size   int64
}

// Pull fetches the image that ref (host:port/repository:tag or …@sha256:…) names from its
// plain-HTTP registry: the manifest (which must match the digest in ref, if any), the
// config and every layer, each verified against its digest. Layers are read and discarded.
func Pull(ctx context.Context, ref string) (Pulled, error) {
	host, repo, tagOrDigest, err := splitRef(ref)
	if err != nil {
		return Pulled{}, err
	}
	c := client{base: "http://" + host + "/v2/" + repo}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/manifests/"+tagOrDigest, nil)
	if err != nil {
		return Pulled{}, err
	}
	req.Header.Set("Accept", string(types.OCIManifestSchema1)+", "+string(types.DockerManifestSchema2))
	resp, err := httpClient.Do(req)
	if err != nil {
		return Pulled{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		return Pulled{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Pulled{}, fmt.Errorf("pull %s: GET manifest answered %s", ref, resp.Status)
	}
	sum := sha256.Sum256(raw)
	out := Pulled{Digest: "sha256:" + hex.EncodeToString(sum[:]), MediaType: resp.Header.Get("Content-Type"), Manifest: raw}
	if strings.HasPrefix(tagOrDigest, "sha256:") && tagOrDigest != out.Digest {
		return Pulled{}, fmt.Errorf("pull %s: the manifest served has digest %s", ref, out.Digest)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return Pulled{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	var cfg bytes.Buffer
	if _, err := c.getBlob(ctx, m.Config.Digest.String(), &cfg); err != nil {
		return Pulled{}, fmt.Errorf("pull %s: config: %w", ref, err)
	}
	out.Config = cfg.Bytes()
	for _, l := range m.Layers {
		n, err := c.getBlob(ctx, l.Digest.String(), io.Discard)
		if err != nil {
			return Pulled{}, fmt.Errorf("pull %s: layer: %w", ref, err)
		}
		out.Layers = append(out.Layers, PulledLayer{Digest: l.Digest.String(), Size: n})
	}
	return out, nil
}

// splitRef splits host:port/repository:tag or host:port/repository@sha256:<hex>.
func splitRef(ref string) (host, repo, tagOrDigest string, err error) {
	bad := fmt.Errorf("image reference %q: want host:port/repository:tag or host:port/repository@sha256:<hex>", ref)
	host, rest, ok := strings.Cut(ref, "/")
	if !ok || checkHostPort(host) != nil {
		return "", "", "", bad
	}
	if r, d, ok := strings.Cut(rest, "@"); ok {
		repo, tagOrDigest = r, d
	} else if i := strings.LastIndexByte(rest, ':'); i > 0 {
		repo, tagOrDigest = rest[:i], rest[i+1:]
	} else {
		return "", "", "", bad
	}
	if !repositoryRE.MatchString(repo) || tagOrDigest == "" {
		return "", "", "", bad
	}
	return host, repo, tagOrDigest, nil
}

// httpClient is http.DefaultClient's transport without a proxy: the registry is on loopback
// or a local Docker network, never behind HTTP_PROXY.
var httpClient = &http.Client{Transport: noProxyTransport()}

func noProxyTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return t
}

// client speaks to one repository of a plain-HTTP registry: base is http://host/v2/<repo>.
type client struct{ base string }

func (c client) do(ctx context.Context, method, url, contentType string, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", contentType)
	}
	return httpClient.Do(req)
}

// putBlob uploads a blob unless the repository has it: HEAD, then a monolithic upload
// (POST /blobs/uploads/, PUT <location>?digest=).
func (c client) putBlob(ctx context.Context, digest string, size int64, open func() (io.ReadCloser, error)) error {
	resp, err := c.do(ctx, http.MethodHead, c.base+"/blobs/"+digest, "", nil, 0)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	resp, err = c.do(ctx, http.MethodPost, c.base+"/blobs/uploads/", "", nil, 0)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST blobs/uploads/ answered %s", resp.Status)
	}
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("POST blobs/uploads/ gave no usable Location (%q)", resp.Header.Get("Location"))
	}
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	resp, err = c.do(ctx, http.MethodPut, loc.String(), "application/octet-stream", rc, size)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("PUT upload answered %s", resp.Status)
	}
	return nil
}

// getBlob copies the blob to w, checking its sha256 digest, and returns its size.
func (c client) getBlob(ctx context.Context, digest string, w io.Writer) (int64, error) {
	resp, err := c.do(ctx, http.MethodGet, c.base+"/blobs/"+digest, "", nil, 0)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET blob %s answered %s", digest, resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return n, err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return n, fmt.Errorf("blob %s has digest %s", digest, got)
	}
	return n, nil
}

// Annotations containerd's importer reads for an image's name
// (containerd images.AnnotationImageName) and OCI's ref name.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationOCIRefName     = "org.opencontainers.image.ref.name"
)

// WriteArchive writes imgs as one OCI image layout tarball (oci-layout, index.json,
// blobs/sha256/…) to w, for `ctr -n k8s.io images import` on a node. Each image is listed
// twice in index.json, as host/repository:tag and as host/repository@digest, both under
// containerd's name annotation: a pulled image gets both names from containerd's CRI
// plugin, and the kubelet finds a pod's image under either. containerd imports an OCI
// layout as it is (containerd v1.6 images/archive/importer.go), so the imported image keeps
// the digest it has in the registry. Blobs shared by several images are written once; the
// tar is the same bytes for the same images.
func WriteArchive(w io.Writer, host string, imgs ...Image) error {
	type blob struct {
		digest v1.Hash
		size   int64
		open   func() (io.ReadCloser, error)
	}
	var blobs []blob
	seen := map[v1.Hash]bool{}
	add := func(d v1.Hash, size int64, open func() (io.ReadCloser, error)) {
		if !seen[d] {
			seen[d] = true
			blobs = append(blobs, blob{d, size, open})
		}
	}
	var index v1.IndexManifest
	index.SchemaVersion = 2
	index.MediaType = types.OCIImageIndex
	for _, img := range imgs {
		p, err := Reference(host, img)
		if err != nil {
			return err
		}
		raw, err := img.Image.RawManifest()
		if err != nil {
			return fmt.Errorf("archive %s: %w", p.Ref, err)
		}
		mt, err := img.Image.MediaType()
		if err != nil {
			return fmt.Errorf("archive %s: %w", p.Ref, err)
		}
		digest, err := img.Image.Digest()
		if err != nil {
			return fmt.Errorf("archive %s: %w", p.Ref, err)
		}
		add(digest, int64(len(raw)), bytesOpener(raw))
		cfg, err := img.Image.RawConfigFile()
		if err != nil {
			return fmt.Errorf("archive %s: %w", p.Ref, err)
		}
		cfgName, err := img.Image.ConfigName()
		if err != nil {
			return fmt.Errorf("archive %s: %w", p.Ref, err)
		}
		add(cfgName, int64(len(cfg)), bytesOpener(cfg))
		layers, err := img.Image.Layers()
		if err != nil {
			return fmt.Errorf("archive %s: %w", p.Ref, err)
		}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return fmt.Errorf("archive %s: %w", p.Ref, err)
			}
			size, err := l.Size()
			if err != nil {
				return fmt.Errorf("archive %s: %w", p.Ref, err)
			}
			add(d, size, l.Compressed)
		}
		for _, n := range []string{p.Ref, p.ByDigest} {
			index.Manifests = append(index.Manifests, v1.Descriptor{
				MediaType: mt, Digest: digest, Size: int64(len(raw)),
				Platform:    &v1.Platform{Architecture: "amd64", OS: "linux"},
				Annotations: map[string]string{annotationContainerdName: n, annotationOCIRefName: img.Tag},
			})
		}
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	slices.SortFunc(blobs, func(a, b blob) int {
		if a.digest.String() < b.digest.String() {
			return -1
		}
		return 1
	})

	tw := tar.NewWriter(w)
	writeFile := func(path string, size int64, open func() (io.ReadCloser, error)) error {
		if err := tw.WriteHeader(fileHeader(path, 0o644, size)); err != nil {
			return err
		}
		rc, err := open()
		if err != nil {
			return fmt.Errorf("archive %s: %w", path, err)
		}
		defer rc.Close()
		n, err := io.Copy(tw, rc)
		if err != nil {
			return fmt.Errorf("archive %s: %w", path, err)
		}
		if n != size {
			return fmt.Errorf("archive %s: wrote %d bytes, its descriptor says %d", path, n, size)
		}
		return nil
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := writeFile("oci-layout", int64(len(layout)), bytesOpener(layout)); err != nil {
		return err
	}
	if err := writeFile("index.json", int64(len(indexJSON)), bytesOpener(indexJSON)); err != nil {
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := writeHeader(tw, tarEntry{name: dir, mode: 0o755}); err != nil {
			return err
		}
	}
	for _, b := range blobs {
		if err := writeFile("blobs/"+b.digest.Algorithm+"/"+b.digest.Hex, b.size, b.open); err != nil {
			return err
		}
	}
	return tw.Close()
}

func bytesOpener(data []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
}
