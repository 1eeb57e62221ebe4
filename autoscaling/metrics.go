package autoscaling

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prebake-dev/prebake/providers"
)

// Timeline phases, each measured from the moment CA's IncreaseSize recorded
// the instance. They are the project's headline metric.
const (
	phaseAPIAccepted    = "api_accepted"
	phaseRunning        = "running"
	phaseNodeRegistered = "node_registered"
	phaseNodeReady      = "node_ready"
	phasePodRunning     = "pod_running"
)

// Metrics are the core's Prometheus metrics.
type Metrics struct {
	reg            prometheus.Registerer
	phaseSeconds   *prometheus.HistogramVec
	increaseSize   *prometheus.CounterVec
	createErrors   *prometheus.CounterVec
	deleteErrors   *prometheus.CounterVec
	queueDepth     *prometheus.GaugeVec
	refreshSeconds *prometheus.HistogramVec
	refreshErrors  *prometheus.CounterVec
	orphans        *prometheus.CounterVec
	imageFallbacks *prometheus.CounterVec
	// missingContainerImages counts machines booted from an image lacking
	// some of their group's image.containerImages.
	missingContainerImages *prometheus.CounterVec
	catalogErrors          prometheus.Counter
	// joinTokensRevoked counts tokens revoked once their node registered.
	joinTokensRevoked prometheus.Counter
	// bootstrapSeconds are the node script's own phase durations, as the
	// node reported them on its Node.
	bootstrapSeconds *prometheus.HistogramVec
	// The warm pool's (warmpool.go).
	poolTaken, poolFallbacks, poolDiscarded, poolParkErrors *prometheus.CounterVec
}

// NewMetrics registers the core's metrics with reg (a private registry when
// reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		reg: reg,
		phaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "prebake_instance_phase_seconds",
			Help:    "Seconds from IncreaseSize recording an instance to each phase of its timeline: api_accepted, running, node_registered, node_ready, pod_running (the first pod on its Node seen Running).",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 1200, 24),
		}, []string{"group", "image_kind", "phase"}),
		bootstrapSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "prebake_bootstrap_phase_seconds",
			Help:    "Duration of each phase of the node script (manifest, plan, install, configure, images, address, kubelet, join, podnetwork; total is the whole script) as the node reported it on its Node; result is ok, skipped or failed, or missing for an images phase that found baked container images gone.",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 1200, 24),
		}, []string{"group", "image_kind", "phase", "result"}),
		increaseSize: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_instances_requested_total",
			Help: "Instances requested through IncreaseSize.",
		}, []string{"group"}),
		createErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_instance_create_errors_total",
			Help: "Creations that failed for good and were reported to CA, by CA error class and code.",
		}, []string{"group", "class", "code"}),
		deleteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_instance_delete_errors_total",
			Help: "Deletions that ran out of retries (retried on the next sync).",
		}, []string{"group", "code"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "prebake_worker_queue_depth",
			Help: "Creations and deletions waiting for a provider worker.",
		}, []string{"provider"}),
		refreshSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "prebake_refresh_list_seconds",
			Help:    "Duration of one provider List during refresh.",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 60, 16),
		}, []string{"provider"}),
		refreshErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_refresh_errors_total",
			Help: "Provider List calls that failed during refresh.",
		}, []string{"provider"}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_orphan_instances_seen_total",
			Help: "Listed instances whose group is not configured (left alone).",
		}, []string{"provider"}),
		imageFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_image_fallback_total",
			Help: "Machines of groups with an image channel that take the runtime-install path instead, by reason: provider_without_images, catalog_unavailable, no_image, ambiguous, deprecated.",
		}, []string{"group", "reason"}),
		missingContainerImages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_image_missing_container_images_total",
			Help: "Machines that boot a catalog image lacking some of their group's image.containerImages (no image the channel could resolve to holds them all); the kubelet pulls those.",
		}, []string{"group"}),
		catalogErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "prebake_image_catalog_load_errors_total",
			Help: "Image catalog loads that failed (the last good catalog stays in use).",
		}),
		joinTokensRevoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "prebake_join_tokens_revoked_total",
			Help: "Join tokens revoked as soon as their machine's Node registered (the rest expire within their hour).",
		}),
		poolTaken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_warm_pool_taken_total",
			Help: "Parked standbys IncreaseSize took from a group's warm pool to resume them (each instead of a create).",
		}, []string{"group"}),
		poolFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_warm_pool_resume_fallbacks_total",
			Help: "Resumes of taken standbys that failed for good and fell back to a create within the same scale-up, by error code.",
		}, []string{"group", "code"}),
		poolDiscarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_warm_pool_discarded_total",
			Help: "Standbys deleted instead of resumed, by reason: stale_image (replaced: its image is no longer the channel's head), failed, create_failed, surplus, warming_timeout (never reported prepared within warmPool.warmingTimeout).",
		}, []string{"group", "reason"}),
		poolParkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prebake_warm_pool_park_errors_total",
			Help: "Parks of prepared standbys that failed (retried on the next round), by error code.",
		}, []string{"group", "code"}),
	}
	reg.MustRegister(m.phaseSeconds, m.bootstrapSeconds, m.increaseSize, m.createErrors, m.deleteErrors, m.queueDepth,
		m.refreshSeconds, m.refreshErrors, m.orphans, m.imageFallbacks, m.missingContainerImages, m.catalogErrors, m.joinTokensRevoked,
		m.poolTaken, m.poolFallbacks, m.poolDiscarded, m.poolParkErrors)
	return m
}

