package app

import (
	"slices"
	"testing"

	"github.com/prebake-dev/prebake/config"
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
