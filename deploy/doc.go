// Package deploy is the home of the kustomize manifests (base/, components/,
// overlays/) that run prebake next to cluster-autoscaler, and of their tests.
// Its one piece of code, BaseArg, reads the flags deploy/base ships, so the
// e2e suite and the demo run CA's stand-in with the same expanders.
//
// Invariants the tests hold every overlay to (docs/deploy.md, "What is
// validated"): it renders with `kubectl kustomize`; every container runs as
// non-root with a read-only root filesystem, no capabilities, the
// RuntimeDefault seccomp profile and resource requests and limits; a Secret is
// mounted only into the containers listed in secretConsumers; no token Secret
// is inlined; and, under the e2e build tag, every render but mtls-certmanager
// passes `kubectl apply --dry-run=server` on the hermetic API server.
package deploy
