package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/autoscaling/canary"
	"github.com/prebake-dev/prebake/config"
)

// CanaryOptions are what `prebake images refresh --canary-group` passes.
type CanaryOptions struct {
	// ConfigPath is the ProviderConfig prebake serve runs with.
	ConfigPath string
	// Group is the node group whose machine the canary boots.
	Group  string
	Canary canary.Options
	Logger *slog.Logger
	// Kube, when set, is the workload cluster instead of the one serve
	// would find (the provider's or bootstrap's kubeconfig, $KUBECONFIG,
	// in-cluster); tests pass a fake.
	Kube kubernetes.Interface
}

// Canary is a canary.JoinCanary over a core built exactly as serve
// builds it, started; Stop shuts that core down.
type Canary struct {
	*canary.JoinCanary
	core *autoscaling.Core
	stop context.CancelFunc
}

// CheckCanaryGroup reports whether the config at path has group, without
// building anything: what a dry run checks.
func CheckCanaryGroup(path, group string) (provider string, err error) {
	cfg, err := config.Load(path)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, g := range cfg.NodeGroups {
		if g.ID == group {
			return g.Provider, nil
		}
		ids = append(ids, g.ID)
	}
	slices.Sort(ids)
	return "", fmt.Errorf("--canary-group %q: %s has no such node group (it has: %v)", group, path, ids)
}

// NewCanary builds the core of the config (providers, user-data, node
// client, catalog), starts it and returns the canary of o.Group.
func NewCanary(ctx context.Context, o CanaryOptions) (*Canary, error) {
	if _, err := CheckCanaryGroup(o.ConfigPath, o.Group); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return nil, err
	}
	bc, err := buildCore(ctx, cfg, o.ConfigPath, prometheus.NewRegistry(), log.With("component", "canary"), o.Kube)
	if err != nil {
		return nil, err
	}
	kube := bc.kube
	if kube == nil {
		// No provider or bootstrap block names the cluster (hcloud groups
		// with a userDataFile): find it as serve finds a provider's.
		rc, err := restConfig("", "the kubeconfig of the cluster the group's machines join")
		if err != nil {
			return nil, fmt.Errorf("--canary-group %s: %w", o.Group, err)
		}
		if kube, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, err
		}
	}
	jc, err := canary.New(bc.core, kube, o.Group, o.Canary)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.ConfigPath, err)
	}
	coreCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	if err := bc.core.Start(coreCtx); err != nil {
		stop()
		return nil, err
	}
	return &Canary{JoinCanary: jc, core: bc.core, stop: stop}, nil
}

// Stop shuts the canary's core down.
func (c *Canary) Stop(ctx context.Context) error {
	err := c.core.Shutdown(ctx)
	c.stop()
	return err
}
