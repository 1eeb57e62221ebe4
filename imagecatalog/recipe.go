package imagecatalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RecipeKind is the kind of the file that lists what `prebake images build`
// and `refresh` make.
const RecipeKind = "ImageRecipe"

type recipeDoc struct {
	APIVersion string        `yaml:"apiVersion"`
	Kind       string        `yaml:"kind"`
	Images     []recipeImage `yaml:"images"`
}

type recipeImage struct {
	OS              string            `yaml:"os"`
	OSVersion       string            `yaml:"osVersion"`
	Kubernetes      string            `yaml:"kubernetes"`
	Arch            string            `yaml:"arch"`
	Provider        string            `yaml:"provider"`
	Location        string            `yaml:"location"`
	BaseImage       string            `yaml:"baseImage"`
	MachineType     string            `yaml:"machineType"`
	BuilderLocation string            `yaml:"builderLocation"`
	UserDataFile    string            `yaml:"userDataFile"`
	Components      map[string]string `yaml:"components"`
	ContainerImages []string          `yaml:"containerImages"`
	Channel         string            `yaml:"channel"`
}

// LoadRecipe reads a recipe file strictly (unknown fields are errors) and
// returns its build specs, each with its userDataFile read (a relative path
// is relative to the recipe). An image without userDataFile gets no
// UserData here: the caller renders bootstrap's builder user-data from its
// components and containerImages (cmd/prebake does; imagecatalog does not
// import bootstrap).
func LoadRecipe(path string) ([]BuildSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("recipe: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var d recipeDoc
	if err := dec.Decode(&d); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty; want apiVersion %s, kind %s", path, APIVersion, RecipeKind)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if d.APIVersion != APIVersion || d.Kind != RecipeKind {
		return nil, fmt.Errorf("%s: apiVersion %q kind %q, want %s %s", path, d.APIVersion, d.Kind, APIVersion, RecipeKind)
	}
	if len(d.Images) == 0 {
		return nil, fmt.Errorf("%s: images is empty; list at least one image to build", path)
	}
	var specs []BuildSpec
	var errs []error
	for i, ri := range d.Images {
		where := fmt.Sprintf("%s: images[%d]", path, i)
		v, err := ParseVersion(ri.Kubernetes)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.kubernetes: %w", where, err))
			continue
		}
		s := BuildSpec{OS: ri.OS, OSVersion: ri.OSVersion, K8s: v, Arch: ri.Arch, Provider: ri.Provider, Location: ri.Location,
			BaseImage: ri.BaseImage, MachineType: ri.MachineType, BuilderLocation: ri.BuilderLocation,
			Components: ri.Components, ContainerImages: ri.ContainerImages, Channel: ri.Channel}
		n := Name{OS: s.OS, OSVersion: s.OSVersion, K8s: v, Arch: s.Arch}
		// Any build time will do to check the rest of the name.
		n.Built = n.Built.AddDate(2000, 0, 0)
		if err := n.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		for field, val := range map[string]string{"provider": s.Provider, "baseImage": s.BaseImage, "machineType": s.MachineType} {
			if val == "" {
				errs = append(errs, fmt.Errorf("%s.%s is required", where, field))
			}
		}
		family, known := FamilyOf(ri.OS)
		if !known && ri.OS != "" {
			errs = append(errs, fmt.Errorf("%s.os %q: want an OS family the catalog knows: %s", where, ri.OS, familyNames()))
		}
		var missing []string
		for _, c := range family.RequiredComponents() {
			if _, ok := ri.Components[c]; !ok {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("%s.components: %s missing: every component a %s image bakes needs an exact version", where, strings.Join(missing, ", "), ri.OS))
		} else if err := s.Manifest().ValidateFor(family); err != nil {
			errs = append(errs, fmt.Errorf("%s.components: %w", where, err))
		}
		if family.Renderer() == RendererIgnition && ri.UserDataFile == "" {
			// The builder user-data prebake renders is cloud-init running apt; these
			// families boot Ignition and have no apt.
			errs = append(errs, fmt.Errorf("%s.userDataFile: a %s image needs its builder's Ignition config here (one that places the %s and writes the build report, docs/os-images.md); prebake renders cloud-init builders only", where, ri.OS, SysextComponent))
		}
		for j := range ri.ContainerImages {
			if err := CheckContainerImage(ri.ContainerImages, j); err != nil {
				errs = append(errs, fmt.Errorf("%s.containerImages[%d]: %w", where, j, err))
			}
		}
		if len(ri.ContainerImages) > 0 && ri.UserDataFile != "" {
			errs = append(errs, fmt.Errorf("%s.containerImages: prebake pulls them in the builder user-data it renders; with userDataFile, pull them in that file and leave containerImages out", where))
		}
		if ri.UserDataFile != "" {
			p := ri.UserDataFile
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(path), p)
			}
			if s.UserData, err = os.ReadFile(p); err != nil {
				errs = append(errs, fmt.Errorf("%s.userDataFile: %w", where, err))
			}
		}
		specs = append(specs, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return specs, nil
}
