package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/prebake-dev/prebake/internal/certs"
)

func newCertsCommand() *cobra.Command {
	var (
		dir      string
		hosts    []string
		validFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Write a development CA, server and client certificate for mTLS",
		Long: `Writes ca.crt, server.crt/.key and client.crt/.key into --dir, for trying mTLS
between cluster-autoscaler and prebake. Use cert-manager or your own PKI in production.`,
		Example: `  prebake certs --dir ./tls --host localhost --host 127.0.0.1
  prebake serve --config examples/kwok.yaml --listen 127.0.0.1:8086 \
    --tls-cert tls/server.crt --tls-key tls/server.key --client-ca tls/ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := certs.Generate(dir, hosts, validFor)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s, %s (and their keys)\n", b.CACert, b.ServerCert, b.ClientCert)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "tls", "directory to write the certificates into")
	cmd.Flags().StringSliceVar(&hosts, "host", []string{"localhost", "127.0.0.1"}, "DNS name or IP the server certificate is valid for (repeatable)")
	cmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "validity of the certificates")
	return cmd
}