func (m *Metrics) observePhase(group string, kind providers.ImageKind, phase string, d time.Duration) {
	m.phaseSeconds.WithLabelValues(group, string(kind), phase).Observe(d.Seconds())
}

func (m *Metrics) observeBootstrap(group string, kind providers.ImageKind, phase, result string, d time.Duration) {
	m.bootstrapSeconds.WithLabelValues(group, string(kind), phase, result).Observe(d.Seconds())
}

// watch registers the per-group gauges, read from c's snapshot on scrape.
func (m *Metrics) watch(c *Core) {
	m.reg.MustRegister(&groupCollector{core: c})
}

var (
	targetDesc   = prometheus.NewDesc("prebake_group_target_size", "Target size of each node group.", []string{"group"}, nil)
	minDesc      = prometheus.NewDesc("prebake_group_min_size", "Configured minSize of each node group.", []string{"group"}, nil)
	maxDesc      = prometheus.NewDesc("prebake_group_max_size", "Configured maxSize of each node group.", []string{"group"}, nil)
	stateDesc    = prometheus.NewDesc("prebake_group_instances", "Instances of each node group by state as CA sees it (standbys left out).", []string{"group", "state", "error"}, nil)
	poolDesc     = prometheus.NewDesc("prebake_warm_pool_standbys", "Standbys in each group's warm pool by phase: warming (being created or prepared), prepared (to be parked), parked (ready to resume).", []string{"group", "phase"}, nil)
	poolSizeDesc = prometheus.NewDesc("prebake_warm_pool_size", "Configured warmPool.size of each node group.", []string{"group"}, nil)
)

type groupCollector struct{ core *Core }

func (g *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- targetDesc
	ch <- minDesc
	ch <- maxDesc
	ch <- stateDesc
	ch <- poolDesc
	ch <- poolSizeDesc
}

func (g *groupCollector) Collect(ch chan<- prometheus.Metric) {
	c := g.core
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, id := range c.groupOrder {
		gr := c.groups[id]
		ch <- prometheus.MustNewConstMetric(targetDesc, prometheus.GaugeValue, float64(gr.targetLocked()), id)
		ch <- prometheus.MustNewConstMetric(minDesc, prometheus.GaugeValue, float64(gr.spec.MinSize), id)
		ch <- prometheus.MustNewConstMetric(maxDesc, prometheus.GaugeValue, float64(gr.spec.MaxSize), id)
		type key struct {
			state string
			err   bool
		}
		counts := map[key]int{}
		pool := map[int]int{}
		for _, inst := range gr.instances {
			if inst.isStandby() {
				if inst.phase != phaseDeleting {
					pool[standbyRank(inst)]++
				}
				continue
			}
			counts[key{inst.viewState().String(), inst.err != nil}]++
		}
		ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(gr.spec.WarmPool.Size), id)
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(pool[0]+pool[1]), id, "warming")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(pool[2]), id, "prepared")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(pool[3]), id, "parked")
		for _, s := range []string{"creating", "running", "deleting"} {
			for _, e := range []bool{false, true} {
				if s != "creating" && e {
					continue
				}
				errLabel := "false"
				if e {
					errLabel = "true"
				}
				ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, float64(counts[key{s, e}]), id, s, errLabel)
			}
		}
	}
}
