package providerid

import (
	"fmt"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	if got, want := Format("node-1"), "kwok://node-1"; got != want {
		t.Errorf("Format(%q) = %q, want %q", "node-1", got, want)
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
		{name: "simple", id: "kwok://node-1", want: "node-1"},
		{name: "dotted", id: "kwok://pool-a.zone-1.example", want: "pool-a.zone-1.example"},
		{name: "single char", id: "kwok://a", want: "a"},
		{name: "max length", id: "kwok://" + strings.Repeat("a", 253), want: strings.Repeat("a", 253)},
		{name: "empty", id: "", wantErr: "not a kwok providerID"},
		{name: "other scheme", id: "hcloud://123", wantErr: "not a kwok providerID"},
		{name: "upper-case scheme", id: "KWOK://node-1", wantErr: "not a kwok providerID"},
		{name: "missing slashes", id: "kwok:node-1", wantErr: "not a kwok providerID"},
		{name: "empty name", id: "kwok://", wantErr: "empty node name"},
		{name: "extra slash", id: "kwok:///node-1", wantErr: "not a valid DNS-1123 subdomain"},
		{name: "upper-case name", id: "kwok://Node-1", wantErr: "not a valid DNS-1123 subdomain"},
		{name: "path", id: "kwok://a/b", wantErr: "not a valid DNS-1123 subdomain"},
		{name: "trailing dash", id: "kwok://node-", wantErr: "not a valid DNS-1123 subdomain"},
		{name: "too long", id: "kwok://" + strings.Repeat("a", 254), wantErr: "not a valid DNS-1123 subdomain"},
		{name: "space", id: "kwok://node 1", wantErr: "not a valid DNS-1123 subdomain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.id)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %q, nil; want error containing %q", tc.id, got, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) error = %q, want it to contain %q", tc.id, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.id, err)
			}
			if got != tc.want {
				t.Errorf("Parse(%q) = %q, want %q", tc.id, got, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"kwok://node-1", "kwok://a.b", "kwok://", "kwok:///x", "hcloud://1", "", "node-1", "kwok://Node"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, err := Parse(id)
		if err != nil {
			// A rejection must name the id it rejected, so the log line
			// that carries it is enough to find the culprit.
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
				t.Fatalf("Parse(%q) error %q does not quote the id", id, err)
			}
			return
		}
		if got := Format(name); got != id {
			t.Fatalf("Format(Parse(%q)) = %q", id, got)
		}
		again, err := Parse(Format(name))
		if err != nil || again != name {
			t.Fatalf("Parse(Format(%q)) = %q, %v; want %q, nil", name, again, err, name)
		}
	})
}
