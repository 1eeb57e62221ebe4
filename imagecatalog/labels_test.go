package imagecatalog

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hetznerValue and gceValue are the providers' label value rules.
var (
	hetznerValue = regexp.MustCompile(`^(([a-z0-9A-Z][-a-z0-9_.A-Z]*)?[a-z0-9A-Z])?$`)
	gceValue     = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
)

func TestLabelValueCodec(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"1.34.2-1.1":                         "1_d34_d2-1_d1",
		"1:1.4.8-1ubuntu1":                   "1_c1_d4_d8-1ubuntu1",
		"2.1.5+ds1-1~bpo12":                  "2_d1_d5_pds1-1_tbpo12",
		"br_netfilter":                       "br__netfilter",
		"net.bridge.bridge-nf-call-iptables": "net_dbridge_dbridge-nf-call-iptables",
		"1.7.24-0ubuntu1~24.04.2":            "1_d7_d24-0ubuntu1_t24_d04_d2",
		"1V2":                                "1_uv2",
	}
	for in, want := range tests {
		got, err := EncodeLabelValue(in)
		if err != nil || got != want {
			t.Errorf("EncodeLabelValue(%q) = %q, %v; want %q", in, got, err, want)
			continue
		}
		back, err := DecodeLabelValue(got)
		if err != nil || back != in {
			t.Errorf("DecodeLabelValue(%q) = %q, %v; want %q", got, back, err, in)
		}
	}
	for _, bad := range []string{"1.0-", strings.Repeat("1.", 40), "a b", "x/y"} {
		if v, err := EncodeLabelValue(bad); err == nil {
			t.Errorf("EncodeLabelValue(%q) = %q, want an error", bad, v)
		}
	}
	for _, bad := range []string{"1_", "1_q", "_u", "_u1"} {
		if v, err := DecodeLabelValue(bad); err == nil {
			t.Errorf("DecodeLabelValue(%q) = %q, want an error", bad, v)
		}
	}
}

// FuzzLabelValue: whatever encodes is a valid Hetzner and GCE value and
// decodes back to the input.
func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"1.34.2-1.1", "1:2.3~rc1+b2", "A_b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := EncodeLabelValue(s)
		if err != nil {
			return
		}
		if !hetznerValue.MatchString(v) || !gceValue.MatchString(v) {
			t.Fatalf("EncodeLabelValue(%q) = %q, not a label value", s, v)
		}
		back, err := DecodeLabelValue(v)
		if err != nil || back != s {
			t.Fatalf("round trip %q -> %q -> %q, %v", s, v, back, err)
		}
	})
}

func TestManifestLabelsRoundTrip(t *testing.T) {
	t.Parallel()
	vs := map[string]string{}
	for _, c := range DefaultComponents {
		vs[c] = "1:1.0.0-1ubuntu1~24.04"
	}
	m := DefaultManifest(vs)
	l, err := ManifestLabels(m)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range l {
		name := strings.TrimPrefix(k, "prebake.dev/")
		if len(name) > 63 || !hetznerValue.MatchString(name) || !hetznerValue.MatchString(v) {
			t.Errorf("label %s=%s is not a valid Hetzner label", k, v)
		}
	}
	back, ok, err := ManifestFromLabels(l)
	if err != nil || !ok {
		t.Fatalf("ManifestFromLabels: ok %v, %v", ok, err)
	}
	if d := cmp.Diff(m, back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

func TestChannelLabelsAndReport(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	l, err := DesiredLabels(c, "A")
	if err != nil {
		t.Fatal(err)
	}
	if l["prebake.dev/channel-stable"] != "history-1" {
		t.Errorf("A's stable label = %q, want history-1 after the rollback (labels %v)", l["prebake.dev/channel-stable"], l)
	}
	r := Report{Status: "done", Observed: c.Images[0].Manifest, Hygiene: map[string]bool{"ssh-host-keys": true, "machine-id": false}}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeReport(data)
	if err != nil {
		t.Fatalf("DecodeReport(%s): %v", data, err)
	}
	if d := cmp.Diff(r, back); d != "" {
		t.Errorf("report round trip (-want +got):\n%s", d)
	}
	for _, bad := range []string{
		`{"status":"maybe","observed":{},"hygiene":{}}`,
		`{"status":"done","observed":{},"hygiene":{},"extra":1}`,
		`{"status":"done"} {"status":"done"}`,
		``,
	} {
		if _, err := DecodeReport([]byte(bad)); err == nil {
			t.Errorf("DecodeReport(%q) accepted it", bad)
		}
	}
}
