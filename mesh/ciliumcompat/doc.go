// Package ciliumcompat cross-checks prebake's re-implementation of Cilium's cluster name and
// id rules (package mesh) against Cilium itself, github.com/cilium/cilium
// pkg/clustermesh/types at v1.20.2, table by table: when Cilium changes a rule, a test here
// fails.
//
// It is a separate, test-only module (its own go.mod, with a replace of the prebake module
// to ../..), so that prebake's own module graph and binaries never carry Cilium's 23 extra
// modules (shared/spec/mesh.md §5, DESIGN.md §3.5). Run it with `make ciliumcompat`.
//
// Invariant: nothing outside this module imports it, and it imports Cilium only in tests.
package ciliumcompat
