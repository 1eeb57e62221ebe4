package hcloudfake

import (
	"fmt"
	"slices"
	"strings"
)

// selector is a parsed Hetzner label selector (https://docs.hetzner.cloud/,
// "Label Selector"): requirements joined by ",", each "k=v", "k==v",
// "k!=v", "k" (present), "!k" (absent), "k in (v1,v2)" or
// "k notin (v1,v2)".
type selector []requirement

type requirement struct {
	key    string
	op     string   // "=", "!=", "exists", "!exists", "in", "notin"
	values []string // one for "=" and "!="
}

func parseSelector(s string) (selector, error) {
	var sel selector
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts, err := splitRequirements(s)
	if err != nil {
		return nil, err
	}
	for _, part := range parts {
		part = strings.TrimSpace(part)
		var r requirement
		switch {
		case part == "":
			return nil, fmt.Errorf("label_selector %q has an empty requirement", s)
		case strings.HasSuffix(part, ")"):
			open := strings.IndexByte(part, '(')
			head := strings.Fields(part[:open])
			if len(head) != 2 || (head[1] != "in" && head[1] != "notin") {
				return nil, fmt.Errorf("label_selector %q: requirement %q is not \"k in (…)\" or \"k notin (…)\"", s, part)
			}
			r = requirement{key: head[0], op: head[1]}
			for v := range strings.SplitSeq(part[open+1:len(part)-1], ",") {
				r.values = append(r.values, strings.TrimSpace(v))
			}
		case strings.Contains(part, "!="):
			k, v, _ := strings.Cut(part, "!=")
			r = requirement{key: strings.TrimSpace(k), values: []string{strings.TrimSpace(v)}, op: "!="}
		case strings.Contains(part, "=="):
			k, v, _ := strings.Cut(part, "==")
			r = requirement{key: strings.TrimSpace(k), values: []string{strings.TrimSpace(v)}, op: "="}
		case strings.Contains(part, "="):
			k, v, _ := strings.Cut(part, "=")
			r = requirement{key: strings.TrimSpace(k), values: []string{strings.TrimSpace(v)}, op: "="}
		case strings.HasPrefix(part, "!"):
			r = requirement{key: strings.TrimSpace(part[1:]), op: "!exists"}
		case strings.ContainsAny(part, " ()"):
			return nil, fmt.Errorf("label_selector %q: requirement %q is not understood", s, part)
		default:
			r = requirement{key: part, op: "exists"}
		}
		if r.key == "" {
			return nil, fmt.Errorf("label_selector %q has a requirement without a key", s)
		}
		sel = append(sel, r)
	}
	return sel, nil
}

// splitRequirements splits s at the commas outside parentheses.
func splitRequirements(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
		if depth < 0 || depth > 1 {
			return nil, fmt.Errorf("label_selector %q has unbalanced parentheses", s)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("label_selector %q has unbalanced parentheses", s)
	}
	return append(out, s[start:]), nil
}

func (s selector) matches(labels map[string]string) bool {
	for _, r := range s {
		v, ok := labels[r.key]
		switch r.op {
		case "=":
			if !ok || v != r.values[0] {
				return false
			}
		case "!=":
			if ok && v == r.values[0] {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		case "in":
			if !ok || !slices.Contains(r.values, v) {
				return false
			}
		case "notin":
			if ok && slices.Contains(r.values, v) {
				return false
			}
		}
	}
	return true
}
