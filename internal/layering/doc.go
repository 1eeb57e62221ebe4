// Package layering holds no code: its test holds the module to the way its
// dependencies point (docs/architecture.md, "Layers"):
//
//   - no package outside cmd/ and e2e/ imports e2e/... (tests included);
//   - no package outside cmd/ imports cmd/...;
//   - no non-test package imports testing (test helpers take internal/tb);
//   - a package under internal/ imports, of this module, only internal/
//     packages and the leaves bootstrap, imagecatalog and mesh;
//   - the leaves (bootstrap, imagecatalog, mesh and the packages below them)
//     import, outside their tests, only internal/ packages and each other,
//     nothing above them (providers, autoscaling, config, ...); their tests
//     may (imagecatalog's drive the providers' fakes).
//
// It reads the import graph with `go list` under every build tag the
// module uses.
package layering
