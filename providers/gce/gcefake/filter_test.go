package gcefake

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want filter
		bad  bool
	}{
		{in: "", want: nil},
		{in: `labels.prebake-dev_cluster = "demo"`, want: filter{{"labels.prebake-dev_cluster", "=", "demo"}}},
		{in: `(labels.a = "x") AND (labels.b != y) labels.c:*`, want: filter{{"labels.a", "=", "x"}, {"labels.b", "!=", "y"}, {"labels.c", ":", "*"}}},
		{in: `name = "n1" status=RUNNING`, want: filter{{"name", "=", "n1"}, {"status", "=", "RUNNING"}}},
		{in: `labels.a = "x" OR labels.b = "y"`, bad: true},
		{in: `labels.a > "x"`, bad: true},
		{in: `(labels.a = "x"`, bad: true},
		{in: `labels.a = "x`, bad: true},
		{in: `cpus = 4`, bad: true},
		{in: `labels.a =`, bad: true},
	}
	for _, tc := range tests {
		got, err := parseFilter(tc.in)
		if tc.bad {
			if err == nil || err.status != 400 {
				t.Errorf("parseFilter(%q) = %v, %v; want a 400", tc.in, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseFilter(%q): %v", tc.in, err)
			continue
		}
		if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(cond{})); d != "" {
			t.Errorf("parseFilter(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

// FuzzParseFilter: the parser never panics, refuses with a 400, and what
// it accepts reads the same once written back in canonical form.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{`labels.a = "x"`, `(labels.a = "x") AND (name != y)`, `labels.c:*`, `((`, `"`, `!`, `a = = b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := parseFilter(s)
		if err != nil {
			if err.status != 400 {
				t.Fatalf("parseFilter(%q) error status %d", s, err.status)
			}
			return
		}
		var parts []string
		for _, c := range fl {
			parts = append(parts, "("+c.field+" "+c.op+" \""+c.value+"\")")
		}
		canon := strings.Join(parts, " AND ")
		again, err := parseFilter(canon)
		if err != nil {
			t.Fatalf("parseFilter(%q) accepted, its canonical form %q refused: %v", s, canon, err)
		}
		if d := cmp.Diff(fl, again, cmp.AllowUnexported(cond{})); d != "" {
			t.Fatalf("parseFilter(%q) and its canonical form %q differ (-first +again):\n%s", s, canon, d)
		}
	})
}
