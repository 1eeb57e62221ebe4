package app

import (
	"slices"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers"
)

// TestGroupSpecsCarryTheImageSelection: what a group's image block says reaches the core.
func TestGroupSpecsCarryTheImageSelection(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{NodeGroups: []config.NodeGroup{{ID: "web", Provider: "kwok", Image: config.Image{
		Channel: "stable", OS: "ubuntu-2404", K8sMinor: "1.35", ContainerImages: []string{"registry.k8s.io/pause:3.10", "registry.example/web:2"},
	}}}}
	specs, err := groupSpecs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := specs[0]
	if s.ImageChannel != "stable" || s.ImageOS != "ubuntu-2404" || s.ImageK8sMinor != "1.35" ||
		!slices.Equal(s.ImageContainerImages, cfg.NodeGroups[0].Image.ContainerImages) {
		t.Errorf("group spec %+v does not carry the group's image block %+v", s, cfg.NodeGroups[0].Image)
	}
}

// TestGroupSpecsCarryTheWarmPool: size, state and warmingTimeout reach the core.
func TestGroupSpecsCarryTheWarmPool(t *testing.T) {
	t.Parallel()
	wp := &config.WarmPool{Size: 2, State: "suspended", WarmingTimeout: config.Duration{Duration: 7 * time.Minute}}
	specs, err := groupSpecs(&config.Config{NodeGroups: []config.NodeGroup{{ID: "web", Provider: "gce", WarmPool: wp}}})
	if err != nil {
		t.Fatal(err)
	}
	want := autoscaling.WarmPool{Size: 2, State: providers.StandbySuspended, WarmingTimeout: 7 * time.Minute}
	if got := specs[0].WarmPool; got != want {
		t.Errorf("group spec's warm pool = %+v, want %+v", got, want)
	}
}
