package providerid

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	if got, want := Format(Ref{"my-proj", "europe-west4-a", "gpu-a-x1y2"}), "gce://my-proj/europe-west4-a/gpu-a-x1y2"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		id      string
		want    Ref
		wantErr string // substring; "" means no error
	}{
		{name: "simple", id: "gce://p/us-central1-a/n-1", want: Ref{"p", "us-central1-a", "n-1"}},
		{name: "domain-scoped project", id: "gce://example.com:p/europe-west1-b/n", want: Ref{"example.com:p", "europe-west1-b", "n"}},
		{name: "empty", id: "", wantErr: "not a gce providerID"},
		{name: "other scheme", id: "hcloud://1", wantErr: "not a gce providerID"},
		{name: "upper-case scheme", id: "GCE://p/z/n", wantErr: "not a gce providerID"},
		{name: "two parts", id: "gce://p/n", wantErr: "2 part(s)"},
		{name: "four parts", id: "gce://p/z/n/x", wantErr: "4 part(s)"},
		{name: "empty project", id: "gce:///z/n", wantErr: "project is empty"},
		{name: "empty zone", id: "gce://p//n", wantErr: "zone is empty"},
		{name: "empty name", id: "gce://p/z/", wantErr: "instance name is empty"},
		{name: "space", id: "gce://p/z/a b", wantErr: "white space"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %+v, %v; want error containing %q", tc.id, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.id, err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("Parse(%q) (-want +got):\n%s", tc.id, d)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"gce://p/z/n", "gce://p/z", "gce:///z/n", "gce://p/z/n/", "hcloud://1", "", "gce://a:b/c/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		r, err := Parse(id)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
				t.Fatalf("Parse(%q) error %q does not quote the id", id, err)
			}
			return
		}
		if r.Project == "" || r.Zone == "" || r.Name == "" {
			t.Fatalf("Parse(%q) = %+v with an empty part", id, r)
		}
		if got := Format(r); got != id {
			t.Fatalf("Format(Parse(%q)) = %q", id, got)
		}
	})
}
