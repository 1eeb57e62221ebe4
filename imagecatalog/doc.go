// Package imagecatalog is the model of prebaked node images: immutable names,
// manifests of baked components, inputs hashes, channels with history, and the
// pure operations over them (publish, promote, rollback, deprecate, gc
// planning, resolve); the reviewable catalog document and its stores (a file
// or a ConfigMap, both compare-and-swap); the cloud labels that mirror the
// catalog (labels.go, the one home of every label key); and the operations
// that go through a provider's image API: gc, label push, sync, build with
// verification, and refresh with a canary.
//
// OS families (family.go): a name's os segment is debian, ubuntu, flatcar or
// fcos (other names still parse and count as Debian-like). The family says
// how a node is configured (Renderer: cloud-init, or Ignition for Flatcar
// and Fedora CoreOS; ChooseRenderer picks it for a new machine from the
// resolved image or the group's OS) and what an image bakes
// (RequiredComponents: the apt set, or the Kubernetes sysext).
// CheckRenderers and QueryRenderers find a query that could resolve images
// of both renderers.
//
// Invariants:
//   - An image never changes once published; channels are pointers that move.
//   - Resolve yields exactly one image id or an error that says why. A group's
//     container images (ResolvePreferring) only break a tie Resolve refuses.
//   - gc never plans to delete an image a channel points to, one in the last N
//     of a channel's history, or one a live instance uses.
//   - Every write of the catalog is compare-and-swap through a Store (Update
//     reloads and reapplies on conflict), so two writers never lose updates.
//   - A build publishes only an image whose builder reported the requested
//     versions, every container image of the recipe (at the digest it is
//     pinned to) and passed every hygiene check; the manifest recorded is the
//     one the builder observed. The same inputs never build twice.
//   - Pure operations take a Catalog value and return a new one; cloud access
//     goes through the narrow interfaces in api.go, cloud.go and build.go,
//     which providers implement.
//
// This is a leaf package: it imports no other project package (client-go is
// used for the ConfigMap store).
package imagecatalog
