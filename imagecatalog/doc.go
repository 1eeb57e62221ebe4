// Package imagecatalog is the model of prebaked node images: immutable names,
// manifests of baked components, inputs hashes, channels with history, and the
// pure operations over them (publish, promote, rollback, deprecate, gc
// planning, resolve), plus the reviewable catalog document and its
// compare-and-swap file store.
//
// Invariants:
//   - An image never changes once published; channels are pointers that move.
//   - Resolve yields exactly one image id or an error that says why.
//   - gc never plans to delete an image a channel points to, one in the last N
//     of a channel's history, or one a live instance uses.
//   - Operations are functions of a Catalog value and return a new value; they
//     do no I/O. Cloud access goes through the narrow interfaces in api.go,
//     which providers implement.
//
// This is a leaf package: it imports no other project package.
package imagecatalog
