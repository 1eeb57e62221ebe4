package gcefake

import (
	"strings"
)

// fields are what a filter can test on a resource.
type fields struct {
	name, status, family, zone string
	labels                     map[string]string
}

func (fs fields) get(path string) (string, bool) {
	if k, ok := strings.CutPrefix(path, "labels."); ok {
		v, has := fs.labels[k]
		return v, has
	}
	switch path {
	case "name":
		return fs.name, true
	case "status":
		return fs.status, true
	case "family":
		return fs.family, true
	case "zone":
		return fs.zone, true
	}
	return "", false
}

// cond is one comparison: field op value.
type cond struct {
	field, op, value string
}

// filter is a conjunction of comparisons: the subset of the list filter
// syntax prebake uses, such as
//
//	labels.prebake-dev_cluster = "demo"
//	(labels.a = "x") AND (labels.b != "y") labels.c:*
//
// Anything else (OR, regular expressions, ordering operators) is refused
// with a 400, so a client relying on more than the fake knows finds out.
type filter []cond

func (fl filter) matches(fs fields) bool {
	for _, c := range fl {
		v, has := fs.get(c.field)
		switch c.op {
		case "=":
			if !has || v != c.value {
				return false
			}
		case "!=":
			if has && v == c.value {
				return false
			}
		case ":":
			if !has || (c.value != "*" && v != c.value) {
				return false
			}
		}
	}
	return true
}

func parseFilter(s string) (filter, *apiError) {
	toks, err := tokens(s)
	if err != nil {
		return nil, err
	}
	var out filter
	depth := 0
	for i := 0; i < len(toks); {
		switch t := toks[i]; {
		case t == "(":
			depth++
			i++
		case t == ")":
			depth--
			if depth < 0 {
				return nil, invalidFilter(s, "unbalanced )")
			}
			i++
		case t == "AND":
			i++
		case t == "OR" || t == "NOT":
			return nil, invalidFilter(s, t+" is not supported by gcefake")
		default:
			if i+2 >= len(toks) {
				return nil, invalidFilter(s, "want <field> <op> <value>")
			}
			field, op, val := t, toks[i+1], toks[i+2]
			if op != "=" && op != "!=" && op != ":" {
				return nil, invalidFilter(s, "operator "+op+" is not supported by gcefake")
			}
			if _, known := (fields{}).get(field); !known && !strings.HasPrefix(field, "labels.") {
				return nil, invalidFilter(s, "unknown field "+field)
			}
			out = append(out, cond{field: field, op: op, value: strings.Trim(val, `"`)})
			i += 3
		}
	}
	if depth != 0 {
		return nil, invalidFilter(s, "unbalanced (")
	}
	return out, nil
}

func invalidFilter(s, why string) *apiError {
	return badRequest("Invalid value for field 'filter': '%s'. Invalid list filter expression: %s.", s, why)
}

// tokens splits a filter into parentheses, operators, quoted strings and
// bare words.
func tokens(s string) ([]string, *apiError) {
	var out []string
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '(' || c == ')':
			out = append(out, string(c))
			i++
		case c == '=' || c == ':':
			out = append(out, string(c))
			i++
		case c == '!' && i+1 < len(s) && s[i+1] == '=':
			out = append(out, "!=")
			i += 2
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, invalidFilter(s, "unterminated string")
			}
			out = append(out, s[i:i+j+2])
			i += j + 2
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n()=:!\"", rune(s[j])) {
				j++
			}
			if j == i {
				return nil, invalidFilter(s, "unexpected "+string(c))
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out, nil
}
