// Package app assembles a running prebake server from a validated config:
// providers, the autoscaling core, the gRPC service with health checks, and
// the HTTP endpoints /healthz, /readyz and /metrics. cmd/prebake only parses
// flags and calls Run.
//
// Invariants: the config is fully validated and every provider built before
// anything listens; plaintext gRPC is refused off loopback unless Insecure;
// shutdown drains in-flight creations before the process exits.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/externalgrpc"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/internal/certs"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/metrics"
)

// Options are the flags of `prebake serve`.
type Options struct {
	ConfigPath string
	// Listen is the gRPC address CA dials.
	Listen string
	// HTTPListen serves /healthz, /readyz and /metrics ("" disables).
	HTTPListen string
	TLSCert    string
	TLSKey     string
	ClientCA   string
	// Insecure allows plaintext gRPC on a non-loopback address.
	Insecure bool
	// ShutdownTimeout bounds the drain of in-flight creations.
	ShutdownTimeout time.Duration
	// CAExpander is the --expander value cluster-autoscaler runs with. When
	// set, Run refuses a config that can't serve one of them (price needs a
	// price for every group); empty, it logs what the config supports.
	CAExpander string
	Logger     *slog.Logger
	// Ready, when set, is called with the bound addresses once serving.
	Ready func(grpcAddr, httpAddr string)
	// kube, when set, is the workload cluster and the kwok provider's target instead of
	// the config's kubeconfigs; this package's tests pass a fake.
	kube kubernetes.Interface
}

