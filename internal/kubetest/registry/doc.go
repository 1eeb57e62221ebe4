// Package registry is the test environment's local OCI registry and the container images
// pods use on real nodes (docs/e2e.md, "Local registry and pod images").
//
//   - BuildServer builds distribution's registry server (DistributionVersion) from its Go
//     module into a cache outside the repository; Start runs it as a process on an address
//     the caller gives, plain HTTP, with filesystem storage, and Stop ends it.
//   - BuildPause, FetchBusybox and PauseImage, WorkloadImage, LargeImage (or BuildImages for
//     all) make reproducible linux/amd64 OCI images: the same inputs give the same digest.
//   - Push uploads an image by tag; Pull fetches and verifies one; WriteArchive writes an OCI
//     layout tarball for `ctr -n k8s.io images import`, which keeps the registry digests.
//   - HostsTOML and ContainerdCRIConfig render containerd 1.6's registry host config for a
//     plain-HTTP registry and the config.toml lines for it and the sandbox image.
//
// Every cache lives under DefaultCacheDir (~/.cache/prebake/registry), each with a lock and
// a stamp file written last. A missing prerequisite (go, the module proxy, apt-get,
// dpkg-deb, the busybox-static package) is ErrUnavailable, on which tests skip with one line
// except under CI=true (SkipIfUnavailable).
package registry
