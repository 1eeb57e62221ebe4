package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// builderSources is what a builder's user-data takes from --config besides the recipe: the
// runtime the provider declares for its nodes (a builder is configured as every node of the
// image will be), and where the bootstrap block's components come from.
type builderSources struct {
	runtime bootstrap.Runtime
	// components are bootstrap.components by name: a recipe component of the same name is
	// installed from the same place (a binary's url and sha256, an apt package name).
	components map[string]bootstrap.Component
}

// builderSourcesOf reads them from --config (cloudOf has validated it) and the provider.
func builderSourcesOf(cmd *cobra.Command, cloud imageCloud) (builderSources, error) {
	src := builderSources{components: map[string]bootstrap.Component{}}
	if p, ok := cloud.(interface{ Capabilities() providers.Capabilities }); ok {
		src.runtime = p.Capabilities().NodeRuntime
	}
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.Load(path)
	if err != nil {
		return src, err
	}
	if cfg.Bootstrap != nil {
		for _, c := range cfg.Bootstrap.BootstrapComponents() {
			src.components[c.Name] = c
		}
	}
	return src, nil
}

// builderUserData is bootstrap's builder user-data for an image whose recipe names no
// userDataFile: every component at its exact version, installed from where --config's
// bootstrap block installs it on nodes (a binary from its url, checked against its sha256;
// an apt package by its package name), else as the apt package of its own name (the base
// image's apt sources must offer it, see docs/images.md); the recipe's containerImages
// pulled into containerd; the provider's node runtime. Then the builder cleans up and
// writes its report.
func builderUserData(s imagecatalog.BuildSpec, src builderSources) ([]byte, error) {
	m := s.Manifest()
	var comps []bootstrap.Component
	for _, name := range slices.Sorted(maps.Keys(m.Components)) {
		c := bootstrap.Component{Name: name, Version: m.Components[name]}
		if from, ok := src.components[name]; ok {
			if from.Binary() && from.Version != c.Version {
				return nil, fmt.Errorf("component %s: the recipe asks for %s, but bootstrap.components downloads %s from %s; make the versions the same (a node would install it again anyway)",
					name, c.Version, from.Version, from.URL)
			}
			c.Package, c.URL, c.SHA256, c.Path = from.Package, from.URL, from.SHA256, from.Path
		}
		comps = append(comps, c)
	}
	ud, err := bootstrap.RenderBuilder(bootstrap.BuilderInput{Provider: s.Provider, Components: comps, Sysctls: m.Sysctls, Modules: m.Modules,
		Runtime: src.runtime, Images: s.ContainerImages})
	if err != nil {
		return nil, err
	}
	return ud.CloudConfig, nil
}
