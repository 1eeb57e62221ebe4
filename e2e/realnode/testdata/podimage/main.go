// Command podimage is the one binary of the e2e pod images, built by the test: as /pause it
// is the pod sandbox (it waits for a signal, as Kubernetes' pause does); as /hello it prints
// one line naming its host, then waits the same way.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	if filepath.Base(os.Args[0]) == "hello" {
		host, _ := os.Hostname()
		fmt.Printf("hello from %s\n", host)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
