package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prebake-dev/prebake/cmd/prebake/app"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers/hcloud"
)

// openStore turns --catalog into a store: a path or file://path is a
// FileStore, configmap://namespace/name a ConfigMapStore in the cluster of
// --kubeconfig ($KUBECONFIG, then in-cluster).
func openStore(catalog, kubeconfig string) (imagecatalog.Store, error) {
	if rest, ok := strings.CutPrefix(catalog, "configmap://"); ok {
		ns, name, found := strings.Cut(rest, "/")
		if !found || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("--catalog %q: want configmap://NAMESPACE/NAME", catalog)
		}
		rc, err := kubeRESTConfig(kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--catalog %s: %w", catalog, err)
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("--catalog %s: %w", catalog, err)
		}
		return imagecatalog.ConfigMapStore{Client: cs.CoreV1(), Namespace: ns, Name: name}, nil
	}
	path := strings.TrimPrefix(catalog, "file://")
	if path == "" || strings.Contains(catalog, "://") && !strings.HasPrefix(catalog, "file://") {
		return nil, fmt.Errorf("--catalog %q: want a file path, file://PATH or configmap://NAMESPACE/NAME", catalog)
	}
	return imagecatalog.FileStore{Path: path}, nil
}

func kubeRESTConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err == nil {
		return rc, nil
	}
	if path == "" {
		if ic, ierr := rest.InClusterConfig(); ierr == nil {
			return ic, nil
		}
	}
	return nil, fmt.Errorf("no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a cluster: %w", err)
}

// builderDialFor, when set, gives the SSH dialer for the builders of the hcloud API at
// endpoint: tests route it to a stand-in sshd. nil dials the builder's address.
var builderDialFor func(endpoint string) func(ctx context.Context, network, addr string) (net.Conn, error)

// imageCloud is a provider's image API as the images commands use it.
type imageCloud interface {
	imagecatalog.BuildAPI
	imagecatalog.InstanceLister
}

// cloudOf opens the provider of --config: the same ProviderConfig file as
// `prebake serve`, validated in full, whose hcloud or gce block gives the
// image API (one of them: a config with both is refused). It returns the
// catalog's provider name and location for it: images are global on both
// clouds, so the location is "".
func cloudOf(cmd *cobra.Command) (imageCloud, string, string, error) {
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		return nil, "", "", fmt.Errorf("%s needs the provider's image API: give --config, the ProviderConfig file `prebake serve` uses", cmd.CommandPath())
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, "", "", err
	}
	h, g := cfg.Providers.Hcloud, cfg.Providers.Gce
	switch {
	case h != nil && g != nil:
		return nil, "", "", fmt.Errorf("%s has both a providers.hcloud and a providers.gce block: the image commands work on one provider's images; give --config a file with only the provider to work on (one config per provider)", path)
	case g != nil:
		p, err := app.NewGCE(cmd.Context(), cfg, slog.Default().With("provider", "gce"))
		if err != nil {
			return nil, "", "", fmt.Errorf("%s: %w", path, err)
		}
		// GCE images are global (the catalog keys them with location "",
		// as the core resolves them), and an image's id is its name.
		return p, "gce", "", nil
	case h == nil:
		return nil, "", "", fmt.Errorf("%s: no providers.hcloud or providers.gce block; only those have an image API in this build (kwok and providers without custom images use the runtime-install path)", path)
	}
	token, err := h.Token.Resolve()
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: providers.hcloud.token: %w", path, err)
	}
	o := hcloud.Options{Token: token, Endpoint: h.Endpoint, Cluster: cfg.ClusterName,
		SSHKeys: h.SSHKeys, Firewalls: h.Firewalls, Logger: slog.Default().With("provider", "hcloud")}
	if builderDialFor != nil {
		o.BuilderDial = builderDialFor(h.Endpoint)
	}
	p, err := hcloud.New(o)
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: providers.hcloud: %w", path, err)
	}
	// Hetzner snapshots are global: location "".
	return p, "hcloud", "", nil
}

// cloudIfConfigured is cloudOf when --config is given, and nil otherwise:
// catalog-only changes (promote, rollback, deprecate) also push their labels
// to the cloud when they can.
func cloudIfConfigured(cmd *cobra.Command) (imageCloud, string, string, error) {
	if path, _ := cmd.Flags().GetString("config"); path == "" {
		return nil, "", "", nil
	}
	return cloudOf(cmd)
}
