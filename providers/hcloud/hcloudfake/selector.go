package hcloudfake

import (
	"fmt"
	"strings"
)

// selector is a parsed Hetzner label selector: requirements joined by ",",
// each "k=v", "k==v", "k!=v", "k" (exists) or "!k" (absent).
type selector []requirement

type requirement struct {
	key, value string
	op         string // "=", "!=", "exists", "!exists"
}

func parseSelector(s string) (selector, error) {
	var sel selector
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		var r requirement
		switch {
		case part == "":
			return nil, fmt.Errorf("label_selector %q has an empty requirement", s)
		case strings.Contains(part, "!="):
			k, v, _ := strings.Cut(part, "!=")
			r = requirement{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "!="}
		case strings.Contains(part, "=="):
			k, v, _ := strings.Cut(part, "==")
			r = requirement{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "="}
		case strings.Contains(part, "="):
			k, v, _ := strings.Cut(part, "=")
			r = requirement{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "="}
		case strings.HasPrefix(part, "!"):
			r = requirement{key: strings.TrimSpace(part[1:]), op: "!exists"}
		case strings.ContainsAny(part, " ()"):
			return nil, fmt.Errorf("label_selector %q: set-based requirement %q is not supported by the fake", s, part)
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

func (s selector) matches(labels map[string]string) bool {
	for _, r := range s {
		v, ok := labels[r.key]
		switch r.op {
		case "=":
			if !ok || v != r.value {
				return false
			}
		case "!=":
			if ok && v == r.value {
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
		}
	}
	return true
}
