package providerid

import (
	"fmt"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	if got, want := Format("rack1-node07"), "static://rack1-node07"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		id      string
		want    string
		wantErr string // substring; "" means no error
	}{
		{name: "name", id: "static://node-1", want: "node-1"},
		{name: "dotted", id: "static://node-1.rack2.example.com", want: "node-1.rack2.example.com"},
		{name: "ipv4 literal", id: "static://10.0.0.7", want: "10.0.0.7"},
		{name: "empty", id: "", wantErr: "not a static providerID"},
		{name: "other scheme", id: "kwok://node-1", wantErr: "not a static providerID"},
		{name: "upper-case scheme", id: "STATIC://node-1", wantErr: "not a static providerID"},
		{name: "no host", id: "static://", wantErr: "host is empty"},
		{name: "upper-case host", id: "static://Node-1", wantErr: "DNS-1123"},
		{name: "underscore", id: "static://node_1", wantErr: "DNS-1123"},
		{name: "ipv6", id: "static://fd00::1", wantErr: "DNS-1123"},
		{name: "port", id: "static://node-1:22", wantErr: "DNS-1123"},
		{name: "path", id: "static://node-1/x", wantErr: "DNS-1123"},
		{name: "too long", id: "static://" + strings.Repeat("a", 254), wantErr: "DNS-1123"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %q, %v; want error containing %q", tc.id, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tc.id, got, err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"static://a", "static://node-1.example", "static://", "static://A", "kwok://a", "", "static://10.0.0.1", "static://a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		host, err := Parse(id)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
				t.Fatalf("Parse(%q) error %q does not quote the id", id, err)
			}
			return
		}
		if Valid(host) != nil {
			t.Fatalf("Parse(%q) = %q, which Valid refuses", id, host)
		}
		if got := Format(host); got != id {
			t.Fatalf("Format(Parse(%q)) = %q", id, got)
		}
	})
}
