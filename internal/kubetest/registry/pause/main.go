// Command pause is the pod sandbox ("pause") container of prebake's test images: it holds
// the pod's namespaces by staying alive, and exits 0 on SIGTERM or SIGINT. Unlike the
// upstream pause it reaps no children, so it suits pods without a shared process namespace
// (the Kubernetes default). It is built statically (CGO_ENABLED=0) by
// internal/kubetest/registry.BuildPause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
