package main

import (
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/prebake-dev/prebake/internal/certs"
)

func newCertsCommand() *cobra.Command {
	var (
		out      string
		dnsNames []string
		ips      []string
		// Deprecated spellings, kept so existing scripts keep working.
		dir      string
		hosts    []string
		validFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Write a CA, server and client certificate for mTLS between cluster-autoscaler and prebake",
		Long: `Writes ca.crt, ca.key, server.crt, server.key, client.crt and client.key into --out:
the same set of files the deploy/components/mtls-certmanager component has cert-manager
make, for clusters without cert-manager. The server certificate carries every --dns and
--ip as a SAN: it must include the host of the "address" in CA's cloud-config, such as
prebake.kube-system.svc. Keys are written 0600; keep ca.key out of the cluster.`,
		Example: `  prebake certs --out deploy/components/mtls-files/tls --dns prebake.kube-system.svc
  prebake certs --out ./tls --dns localhost --ip 127.0.0.1
  prebake serve --config examples/kwok.yaml --listen 127.0.0.1:8086 \
    --tls-cert tls/server.crt --tls-key tls/server.key --client-ca tls/ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("dir") {
				if cmd.Flags().Changed("out") {
					return fmt.Errorf("--dir is the old name of --out: give one of them")
				}
				out = dir
			}
			sans, err := certSANs(dnsNames, ips, hosts)
			if err != nil {
				return err
			}
			b, err := certs.Generate(out, sans, validFor)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s, %s and their keys; server SANs: %v\n", b.CACert, b.ServerCert, b.ClientCert, sans)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "tls", "directory to write the certificates and keys into")
	cmd.Flags().StringSliceVar(&dnsNames, "dns", nil, "DNS name the server certificate is valid for (repeatable), e.g. prebake.kube-system.svc")
	cmd.Flags().StringSliceVar(&ips, "ip", nil, "IP address the server certificate is valid for (repeatable), e.g. 127.0.0.1")
	cmd.Flags().StringVar(&dir, "dir", "tls", "deprecated: use --out")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "deprecated: use --dns or --ip")
	_ = cmd.Flags().MarkDeprecated("dir", "use --out")
	_ = cmd.Flags().MarkDeprecated("host", "use --dns for names and --ip for addresses")
	cmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "validity of the certificates")
	return cmd
}

// certSANs checks and merges the SAN flags; with none it returns localhost
// and 127.0.0.1, for trying prebake on one machine.
func certSANs(dnsNames, ips, hosts []string) ([]string, error) {
	var sans []string
	for _, d := range dnsNames {
		if net.ParseIP(d) != nil {
			return nil, fmt.Errorf("--dns %s is an IP address: pass it as --ip %s", d, d)
		}
		if d == "" {
			return nil, fmt.Errorf("--dns: empty name")
		}
		sans = append(sans, d)
	}
	for _, ip := range ips {
		if net.ParseIP(ip) == nil {
			return nil, fmt.Errorf("--ip %q is not an IP address: pass names as --dns", ip)
		}
		sans = append(sans, ip)
	}
	sans = append(sans, hosts...)
	if len(sans) == 0 {
		sans = []string{"localhost", "127.0.0.1"}
	}
	return sans, nil
}
