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
// `prebake serve`, validated in full, built by the same factory
// (app.NewProvider). The config must configure exactly one provider with an
// image API (a config with two is refused). It returns the catalog's
// provider name and location for it: images are global on every provider
// that has them, so the location is "".
func cloudOf(cmd *cobra.Command) (imageCloud, string, string, error) {
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		return nil, "", "", fmt.Errorf("%s needs the provider's image API: give --config, the ProviderConfig file `prebake serve` uses", cmd.CommandPath())
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, "", "", err
	}
	names := app.ImageProviders(cfg)
	switch len(names) {
	case 0:
		return nil, "", "", fmt.Errorf("%s: no providers block with an image API (%s); the other providers' machines take the runtime-install path", path, strings.Join(app.AllImageProviders(), ", "))
	case 1:
	default:
		return nil, "", "", fmt.Errorf("%s configures %s: the image commands work on one provider's images; give --config a file with only the provider to work on (one config per provider)", path, strings.Join(names, " and "))
	}
	b, err := app.NewProvider(cmd.Context(), cfg, names[0], app.Deps{Logger: slog.Default(), BuilderDial: builderDialFor})
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", path, err)
	}
	ic, ok := b.Provider.(imageCloud)
	if !ok {
		return nil, "", "", fmt.Errorf("%s: provider %s has no image builder in this build", path, names[0])
	}
	return ic, names[0], "", nil
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
