package config

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fieldError is one problem in a config: "<source>:<line>: <msg>". The
// message names the field and says what to do.
type fieldError struct {
	source string
	line   int // 0 when unknown (a Config built in code)
	msg    string
}

func (e *fieldError) Error() string {
	switch {
	case e.source != "" && e.line > 0:
		return fmt.Sprintf("%s:%d: %s", e.source, e.line, e.msg)
	case e.source != "":
		return e.source + ": " + e.msg
	}
	return e.msg
}

// Field paths name a value in the config the way a reader would:
// "workers.qps", "nodeGroups[1].taints[0].effect",
// `nodeGroups[0].labels["example.com/team"]`. They key the path→line map.

func joinField(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// joinKey appends a map key: dotted when it is a plain word, else quoted.
func joinKey(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return joinField(path, key)
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// parentPath drops the last element of a path; "" has no parent.
func parentPath(p string) string {
	var i int
	switch {
	case strings.HasSuffix(p, `"]`):
		// strconv.Quote escapes every quote, so `["` only opens a key.
		i = strings.LastIndex(p, `["`)
	case strings.HasSuffix(p, "]"):
		i = strings.LastIndex(p, "[")
	default:
		i = strings.LastIndex(p, ".")
	}
	if i < 0 {
		return ""
	}
	return p[:i]
}

// lineOf returns the line of path, or of its nearest ancestor that was
// written (a missing field is reported where its parent is), or 0.
func lineOf(lines map[string]int, path string) int {
	for p := path; ; p = parentPath(p) {
		if l, ok := lines[p]; ok {
			return l
		}
		if p == "" {
			return 0
		}
	}
}

// splitGroup splits "nodeGroups[3].taints[0]" into 3 and "taints[0]".
// ok is false for paths outside nodeGroups[i].
func splitGroup(path string) (index int, rest string, ok bool) {
	const prefix = "nodeGroups["
	if !strings.HasPrefix(path, prefix) {
		return 0, "", false
	}
	end := strings.IndexByte(path, ']')
	if end < 0 {
		return 0, "", false
	}
	i, err := strconv.Atoi(path[len(prefix):end])
	if err != nil {
		return 0, "", false
	}
	return i, strings.TrimPrefix(path[end+1:], "."), true
}

// groupName is how messages name a node group: by id once it has one.
func groupName(index int, id string) string {
	if id == "" {
		return joinIndex("nodeGroups", index)
	}
	return fmt.Sprintf("node group %q", short(id))
}

// subject names the field at path for a message: `node group "small":
// maxSize` or `workers.qps`. id returns a group's id by index.
func subject(path string, id func(int) string) string {
	i, rest, ok := splitGroup(path)
	if !ok {
		return path
	}
	if rest == "" {
		return groupName(i, id(i))
	}
	return groupName(i, id(i)) + ": " + rest
}

// within names the mapping at path for "unknown field ... <within>".
func within(path string, id func(int) string) string {
	if path == "" {
		return "at the top level"
	}
	i, rest, ok := splitGroup(path)
	if !ok {
		return "in " + path
	}
	if rest == "" {
		return "in " + groupName(i, id(i))
	}
	return "in " + groupName(i, id(i)) + " at " + rest
}

// describeNode says what a YAML value is, for "want X, got Y".
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return strconv.Quote(short(n.Value))
	}
	return "an empty document"
}

// short truncates s for a message; input can be anything.
func short(s string) string {
	const limit = 40
	if len(s) <= limit {
		return s
	}
	r := []rune(s)
	if len(r) <= limit {
		return s
	}
	return string(r[:limit-3]) + "..."
}

// suggest returns the candidate that name most likely misspells, or "".
// Case is ignored; beyond that, up to a third of the candidate's letters
// (at least one) may differ.
func suggest(name string, candidates []string) string {
	if len(name) > 64 {
		return ""
	}
	lower := strings.ToLower(name)
	best, bestDist := "", 0
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if lc == lower {
			return c
		}
		d := editDistance(lower, lc)
		if d <= max(1, len(c)/3) && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance counts the insertions, deletions, substitutions and swaps of
// adjacent bytes that turn a into b (optimal string alignment distance), so
// "kowk" is one edit from "kwok".
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1) // row i-2
	prev := make([]int, len(b)+1)  // row i-1
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
