// Package tb is the part of testing.TB that this module's test helpers use.
// *testing.T and *testing.B satisfy it, so a helper library (the hermetic
// control plane, the test registry, the static provider's sshd, the
// conformance suite) needs no import of package testing, and a program that
// links one (the demo) links no testing code.
package tb

import "context"

// TB is what a test helper may do with its test.
type TB interface {
	Helper()
	Cleanup(func())
	Context() context.Context
	TempDir() string
	Setenv(key, value string)
	Log(args ...any)
	Logf(format string, args ...any)
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Name() string
}

// T is a TB that runs subtests, as *testing.T does: Run(name, f) calls f
// with the subtest, of the same type.
type T[Self any] interface {
	TB
	Parallel()
	Run(name string, f func(t Self)) bool
}
