// Package certs serves TLS from files that may change on disk, and makes the
// development certificates `prebake certs` writes.
//
// Invariant: a reload that fails (half-written files, a key that does not
// match) keeps the last good certificate and logs why; it never serves a
// broken config.
package certs
