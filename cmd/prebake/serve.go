package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/prebake-dev/prebake/cmd/prebake/app"
)

func newServeCommand() *cobra.Command {
	var (
		o         app.Options
		logLevel  string
		logFormat string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve cluster-autoscaler's externalgrpc protocol",
		Long: `Serves the externalgrpc cloud provider protocol that cluster-autoscaler uses with
--cloud-provider=externalgrpc. The config is validated in full before anything listens.

Plaintext is allowed only on a loopback address, or with --insecure. Otherwise give
--tls-cert, --tls-key and --client-ca: the server then requires client certificates
signed by that CA (mTLS) and reloads all three files when they change.`,
		Example: `  prebake serve --config examples/kwok.yaml --listen 127.0.0.1:8086 --insecure
  prebake serve --config prod.yaml --listen :8086 --tls-cert tls/server.crt --tls-key tls/server.key --client-ca tls/ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			o.Logger = log
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return app.Run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ConfigPath, "config", "", "path of the ProviderConfig YAML (required)")
	f.StringVar(&o.Listen, "listen", "127.0.0.1:8086", "gRPC address cluster-autoscaler dials")
	f.StringVar(&o.HTTPListen, "http-listen", "127.0.0.1:8087", `address of /healthz, /readyz and /metrics ("" disables)`)
	f.StringVar(&o.TLSCert, "tls-cert", "", "server certificate PEM")
	f.StringVar(&o.TLSKey, "tls-key", "", "server private key PEM")
	f.StringVar(&o.ClientCA, "client-ca", "", "CA PEM that client certificates must chain to (enables mTLS)")
	f.BoolVar(&o.Insecure, "insecure", false, "allow plaintext gRPC on a non-loopback address")
	f.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long shutdown waits for in-flight creations")
	f.StringVar(&o.CAExpander, "ca-expander", "", `cluster-autoscaler's --expander value (such as "price,least-waste"): refuse to start when the config can't serve one of them (price needs a price for every group); empty logs what the config supports`)
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, &flagError{"--log-format", format, "text or json"}
}

type flagError struct{ flag, got, want string }

func (e *flagError) Error() string { return e.flag + " " + e.got + ": want " + e.want }
