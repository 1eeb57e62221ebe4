package imagecatalog

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// NamePrefix starts every image name, so our images are told apart from
// anyone else's in a shared project.
const NamePrefix = "prebake"

// MaxNameLen is the GCE limit on resource names.
const MaxNameLen = 63

// stampLayout is the build time in a name: UTC, to the minute, lower case so
// the name stays a valid GCE name.
const stampLayout = "20060102t1504"

// Archs are the architectures a name may carry (Kubernetes' names for them).
var Archs = []string{"amd64", "arm64"}

var (
	gceName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	// A name's os and os version are single segments, so Parse needs no
	// guessing about where one field ends.
	osPart        = regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	osVersionPart = regexp.MustCompile(`^[a-z0-9]+$`)
	numberPart    = regexp.MustCompile(`^(0|[1-9][0-9]{0,3})$`)
)

// Name is what an image's name says about it. Its string form, from Format, is
// for example prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504.
type Name struct {
	OS        string    // ubuntu, debian: lower-case letters and digits
	OSVersion string    // 2404, 12: lower-case letters and digits, no dots
	K8s       Version   // exact Kubernetes version, 1.34.2
	Arch      string    // amd64 or arm64
	Built     time.Time // build time; the name keeps it in UTC, to the minute
}

// Version is an exact Kubernetes major.minor.patch version.
type Version struct{ Major, Minor, Patch int }

// ParseVersion reads 1.34.2 or v1.34.2.
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("kubernetes version %q: want an exact major.minor.patch such as 1.34.2", s)
	}
	var n [3]int
	for i, p := range parts {
		if !numberPart.MatchString(p) {
			return Version{}, fmt.Errorf("kubernetes version %q: %q is not a number without leading zeros", s, p)
		}
		n[i], _ = strconv.Atoi(p)
	}
	return Version{n[0], n[1], n[2]}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// MinorString is the channel key's k8s minor, 1.34.
func (v Version) MinorString() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// OSRelease is the os and its version as channel keys and labels carry
// them: ubuntu-2404.
func (n Name) OSRelease() string { return n.OS + "-" + n.OSVersion }

// Validate says what is wrong with n, if anything, including a formatted
// name that would be too long.
func (n Name) Validate() error {
	switch {
	case !osPart.MatchString(n.OS):
		return fmt.Errorf("image name: os %q must be lower-case letters and digits, starting with a letter", n.OS)
	case !osVersionPart.MatchString(n.OSVersion):
		return fmt.Errorf("image name: os version %q must be lower-case letters and digits (2404, not 24.04)", n.OSVersion)
	case !validArch(n.Arch):
		return fmt.Errorf("image name: arch %q must be one of %s", n.Arch, strings.Join(Archs, ", "))
	case n.Built.IsZero():
		return fmt.Errorf("image name: build time is not set")
	case n.Built.UTC().Year() < 2000 || n.Built.UTC().Year() > 9999:
		return fmt.Errorf("image name: build time %s is not between the years 2000 and 9999", n.Built.UTC().Format(time.RFC3339))
	}
	for _, p := range []int{n.K8s.Major, n.K8s.Minor, n.K8s.Patch} {
		if p < 0 || p > 9999 {
			return fmt.Errorf("image name: kubernetes version %s out of range", n.K8s)
		}
	}
	if s := n.format(); len(s) > MaxNameLen {
		return fmt.Errorf("image name %q is %d characters, more than GCE's %d: shorten the os or os version", s, len(s), MaxNameLen)
	}
	return nil
}

// Format returns the image name, or an error when n is not valid.
func (n Name) Format() (string, error) {
	if err := n.Validate(); err != nil {
		return "", err
	}
	return n.format(), nil
}

// String is Format without the check, for messages.
func (n Name) String() string { return n.format() }

func (n Name) format() string {
	return fmt.Sprintf("%s-%s-%s-k8s-%d-%d-%d-%s-%s", NamePrefix, n.OS, n.OSVersion,
		n.K8s.Major, n.K8s.Minor, n.K8s.Patch, n.Arch, n.Built.UTC().Format(stampLayout))
}

// ParseName reads a name made by Format. It accepts exactly the strings Format
// produces, so Format(ParseName(s)) == s.
func ParseName(s string) (Name, error) {
	if len(s) > MaxNameLen || !gceName.MatchString(s) {
		return Name{}, fmt.Errorf("image name %q: not a valid GCE name ([a-z]([-a-z0-9]*[a-z0-9])?, at most %d characters)", s, MaxNameLen)
	}
	f := strings.Split(s, "-")
	if len(f) != 9 || f[0] != NamePrefix || f[3] != "k8s" {
		return Name{}, fmt.Errorf("image name %q: want %s-<os>-<osversion>-k8s-<major>-<minor>-<patch>-<arch>-<yyyymmdd>t<hhmm>", s, NamePrefix)
	}
	k8s, err := ParseVersion(f[4] + "." + f[5] + "." + f[6])
	if err != nil {
		return Name{}, fmt.Errorf("image name %q: %w", s, err)
	}
	built, err := time.Parse(stampLayout, f[8])
	if err != nil || built.Format(stampLayout) != f[8] {
		return Name{}, fmt.Errorf("image name %q: build time %q is not yyyymmddthhmm", s, f[8])
	}
	n := Name{OS: f[1], OSVersion: f[2], K8s: k8s, Arch: f[7], Built: built}
	if err := n.Validate(); err != nil {
		return Name{}, fmt.Errorf("image name %q: %w", s, err)
	}
	return n, nil
}

func validArch(a string) bool {
	for _, x := range Archs {
		if a == x {
			return true
		}
	}
	return false
}
