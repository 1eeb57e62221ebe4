package providerid

import (
	"fmt"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	if got, want := Format(42), "hcloud://42"; got != want {
		t.Errorf("Format(42) = %q, want %q", got, want)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		id      string
		want    int64
		wantErr string // substring; "" means no error
	}{
		{name: "simple", id: "hcloud://42", want: 42},
		{name: "large", id: "hcloud://9223372036854775807", want: 9223372036854775807},
		{name: "empty", id: "", wantErr: "not an hcloud providerID"},
		{name: "other scheme", id: "kwok://node-1", wantErr: "not an hcloud providerID"},
		{name: "upper-case scheme", id: "HCLOUD://1", wantErr: "not an hcloud providerID"},
		{name: "empty id", id: "hcloud://", wantErr: "positive number"},
		{name: "zero", id: "hcloud://0", wantErr: "positive number"},
		{name: "leading zero", id: "hcloud://042", wantErr: "positive number"},
		{name: "negative", id: "hcloud://-1", wantErr: "positive number"},
		{name: "plus", id: "hcloud://+1", wantErr: "positive number"},
		{name: "name", id: "hcloud://node-1", wantErr: "positive number"},
		{name: "trailing text", id: "hcloud://12a", wantErr: "not a 64-bit decimal number"},
		{name: "overflow", id: "hcloud://9223372036854775808", wantErr: "not a 64-bit decimal number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %d, %v; want error containing %q", tc.id, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %d, %v; want %d", tc.id, got, err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"hcloud://1", "hcloud://042", "hcloud://", "hcloud://-1", "kwok://a", "", "hcloud://99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		n, err := Parse(id)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
				t.Fatalf("Parse(%q) error %q does not quote the id", id, err)
			}
			return
		}
		if n <= 0 {
			t.Fatalf("Parse(%q) = %d, want > 0", id, n)
		}
		if got := Format(n); got != id {
			t.Fatalf("Format(Parse(%q)) = %q", id, got)
		}
	})
}
