package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/prebake-dev/prebake/internal/version"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "prebake %s (commit %s, %s)\n", version.Version, version.Commit, runtime.Version())
			return err
		},
	}
}
