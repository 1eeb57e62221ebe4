package config

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"
)

// Defaults of the gce provider. docs/configuration.md lists the same values.
const (
	defaultGceImage      = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
	defaultGceImageArm64 = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-arm64"
	defaultGceDiskSizeGB = 50
	defaultGceQPS        = 20.0
	minGceDiskSizeGB     = 10
	maxGceDiskSizeGB     = 65536
)

// GceProvider is the Google Compute Engine provider. Node groups are
// emulated with instance labels (prebake-dev_cluster, prebake-dev_group);
// a group's location is its zone.
type GceProvider struct {
	// Project is the project id instances are created in.
	Project string `yaml:"project"`
	// Credentials is a service-account key (JSON), from a file or an
	// environment variable; never inline. Left out, the provider uses
	// Application Default Credentials (the metadata server on GCE), or no
	// authentication when endpoint is set.
	Credentials SecretRef `yaml:"credentials"`
	// Endpoint overrides the API URL; empty means Google's
	// (https://compute.googleapis.com). Tests point it at the fake.
	Endpoint string `yaml:"endpoint"`
	// Image and ImageArm64 boot groups without an image channel, by the
	// machine type's architecture: "projects/<p>/global/images/<name>" or
	// ".../images/family/<family>".
	Image      string `yaml:"image"`
	ImageArm64 string `yaml:"imageArm64"`
	// Network and Subnetwork attach every instance; empty network means the
	// project's "default" network.
	Network    string `yaml:"network"`
	Subnetwork string `yaml:"subnetwork"`
	// ExternalIP gives each instance an ephemeral public address.
	ExternalIP bool `yaml:"externalIP"`
	// ServiceAccount is the e-mail of the service account instances run as.
	ServiceAccount string `yaml:"serviceAccount"`
	// DiskSizeGB is the boot disk size in GB, also the templates'
	// ephemeral storage.
	DiskSizeGB int64 `yaml:"diskSizeGB"`
	// QPS and Burst pace every API request of the provider.
	QPS   float64 `yaml:"qps"`
	Burst int     `yaml:"burst"`
	// Prices are the machine types' on-demand prices per hour, which CA's
	// price expander needs and the Compute API does not give (Google
	// publishes them at https://cloud.google.com/compute/vm-instance-pricing
	// and in the Cloud Billing Catalog API). A type without an entry has no
	// price.
	Prices []GcePrice `yaml:"prices"`
}

// GcePrice is a machine type's price per hour in one region, or in every
// region the table doesn't name when region is left out.
type GcePrice struct {
	MachineType  string  `yaml:"machineType"`
	Region       string  `yaml:"region"`
	PricePerHour float64 `yaml:"pricePerHour"`
}

// gceProjectRE is a project id, optionally domain-scoped
// ("example.com:my-project").
var gceProjectRE = regexp.MustCompile(`^([a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$`)