// Run serves until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return err
	}
	creds, err := transportCredentials(o, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bc, err := buildCore(ctx, cfg, o.ConfigPath, reg, log, o.kube)
	if err != nil {
		return err
	}
	core, nodes, groups := bc.core, bc.nodes, bc.groups
	if err := checkExpanders(core, o.CAExpander, log); err != nil {
		return err
	}

	lis, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.Listen, err)
	}
	var httpLis net.Listener
	if o.HTTPListen != "" {
		if httpLis, err = net.Listen("tcp", o.HTTPListen); err != nil {
			lis.Close()
			return fmt.Errorf("--http-listen %s: %w", o.HTTPListen, err)
		}
	}

	// The core outlives ctx so that a signal drains in-flight creations
	// instead of cutting them off; but until serving begins nothing is in
	// flight, and a signal then stops the start at once, whatever it waits
	// on (a provider's first List against an unreachable API, say).
	coreCtx, stopCore := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCore()
	started := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			select {
			case <-started:
			default:
				stopCore()
			}
		case <-started:
		}
	}()
	log.Info("starting: listing every provider once", "providers", strings.Join(providerNames(groups), ","))
	if err := core.Start(coreCtx); err != nil {
		return err
	}
	if nodes != nil {
		if err := nodes.Watch(coreCtx, core, log); err != nil {
			return fmt.Errorf("node watch: %w", err)
		}
	}
	if ctx.Err() != nil {
		log.Info("stopped before serving", "reason", context.Cause(ctx))
		sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
		defer cancel()
		_ = core.Shutdown(sctx)
		lis.Close()
		if httpLis != nil {
			httpLis.Close()
		}
		return nil
	}
	close(started)
	ready := func() error {
		if err := core.Ready(); err != nil {
			return err
		}
		if nodes != nil {
			return nodes.Synced()
		}
		return nil
	}

	rpcMetrics := externalgrpc.NewRPCMetrics(reg)
	gs := grpc.NewServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(rpcMetrics.Unary))
	externalgrpc.NewServer(core).Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider", healthpb.HealthCheckResponse_SERVING)

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(lis) }()
	var hsrv *http.Server
	if httpLis != nil {
		hsrv = &http.Server{Handler: httpMux(reg, ready), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hsrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	httpAddr := ""
	if httpLis != nil {
		httpAddr = httpLis.Addr().String()
	}
	log.Info("serving", "grpc", lis.Addr().String(), "http", httpAddr, "tls", o.TLSCert != "", "mtls", o.ClientCA != "",
		"groups", len(groups), "config", o.ConfigPath)
	if o.Ready != nil {
		o.Ready(lis.Addr().String(), httpAddr)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info("shutting down: draining in-flight creations", "timeout", o.ShutdownTimeout)
	hs.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	if err := core.Shutdown(sctx); err != nil {
		log.Warn("shutdown did not drain everything", "err", err)
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
	if hsrv != nil {
		_ = hsrv.Shutdown(sctx)
	}
	log.Info("stopped")
	return serveErr
}

// checkExpanders fails when CA's --expander (as --ca-expander says) names an
// expander the config can't serve, and otherwise logs what it supports: CA
// skips every group its price expander can't price, and scales nothing up
// when that is all of them.
func checkExpanders(core *autoscaling.Core, caExpander string, log *slog.Logger) error {
	if caExpander != "" {
		if err := core.CheckExpanders(caExpander); err != nil {
			return fmt.Errorf("--ca-expander %s: %w", caExpander, err)
		}
		log.Info("cluster-autoscaler's expanders are served", "expanders", caExpander)
		return nil
	}
	if err := core.Expanders().Supports("price"); err != nil {
		log.Warn("expanders: random, most-pods, least-waste, least-nodes, priority and grpc work; price does not", "price", err.Error())
		return nil
	}
	log.Info("expanders: every one works, price included (every group has a price)")
	return nil
}

// builtCore is a core assembled from a config, not yet started.
type builtCore struct {
	core   *autoscaling.Core
	groups []autoscaling.GroupSpec
	// nodes watches the workload cluster; nil without one.
	nodes *KubeNodes
	// kube is the workload cluster (the kwok or bootstrap client), or nil.
	kube kubernetes.Interface
}

// buildCore builds the providers, groups, user-data renderer, node client
// and catalog source of cfg and the core over them: what Run serves and
// what the image canary boots its machine with. kube, when set, stands in
// for the workload cluster the config would give the bootstrap tokens, the
// Nodes, the Events and the kwok provider.
func buildCore(ctx context.Context, cfg *config.Config, configPath string, reg prometheus.Registerer, log *slog.Logger, kube kubernetes.Interface) (builtCore, error) {
	built, err := buildProviders(ctx, cfg, metrics.NewAPIMetrics(reg), log, kube)
	if err != nil {
		return builtCore{}, err
	}
	if kube != nil {
		built.kube = kube
	}
	// Whether a provider parks machines is what it declares, so warm pools
	// are checked once the providers are built.
	if err := cfg.CheckWarmPools(func(name string) (providers.Capabilities, bool) {
		p, ok := built.providers[name]
		if !ok {
			return providers.Capabilities{}, false
		}
		return p.Capabilities(), true
	}); err != nil {
		return builtCore{}, err
	}
	groups, err := groupSpecs(cfg)
	if err != nil {
		return builtCore{}, err
	}
	userData, err := bootstrapUserData(cfg, &built, log)
	if err != nil {
		return builtCore{}, err
	}
	var nodes *KubeNodes
	if built.kube != nil {
		nodes = NewKubeNodes(built.kube, cfg.ClusterName)
	}
	coreOpts := autoscaling.Options{
		Cluster:         cfg.ClusterName,
		Groups:          groups,
		Providers:       built.providers,
		RefreshInterval: cfg.RefreshInterval.Duration,
		Reserved:        cfg.Reserved(),
		GPULabel:        cfg.GPULabel,
		Workers: autoscaling.WorkerOptions{
			Parallelism: cfg.Workers.Parallelism, QPS: cfg.Workers.QPS, Burst: cfg.Workers.Burst, Retries: cfg.Workers.Retries,
		},
		Metrics:  autoscaling.NewMetrics(reg),
		Logger:   log,
		UserData: userData,
	}
	if nodes != nil {
		coreOpts.Nodes = nodes
		coreOpts.Events = NewKubeEvents(built.kube, log)
	}
	if coreOpts.Catalog, err = catalogSource(cfg, built.kube); err != nil {
		return builtCore{}, err
	}
	coreOpts.CheckCatalog = cfg.ImageRendererErrors
	if err := checkRenderers(ctx, cfg, coreOpts.Catalog, log); err != nil {
		return builtCore{}, fmt.Errorf("%s: %w", configPath, err)
	}
	core, err := autoscaling.New(ctx, coreOpts)
	if err != nil {
		return builtCore{}, fmt.Errorf("%s: %w", configPath, err)
	}
	return builtCore{core: core, groups: groups, nodes: nodes, kube: built.kube}, nil
}

// httpMux serves /metrics, /healthz, and /readyz, which is 503 with ready's
// error until every provider has been listed and the Node watch has synced.
func httpMux(reg *prometheus.Registry, ready func() error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		// Before every provider is listed Refresh answers Unavailable; before
		// the Node watch syncs no instance can be seen running.
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func transportCredentials(o Options, log *slog.Logger) (credentials.TransportCredentials, error) {
	if o.TLSCert == "" && o.TLSKey == "" {
		if o.ClientCA != "" {
			return nil, errors.New("--client-ca needs --tls-cert and --tls-key")
		}
		if !o.Insecure && !isLoopback(o.Listen) {
			return nil, fmt.Errorf("--listen %s is not a loopback address: give --tls-cert, --tls-key and --client-ca for mTLS, or --insecure to serve plaintext anyway", o.Listen)
		}
		return insecureCreds(), nil
	}
	r, err := certs.NewReloader(o.TLSCert, o.TLSKey, o.ClientCA, log)
	if err != nil {
		return nil, err
	}
	if o.ClientCA == "" {
		log.Warn("TLS without --client-ca: any client can create and delete nodes; give --client-ca for mTLS")
	}
	return credentials.NewTLS(r.ServerConfig()), nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// restConfig resolves a provider's target cluster: the config's kubeconfig
// (key names it in errors), then $KUBECONFIG, then the in-cluster config.
func restConfig(path, key string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	switch {
	case path != "":
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	case os.Getenv("KUBECONFIG") != "":
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	default:
		rc, err = rest.InClusterConfig()
		if err != nil {
			err = fmt.Errorf("%w: set %s or $KUBECONFIG, or run in a cluster (%v)", errNoKubeconfig, key, err)
		}
	}
	if err != nil {
		return nil, err
	}
	// client-go's default 5 QPS would throttle scale-ups of many nodes.
	rc.QPS, rc.Burst = 200, 400
	rc.UserAgent = "prebake"
	return rc, nil
}

var errNoKubeconfig = errors.New("no target cluster")

// bootstrapUserData builds the user-data renderer of the bootstrap block,
// nil without one. Join tokens are made in the cluster the nodes join; when
// no provider brought a client for it, this one also gives the core its view
// of the Nodes (timeline, Node cleanup) and its Events.
func bootstrapUserData(cfg *config.Config, built *builtProviders, log *slog.Logger) (autoscaling.UserDataSource, error) {
	b := cfg.Bootstrap
	if b == nil {
		return nil, nil
	}
	kube := built.kube
	if kube == nil || b.Kubeconfig != "" {
		rc, err := restConfig(b.Kubeconfig, "bootstrap.kubeconfig")
		if err != nil {
			return nil, fmt.Errorf("bootstrap.kubeconfig: %w", err)
		}
		if kube, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("bootstrap.kubeconfig: %w", err)
		}
	}
	if built.kube == nil {
		built.kube = kube
	}
	ud := &BootstrapUserData{
		Tokens:     bootstrap.Tokens{Client: kube, TTL: b.TokenTTL.Duration},
		Cluster:    b.BootstrapCluster(),
		Components: b.BootstrapComponents(),
		Options:    bootstrap.Options{DpkgLockWait: b.DpkgLockWait.Duration},
		Networks:   map[string]bootstrap.Network{},
		Log:        log.With("component", "bootstrap"),
	}
	if s := b.KubernetesSysext; s != nil {
		ud.Sysext = s.Sysext
	}
	for _, g := range cfg.NodeGroups {
		ud.Networks[g.ID] = g.BootstrapNetwork()
	}
	return ud, nil
}

func groupSpecs(cfg *config.Config) ([]autoscaling.GroupSpec, error) {
	out := make([]autoscaling.GroupSpec, 0, len(cfg.NodeGroups))
	for _, g := range cfg.NodeGroups {
		spec := autoscaling.GroupSpec{
			ID: g.ID, Provider: g.Provider, MinSize: g.MinSize, MaxSize: g.MaxSize,
			MachineType: g.MachineType, Zone: g.Location, Region: g.Region,
			Labels: g.Labels, Taints: g.Taints(), ImageChannel: g.Image.Channel, ImageOS: g.Image.OS, ImageK8sMinor: g.Image.K8sMinor,
			ImageContainerImages: g.Image.ContainerImages,
		}
		spec.WarmPool.Size, spec.WarmPool.State = g.WarmPoolSpec()
		spec.WarmPool.WarmingTimeout = g.WarmingTimeout()
		if g.UserDataFile != "" {
			b, err := os.ReadFile(g.UserDataFile)
			if err != nil {
				return nil, fmt.Errorf("node group %q: userDataFile: %w", g.ID, err)
			}
			spec.UserData = b
		}
		out = append(out, spec)
	}
	return out, nil
}

// checkRenderers refuses to start with a group whose channel can resolve
// images that are configured two ways (cloud-init and Ignition: image.os
// unset on a channel holding Ubuntu and Flatcar images), against the catalog
// as it is at start. Later catalogs, and the first one when it can't load
// at start, are checked by the core on every load (Options.CheckCatalog):
// such a group's new machines then fail with a creation error naming the
// group and image.os, and the other groups go on.
func checkRenderers(ctx context.Context, cfg *config.Config, src autoscaling.CatalogSource, log *slog.Logger) error {
	if src == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cat, err := src.LoadCatalog(lctx)
	if err != nil {
		log.Warn("image catalog not loaded at start; the groups' renderers are checked when it loads", "err", err)
		return nil
	}
	return cfg.CheckImageRenderers(cat)
}

// providerNames are the providers the groups use, in first-use order.
func providerNames(groups []autoscaling.GroupSpec) []string {
	var out []string
	for _, g := range groups {
		if !slices.Contains(out, g.Provider) {
			out = append(out, g.Provider)
		}
	}
	return out
}

// storeCatalog is the image catalog the core resolves channels against:
// the file or ConfigMap prebake images writes.
type storeCatalog struct{ store imagecatalog.Store }

func (s storeCatalog) LoadCatalog(ctx context.Context) (imagecatalog.Catalog, error) {
	c, _, err := s.store.Load(ctx)
	return c, err
}

// catalogSource opens imageCatalog: nil without one. A ConfigMap lives in
// the cluster of kube (the kwok or bootstrap client) unless
// imageCatalog.kubeconfig names another.
func catalogSource(cfg *config.Config, kube kubernetes.Interface) (autoscaling.CatalogSource, error) {
	ic := cfg.ImageCatalog
	if ic.File != "" {
		return storeCatalog{imagecatalog.FileStore{Path: ic.File}}, nil
	}
	ns, name, ok := ic.ConfigMapRef()
	if !ok {
		return nil, nil
	}
	if kube == nil || ic.Kubeconfig != "" {
		rc, err := restConfig(ic.Kubeconfig, "imageCatalog.kubeconfig")
		if err != nil {
			return nil, fmt.Errorf("imageCatalog.configMap: %w", err)
		}
		if kube, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("imageCatalog.configMap: %w", err)
		}
	}
	return storeCatalog{imagecatalog.ConfigMapStore{Client: kube.CoreV1(), Namespace: ns, Name: name}}, nil
}
