// Command prebake is an external-gRPC cloud provider for the Kubernetes
// cluster-autoscaler that makes node scale-up fast.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:   "prebake",
		Short: "Fast node scale-up for the Kubernetes cluster-autoscaler",
		Long: `prebake is an external-gRPC cloud provider for the Kubernetes cluster-autoscaler
(--cloud-provider=externalgrpc). It answers every read from memory, returns from
IncreaseSize in milliseconds, and boots nodes from prebaked images.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newVersionCommand(), newCertsCommand())
	root.AddCommand(newMeshCommand())
	root.AddCommand(newImagesCommand())
	root.AddCommand(newTimelineCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "prebake:", err)
		os.Exit(1)
	}
}