// gceZoneRE is a zone name such as europe-west4-a.
var gceZoneRE = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+-[a-z]$`)

// applyGceDefaults fills the gce section and the region of gce groups.
func (c *Config) applyGceDefaults(unset func(string) bool) {
	g := c.Providers.Gce
	if g == nil {
		return
	}
	const p = "providers.gce"
	if unset(p + ".image") {
		g.Image = defaultGceImage
	}
	if unset(p + ".imageArm64") {
		g.ImageArm64 = defaultGceImageArm64
	}
	if unset(p + ".diskSizeGB") {
		g.DiskSizeGB = defaultGceDiskSizeGB
	}
	if unset(p + ".qps") {
		g.QPS = defaultGceQPS
	}
	if unset(p + ".burst") {
		g.Burst = defaultBurst(g.QPS)
	}
	for i := range c.NodeGroups {
		ng := &c.NodeGroups[i]
		if ng.Provider == "gce" && ng.Region == "" && gceZoneRE.MatchString(ng.Location) {
			// A zone's region is the zone without its last part.
			ng.Region = ng.Location[:strings.LastIndexByte(ng.Location, '-')]
		}
	}
}

func (v *validator) gce(g *GceProvider) {
	const p = "providers.gce"
	switch {
	case g.Project == "":
		v.errorf(p+".project", "%s.project is required: the id of the project instances are created in, such as \"my-project\"", p)
	case !gceProjectRE.MatchString(g.Project):
		v.errorf(p+".project", "%s.project %q is not a project id: 6 to 30 lower-case letters, digits and hyphens, starting with a letter (the id, not the display name)", p, short(g.Project))
	}
	if c := g.Credentials; c.File != "" && c.Env != "" {
		v.errorf(p+".credentials", "%s.credentials: set either file or env, not both", p)
	}
	if g.Endpoint != "" {
		u, err := url.Parse(g.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.errorf(p+".endpoint", "%s.endpoint %q is not an http(s) URL; use such as \"https://compute.googleapis.com\", or leave it out", p, short(g.Endpoint))
		}
	}
	for _, im := range []struct{ key, val string }{{"image", g.Image}, {"imageArm64", g.ImageArm64}} {
		if !strings.HasPrefix(im.val, "projects/") || !strings.Contains(im.val, "/global/images/") {
			v.errorf(p+"."+im.key, "%s.%s %q is not an image path; write \"projects/<project>/global/images/<name>\" or \".../images/family/<family>\", or leave the key out for the default", p, im.key, short(im.val))
		}
	}
	if g.DiskSizeGB < minGceDiskSizeGB || g.DiskSizeGB > maxGceDiskSizeGB {
		v.errorf(p+".diskSizeGB", "%s.diskSizeGB is %d; use %d to %d (default %d)", p, g.DiskSizeGB, minGceDiskSizeGB, maxGceDiskSizeGB, defaultGceDiskSizeGB)
	}
	if math.IsNaN(g.QPS) || g.QPS <= 0 || g.QPS > maxQPS {
		v.errorf(p+".qps", "%s.qps is %v; use API requests per second above 0 and at most %d (default %v)", p, g.QPS, maxQPS, defaultGceQPS)
	}
	if g.Burst < 1 || g.Burst > maxBurst {
		v.errorf(p+".burst", "%s.burst is %d; use 1 to %d (default 2 × qps)", p, g.Burst, maxBurst)
	}
	seen := map[string]int{}
	for i, pr := range g.Prices {
		k := fmt.Sprintf("%s.prices[%d]", p, i)
		switch {
		case pr.MachineType == "":
			v.errorf(k+".machineType", "%s.machineType is required, such as \"e2-standard-4\"", k)
		case pr.Region != "" && !gceRegionRE.MatchString(pr.Region):
			v.errorf(k+".region", "%s.region %q is not a GCE region; use such as \"europe-west4\", or leave it out for every region", k, short(pr.Region))
		}
		if math.IsNaN(pr.PricePerHour) || math.IsInf(pr.PricePerHour, 0) || pr.PricePerHour <= 0 {
			v.errorf(k+".pricePerHour", "%s.pricePerHour is %v; use the on-demand price per hour, above 0", k, pr.PricePerHour)
		}
		key := pr.MachineType + "@" + pr.Region
		if j, dup := seen[key]; dup {
			v.errorf(k, "%s repeats %s.prices[%d] (machine type %q, region %q): keep one", k, p, j, pr.MachineType, pr.Region)
		}
		seen[key] = i
	}
}

// gceRegionRE is a region name such as europe-west4.
var gceRegionRE = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)

// gceGroup checks what a gce group's fields must be on GCE: the location is
// a zone.
func (v *validator) gceGroup(p, name string, g NodeGroup) {
	if g.Provider != "gce" || g.Location == "" {
		return
	}
	if !gceZoneRE.MatchString(g.Location) {
		v.errorf(p+".location", "%s: location %q is not a GCE zone; set a zone such as \"europe-west4-a\" (`gcloud compute zones list`)", name, short(g.Location))
	}
}
