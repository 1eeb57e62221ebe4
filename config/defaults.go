package config

import (
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// applyDefaults fills in the fields the config leaves out. set holds the
// field paths written with a value: a field that is written keeps its value,
// even 0 or "", and Validate judges it.
func (c *Config) applyDefaults(set map[string]bool) {
	unset := func(path string) bool { return !set[path] }

	if unset("refreshInterval") {
		c.RefreshInterval.Duration = defaultRefreshInterval
	}
	if unset("kubeReserved.cpu") {
		c.KubeReserved.CPU = newQuantity(resource.MustParse(defaultReservedCPU))
	}
	if unset("kubeReserved.memory") {
		c.KubeReserved.Memory = newQuantity(resource.MustParse(defaultReservedMemory))
	}
	if unset("gpuLabel") {
		c.GPULabel = defaultGPULabel
	}

	w := &c.Workers
	if unset("workers.parallelism") {
		w.Parallelism = defaultParallelism
	}
	if unset("workers.qps") {
		w.QPS = defaultQPS
	}
	if unset("workers.burst") {
		w.Burst = defaultBurst(w.QPS)
	}
	if unset("workers.retries") {
		w.Retries = defaultRetries
	}

	// "kwok:" with nothing after it still means "use kwok", with defaults.
	if _, written := c.lines["providers.kwok"]; written && c.Providers.Kwok == nil {
		c.Providers.Kwok = &KwokProvider{}
	}
	c.applyStaticDefaults(set)
	c.applyDockerDefaults(set)
	c.applyBootstrapDefaults(set)
	if h := c.Providers.Hcloud; h != nil {
		if unset("providers.hcloud.image") {
			h.Image = defaultHcloudImage
		}
		if unset("providers.hcloud.standbySSHAddress") {
			h.StandbySSHAddress = StandbySSHPublic
		}
	}
	c.applyGceDefaults(unset)
	c.applyWarmPoolDefaults(set)
	if k := c.Providers.Kwok; k != nil {
		const p = "providers.kwok"
		if unset(p + ".namespace") {
			k.Namespace = defaultKwokNamespace
		}
		if unset(p + ".simulatedBoot.prebaked") {
			k.SimulatedBoot.Prebaked.Duration = defaultPrebakedBoot
		}
		if unset(p + ".simulatedBoot.runtimeInstall") {
			k.SimulatedBoot.RuntimeInstall.Duration = defaultRuntimeInstallBoot
		}
		for i := range k.MachineTypes {
			if unset(p + ".machineTypes[" + strconv.Itoa(i) + "].arch") {
				k.MachineTypes[i].Arch = defaultArch
			}
		}
	}
}

// defaultBurst allows two seconds' worth of calls at once.
func defaultBurst(qps float64) int {
	if math.IsNaN(qps) || qps <= 0 || qps > maxQPS {
		qps = defaultQPS // Validate reports qps itself
	}
	return max(1, int(math.Ceil(2*qps)))
}
