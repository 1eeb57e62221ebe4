// Package version holds the build's version, set with -ldflags -X.
package version

// Version and Commit are set at build time:
//
//	-X github.com/prebake-dev/prebake/internal/version.Version=v0.1.0
var (
	Version = "dev"
	Commit  = "unknown"
)
