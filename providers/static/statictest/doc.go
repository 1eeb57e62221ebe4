// Package statictest holds the system-test fixtures of the static provider:
// real sshd "machines" in a network namespace the test creates (NewPool),
// and a real API server for claims (StartCluster). Tests of
// providers/static and cmd/prebake/app share them.
//
// Invariants: every namespace, veth, process and file a fixture makes is
// removed at the test's cleanup; traffic goes only to addresses inside
// namespaces the fixture made, or loopback. A missing prerequisite skips
// the test with one line, and fails it under CI=true (docs/e2e.md, "Prerequisites").
package statictest
