package imagecatalog

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNameFormatParse(t *testing.T) {
	t.Parallel()
	built := time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC)
	tests := []struct {
		name Name
		want string
	}{
		{Name{"ubuntu", "2404", Version{1, 34, 2}, "amd64", built}, "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504"},
		{Name{"debian", "12", Version{1, 33, 10}, "arm64", built}, "prebake-debian-12-k8s-1-33-10-arm64-20261130t1504"},
		{Name{"rocky9", "9x", Version{2, 0, 0}, "amd64", built}, "prebake-rocky9-9x-k8s-2-0-0-amd64-20261130t1504"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			got, err := tt.name.Format()
			if err != nil || got != tt.want {
				t.Fatalf("Format = %q, %v; want %q", got, err, tt.want)
			}
			back, err := ParseName(got)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.name, back); diff != "" {
				t.Errorf("ParseName(Format(n)) differs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNameFormatRejects(t *testing.T) {
	t.Parallel()
	built := time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC)
	tests := map[string]Name{
		"dotted os version": {"ubuntu", "24.04", Version{1, 34, 2}, "amd64", built},
		"upper-case os":     {"Ubuntu", "2404", Version{1, 34, 2}, "amd64", built},
		"dash in os":        {"red-hat", "9", Version{1, 34, 2}, "amd64", built},
		"unknown arch":      {"ubuntu", "2404", Version{1, 34, 2}, "x86_64", built},
		"no build time":     {"ubuntu", "2404", Version{1, 34, 2}, "amd64", time.Time{}},
		"too long":          {"ubuntuwithaverylongflavourname", "2404lts", Version{1, 34, 2}, "amd64", built},
		"negative version":  {"ubuntu", "2404", Version{1, -1, 2}, "amd64", built},
		"five-digit year":   {"ubuntu", "2404", Version{1, 34, 2}, "amd64", time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"year 0":            {"ubuntu", "2404", Version{1, 34, 2}, "amd64", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for what, n := range tests {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			if s, err := n.Format(); err == nil {
				t.Errorf("Format(%+v) = %q, want an error", n, s)
			}
		})
	}
}

func TestParseNameRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",
		"prebake-ubuntu-2404-k8s-1-34-2-amd64", // no build time
		"prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504-x",                   // extra field
		"other-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504",                       // prefix
		"prebake-ubuntu-2404-k8s-01-34-2-amd64-20261130t1504",                    // leading zero
		"prebake-ubuntu-2404-k8s-1-34-2-amd64-20261131t1504",                     // no Nov 31
		"prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t2504",                     // hour 25
		"prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130T1504",                     // upper case
		"prebake-ubuntu-2404-k8s-1-34-2-s390x-20261130t1504",                     // arch
		"prebake-ubuntu-2404-kube-1-34-2-amd64-20261130t1504",                    // k8s marker
		"prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504-",                    // trailing dash
		"prebake-ubuntuuuuuuuuuuuuuuuuuuuuu-2404-k8s-1-34-2-amd64-20261130t1504", // > 63
	} {
		if n, err := ParseName(s); err == nil {
			t.Errorf("ParseName(%q) = %+v, want an error", s, n)
		}
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Version{"1.34.2": {1, 34, 2}, "v1.30.0": {1, 30, 0}} {
		if got, err := ParseVersion(in); err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1.34", "1.34.x", "1.34.2-rc.1", "01.34.2", ""} {
		if _, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q): want an error", in)
		}
	}
}

// FuzzParseName: whatever ParseName accepts is a valid GCE name that Format
// reproduces exactly, and whose parsed form survives another round.
func FuzzParseName(f *testing.F) {
	f.Add("prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504")
	f.Add("prebake-debian-12-k8s-1-33-10-arm64-20260101t0000")
	f.Add("prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t15040")
	f.Add("prebake--2404-k8s-1-34-2-amd64-20261130t1504")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		if err != nil {
			return
		}
		if len(s) > MaxNameLen || !gceName.MatchString(s) || !strings.HasPrefix(s, NamePrefix+"-") {
			t.Fatalf("ParseName accepted %q, which is not a valid GCE name", s)
		}
		got, err := n.Format()
		if err != nil {
			t.Fatalf("Format(ParseName(%q)): %v", s, err)
		}
		if got != s {
			t.Fatalf("Format(ParseName(%q)) = %q", s, got)
		}
		again, err := ParseName(got)
		if err != nil || !cmp.Equal(again, n) {
			t.Fatalf("second round of %q: %+v, %v", s, again, err)
		}
	})
}

// FuzzNameRoundTrip: every name Format accepts parses back to itself.
func FuzzNameRoundTrip(f *testing.F) {
	f.Add("ubuntu", "2404", 1, 34, 2, true, int64(1796051040))
	f.Add("debian", "12", 1, 0, 0, false, int64(0))
	f.Add("ubuntu", "2404", 1, 34, 2, true, int64(316502000000)) // year 12000: once formatted, never parsed
	f.Fuzz(func(t *testing.T, os, osVersion string, major, minor, patch int, amd bool, unix int64) {
		arch := map[bool]string{true: "amd64", false: "arm64"}[amd]
		n := Name{os, osVersion, Version{major, minor, patch}, arch, time.Unix(unix, 0).UTC().Truncate(time.Minute)}
		s, err := n.Format()
		if err != nil {
			return
		}
		back, err := ParseName(s)
		if err != nil {
			t.Fatalf("ParseName(Format(%+v) = %q): %v", n, s, err)
		}
		if !cmp.Equal(back, n) {
			t.Fatalf("round trip of %q: got %+v, want %+v", s, back, n)
		}
	})
}
