package providerid

import (
	"fmt"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	if got, want := Format("small-x7k2p"), "docker://small-x7k2p"; got != want {
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
		{name: "machine name", id: "docker://small-x7k2p", want: "small-x7k2p"},
		{name: "prefixed", id: "docker://ci_run7.small-x7k2p", want: "ci_run7.small-x7k2p"},
		{name: "upper case", id: "docker://Node1", want: "Node1"},
		{name: "max length", id: "docker://" + strings.Repeat("a", MaxNameLen), want: strings.Repeat("a", MaxNameLen)},
		{name: "empty", id: "", wantErr: "not a docker providerID"},
		{name: "other scheme", id: "kwok://node-1", wantErr: "not a docker providerID"},
		{name: "upper-case scheme", id: "DOCKER://node-1", wantErr: "not a docker providerID"},
		{name: "no name", id: "docker://", wantErr: "container name is empty"},
		{name: "one character", id: "docker://a", wantErr: "not a Docker container name"},
		{name: "leading slash", id: "docker:///node-1", wantErr: "not a Docker container name"},
		{name: "leading dash", id: "docker://-node", wantErr: "not a Docker container name"},
		{name: "path", id: "docker://a/b", wantErr: "not a Docker container name"},
		{name: "space", id: "docker://node 1", wantErr: "not a Docker container name"},
		{name: "too long", id: "docker://" + strings.Repeat("a", MaxNameLen+1), wantErr: "at most 253"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %q, %v; want an error containing %q", tc.id, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tc.id, got, err, tc.want)
			}
			if back := Format(got); back != tc.id {
				t.Fatalf("Format(Parse(%q)) = %q", tc.id, back)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"docker://ab", "docker://a.b-c_d", "docker://", "docker://a", "kwok://ab", "", "docker:///ab"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, err := Parse(id)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
				t.Fatalf("Parse(%q) error %q does not quote the id", id, err)
			}
			return
		}
		if Valid(name) != nil {
			t.Fatalf("Parse(%q) = %q, which Valid refuses", id, name)
		}
		if got := Format(name); got != id {
			t.Fatalf("Format(Parse(%q)) = %q", id, got)
		}
	})
}
