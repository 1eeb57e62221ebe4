package imagecatalog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Family is an OS family. It decides how a node is configured at boot (Renderer) and what
// an image of it must bake (RequiredComponents). A name's os segment and a key's release
// carry it: prebake-flatcar-4230-k8s-..., flatcar-4230.
type Family string

// The families the catalog knows. Other OS names still parse (names are not restricted to
// these), and render cloud-init, as every image did before families existed.
const (
	FamilyDebian  Family = "debian"
	FamilyUbuntu  Family = "ubuntu"
	FamilyFlatcar Family = "flatcar"
	FamilyFCOS    Family = "fcos"
)

// Families lists the known families in the order messages name them.
var Families = []Family{FamilyDebian, FamilyUbuntu, FamilyFlatcar, FamilyFCOS}

// Renderer is how a node gets its configuration at first boot.
type Renderer string

const (
	// RendererCloudInit: #cloud-config user-data running the node script, which installs
	// what the image lacks with apt or from URLs (bootstrap.Render).
	RendererCloudInit Renderer = "cloud-init"
	// RendererIgnition: an Ignition config; kubelet and kubeadm come from the Kubernetes
	// sysext, baked into the image or downloaded by Ignition (bootstrap.RenderIgnition).
	RendererIgnition Renderer = "ignition"
)

// SysextComponent is the Kubernetes sysext's component name: the one component a Flatcar
// or Fedora CoreOS image must bake, at an exact release such as v1.35.4. The OS itself
// brings containerd, runc and the kernel tools; bootstrap names it the same.
const SysextComponent = "kubernetes-sysext"

// ErrMixedRenderers says a query can resolve images that configure nodes two ways.
var ErrMixedRenderers = errors.New("images of two renderers")

// FamilyOf returns the family of os: a name's os segment (flatcar) or a key's release
// (flatcar-4230). ok is false when it is none of Families.
func FamilyOf(os string) (Family, bool) {
	f := Family(strings.SplitN(os, "-", 2)[0])
	return f, slices.Contains(Families, f)
}

// Renderer is the family's renderer; a family the catalog does not know renders cloud-init.
func (f Family) Renderer() Renderer {
	if f == FamilyFlatcar || f == FamilyFCOS {
		return RendererIgnition
	}
	return RendererCloudInit
}

// RequiredComponents are what an image of the family must bake at exact versions: the apt
// set on Debian and Ubuntu (and on families the catalog does not know), the Kubernetes
// sysext on Flatcar and Fedora CoreOS.
func (f Family) RequiredComponents() []string {
	if f.Renderer() == RendererIgnition {
		return []string{SysextComponent}
	}
	return DefaultComponents
}

// familyNames is Families as text, for messages.
func familyNames() string {
	var s []string
	for _, f := range Families {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

// FamilyOfImage returns the family of the image with the id: its name's os.
func FamilyOfImage(c Catalog, id string) (Family, error) {
	im, ok := c.Image(id)
	if !ok {
		return "", fmt.Errorf("family of image %q: %w in the catalog", id, ErrNotFound)
	}
	n, err := ParseName(im.Name)
	if err != nil {
		return "", fmt.Errorf("family of image %q: %w", id, err)
	}
	return Family(n.OS), nil
}

// RendererOf returns how a node booted from the image with the id is configured: from the
// family of its name's os.
func RendererOf(c Catalog, id string) (Renderer, error) {
	f, err := FamilyOfImage(c, id)
	if err != nil {
		return "", err
	}
	return f.Renderer(), nil
}

// ChooseFamily is the OS family of a new machine. image is the id the core resolved; ""
// means the runtime-install path on the provider's base image, whose family the group's
// image.os gives (groupOS, such as flatcar-4230), and which is Debian or Ubuntu when that
// is empty (the providers' default base images; FamilyDebian stands for both). An image the
// catalog lacks is an error: the core resolved it from this catalog.
func ChooseFamily(c Catalog, image, groupOS string) (Family, error) {
	if image != "" {
		return FamilyOfImage(c, image)
	}
	if groupOS == "" {
		return FamilyDebian, nil
	}
	f, _ := FamilyOf(groupOS)
	return f, nil
}

// ChannelFamily is the OS family of the channels q matches, taken from their keys, when
// they all configure nodes one way: the one family they share, or, where they are of
// several families of one renderer, the first of them in Families order (FamilyDebian stands
// for Debian and Ubuntu, as in ChooseFamily). ok is false when q matches no channel or
// channels of two renderers (CheckRenderers' error). It is the family of a group without an
// OS of its own when its channel gives no image: a Flatcar-only channel's machines are
// Flatcar machines, whether the channel points anywhere or not.
func ChannelFamily(c Catalog, q Query) (f Family, ok bool) {
	seen := map[Family]bool{}
	renderers := map[Renderer]bool{}
	for _, ch := range MatchChannels(c, q) {
		fam, _ := FamilyOf(ch.OS)
		seen[fam] = true
		renderers[fam.Renderer()] = true
	}
	if len(renderers) != 1 {
		return "", false
	}
	if len(seen) == 1 {
		for fam := range seen {
			return fam, true
		}
	}
	for _, fam := range Families {
		if seen[fam] {
			return fam, true
		}
	}
	// Several families the catalog does not know: cloud-init, as Debian.
	return FamilyDebian, true
}

// ChooseRenderer picks the renderer of a new machine: ChooseFamily's renderer. The core
// renders cloud-init (bootstrap.Render) or Ignition (bootstrap.RenderIgnition, with the
// family as its OS) from it.
func ChooseRenderer(c Catalog, image, groupOS string) (Renderer, error) {
	f, err := ChooseFamily(c, image, groupOS)
	if err != nil {
		return "", err
	}
	return f.Renderer(), nil
}

// QueryRenderers returns, for each renderer, the channels matching q whose key's OS
// configures nodes that way: "name (key)". A channel's images (now and in its history,
// where a rollback moves it) all have its key, so the key decides, even before the
// channel points anywhere.
func QueryRenderers(c Catalog, q Query) map[Renderer][]string {
	out := map[Renderer][]string{}
	for _, ch := range MatchChannels(c, q) {
		f, _ := FamilyOf(ch.OS)
		r := f.Renderer()
		out[r] = append(out[r], fmt.Sprintf("%s (%s)", ch.Name, ch.Key))
	}
	return out
}

// CheckRenderers returns an ErrMixedRenderers error naming the channels when the query can
// resolve images of two renderers: a group's nodes would be configured two ways as
// promotes and rollbacks move its channel. Narrowing the query's OS to one release fixes it.
func CheckRenderers(c Catalog, q Query) error {
	rs := QueryRenderers(c, q)
	if len(rs) < 2 {
		return nil
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(rs)) {
		parts = append(parts, fmt.Sprintf("%s via %s", r, strings.Join(rs[r], ", ")))
	}
	return fmt.Errorf("channel %s (%s): %w: %s", q.Channel, q.Key, ErrMixedRenderers, strings.Join(parts, "; "))
}
