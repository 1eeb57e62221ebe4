package mesh

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeConfigs returns the REST config of each cluster's API server, by cluster name.
// kubeconfig is the kubeconfig file; empty means $KUBECONFIG or ~/.kube/config, as kubectl
// does. A cluster uses its Context, or the context named like the cluster when Context is
// empty; APIServer, when set, replaces the context's server URL.
func KubeConfigs(clusters []Cluster, kubeconfig string) (map[string]*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	out := make(map[string]*rest.Config, len(clusters))
	var errs []error
	for _, c := range clusters {
		ctxName := c.Context
		if ctxName == "" {
			ctxName = c.Name
		}
		overrides := &clientcmd.ConfigOverrides{CurrentContext: ctxName}
		if c.APIServer != "" {
			overrides.ClusterInfo.Server = c.APIServer
		}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: kubeconfig context %q: %w (set context: in the clusters file, or --kubeconfig)", c.label(), ctxName, err))
			continue
		}
		// One apply per object and cluster: the defaults (QPS 5) would only slow retries.
		cfg.QPS, cfg.Burst = 50, 100
		out[c.Name] = cfg
	}
	return out, errors.Join(errs...)
}

// KubeClients returns a client of each cluster's API server, by cluster name, from the
// configs of KubeConfigs.
func KubeClients(clusters []Cluster, kubeconfig string) (map[string]kubernetes.Interface, error) {
	configs, err := KubeConfigs(clusters, kubeconfig)
	if err != nil {
		return nil, err
	}
	return ClientsFor(clusters, configs)
}

// ClientsFor returns a client per config, by cluster name.
func ClientsFor(clusters []Cluster, configs map[string]*rest.Config) (map[string]kubernetes.Interface, error) {
	out := make(map[string]kubernetes.Interface, len(configs))
	var errs []error
	for _, c := range clusters {
		cfg := configs[c.Name]
		if cfg == nil {
			errs = append(errs, fmt.Errorf("%s: no kubeconfig", c.label()))
			continue
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.label(), err))
			continue
		}
		out[c.Name] = cs
	}
	return out, errors.Join(errs...)
}
