package imagecatalog

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// This file is the one home of the container images an image holds: the
// references a recipe lists (containerImages), the digests the builder
// recorded for them (Manifest.ContainerImages), and which group's list an
// image covers (docs/images.md, "Baked container images").

// ContainerImageDigest is the form of a digest the builder records: what
// `ctr images ls` shows as an image's DIGEST (its manifest or index).
var ContainerImageDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// containerImageRef is a fully qualified reference, as containerd's ctr
// pulls it: host[:port]/path[:tag][@sha256:digest]. It is
// bootstrap's imageRef with the host required.
var containerImageRef = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*(:[0-9]{1,5})?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$`)

// ImageRef is a container image reference taken apart.
type ImageRef struct {
	// Name is host[:port]/path, without tag or digest.
	Name string
	// Tag and Digest are "" when the reference has none.
	Tag, Digest string
}

// ParseImageRef takes ref apart. It accepts what a recipe or a group may
// list: a fully qualified reference (ctr and the kubelet's CRI look images up
// by it), by tag, by digest or both, as in
// registry.example/team/app:1.2@sha256:<64 hex>.
func ParseImageRef(ref string) (ImageRef, error) {
	if !containerImageRef.MatchString(ref) {
		return ImageRef{}, fmt.Errorf("%q is not a fully qualified image reference: want host/path:tag, host/path@sha256:<64 hex> or both, such as registry.k8s.io/pause:3.10", ref)
	}
	var r ImageRef
	rest, digest, _ := strings.Cut(ref, "@")
	r.Digest = digest
	// A tag follows the last '/'; a ':' before it is the host's port.
	slash := strings.LastIndex(rest, "/")
	if i := strings.LastIndex(rest, ":"); i > slash {
		rest, r.Tag = rest[:i], rest[i+1:]
	}
	r.Name = rest
	return r, nil
}

// CheckContainerImage checks refs[i] of a list of references (a recipe's
// or a group's): it parses, and no earlier entry is the same reference.
// The caller names the field.
func CheckContainerImage(refs []string, i int) error {
	if _, err := ParseImageRef(refs[i]); err != nil {
		return err
	}
	if j := slices.Index(refs, refs[i]); j < i {
		return fmt.Errorf("%q is listed twice (also [%d]); list each image once", refs[i], j)
	}
	return nil
}

// validateContainerImages checks a manifest's reference -> digest map:
// every reference parses, every digest is one, and a reference pinned by
// digest recorded exactly that digest.
func validateContainerImages(m map[string]string) []string {
	var errs []string
	for _, ref := range slices.Sorted(maps.Keys(m)) {
		r, err := ParseImageRef(ref)
		switch d := m[ref]; {
		case err != nil:
			errs = append(errs, "containerImages: "+err.Error())
		case !ContainerImageDigest.MatchString(d):
			errs = append(errs, fmt.Sprintf("containerImages[%s]: digest %q is not sha256:<64 hex>", ref, d))
		case r.Digest != "" && r.Digest != d:
			errs = append(errs, fmt.Sprintf("containerImages[%s]: pinned to %s, recorded %s", ref, r.Digest, d))
		}
	}
	return errs
}

// verifyContainerImages lists what is wrong with a report's container
// images against the recipe's list: each requested image must be in the
// report, with the digest it is pinned to, if any.
func verifyContainerImages(want []string, observed map[string]string) []string {
	var errs []string
	for _, ref := range want {
		got, ok := observed[ref]
		r, err := ParseImageRef(ref)
		switch {
		case err != nil:
			errs = append(errs, "container image "+err.Error())
		case !ok:
			errs = append(errs, fmt.Sprintf("container image %s is not in the report: the builder did not pull it into containerd's k8s.io namespace (see its images phase)", ref))
		case r.Digest != "" && got != r.Digest:
			errs = append(errs, fmt.Sprintf("container image %s: pinned to %s, but the builder pulled %s; the registry serves other content under that reference", ref, r.Digest, got))
		}
	}
	return errs
}

// MissingContainerImages lists the references of want that the manifest
// does not hold, in want's order. A wanted reference is held when the
// manifest lists an image of the same name whose tag matches (when want has
// one) and whose recorded digest matches (when want pins one): the builder
// names each image also by its digest, so the kubelet finds it either way.
func (m Manifest) MissingContainerImages(want []string) []string {
	type held struct{ tag, digest string }
	byName := map[string][]held{}
	for ref, digest := range m.ContainerImages {
		if r, err := ParseImageRef(ref); err == nil {
			byName[r.Name] = append(byName[r.Name], held{r.Tag, digest})
		}
	}
	var missing []string
	for _, ref := range want {
		w, err := ParseImageRef(ref)
		if err != nil {
			missing = append(missing, ref)
			continue
		}
		if !slices.ContainsFunc(byName[w.Name], func(h held) bool {
			return (w.Tag == "" || w.Tag == h.tag) && (w.Digest == "" || w.Digest == h.digest)
		}) {
			missing = append(missing, ref)
		}
	}
	return missing
}
