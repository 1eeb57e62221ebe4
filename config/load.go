package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the config file at path, then decodes, defaults and validates
// it like Parse. A relative userDataFile or imageCatalog.file is taken
// relative to the config file's directory and rewritten so that it opens from the working
// directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := decode(data, path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if f := c.ImageCatalog.File; f != "" && !filepath.IsAbs(f) {
		c.ImageCatalog.File = filepath.Join(dir, f)
	}
	for i := range c.NodeGroups {
		if f := c.NodeGroups[i].UserDataFile; f != "" && !filepath.IsAbs(f) {
			c.NodeGroups[i].UserDataFile = filepath.Join(dir, f)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse decodes data strictly, applies the defaults and validates the
// result. source names the config in errors, such as "config.yaml" or
// "configmap kube-system/prebake"; paths in it are not resolved.
func Parse(data []byte, source string) (*Config, error) {
	c, err := decode(data, source)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// maxValues bounds the values the schema walk visits, so aliases can't make
// a small file expand into a huge one.
const maxValues = 100_000

// decode is Parse without Validate: it reads exactly one document, checks
// apiVersion and kind, checks every field's name and type against Config
// (collecting all such errors, each with its line), decodes strictly and
// applies the defaults.
func decode(data []byte, source string) (*Config, error) {
	if source == "" {
		source = "config"
	}
	root, err := readDocument(data, source)
	if err != nil {
		return nil, err
	}
	header, wrongVersion := checkHeader(root, source)
	if wrongVersion {
		// Another version's fields would only add noise.
		return nil, errors.Join(header...)
	}
	s := &schema{
		source: source,
		lines:  map[string]int{"": root.Line},
		set:    map[string]bool{},
		ids:    map[int]string{},
		seen:   map[string]bool{},
		active: map[*yaml.Node]bool{},
		budget: maxValues,
	}
	s.walk(root, reflect.TypeFor[Config](), "")
	if errs := append(header, s.errs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	// The walk above explains errors better; the strict decoder is the
	// authority on what is decoded.
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, yamlError(source, err)
	}
	c.source, c.lines = source, s.lines
	c.applyDefaults(s.set)
	return &c, nil
}

// readDocument parses data and returns the root mapping of its only
// document. Empty documents after the first (a trailing "---") are allowed.
func readDocument(data []byte, source string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) || err == nil && isEmptyDocument(&doc) {
		return nil, &fieldError{source: source, msg: fmt.Sprintf(
			"the config is empty; start it with \"apiVersion: %s\" and \"kind: %s\" (see examples/kwok.yaml)", APIVersion, Kind)}
	}
	if err != nil {
		return nil, yamlError(source, err)
	}
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, yamlError(source, err)
		}
		if !isEmptyDocument(&next) {
			return nil, &fieldError{source: source, line: next.Line, msg: "a second YAML document starts here; " +
				"the config must be a single document: remove the \"---\" and what follows, or move it to its own file"}
		}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &fieldError{source: source, line: root.Line, msg: fmt.Sprintf(
			"the config must be a mapping of fields (apiVersion: ..., kind: ..., ...), got %s", describeNode(root))}
	}
	return root, nil
}

func isEmptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// checkHeader checks apiVersion and kind. wrongVersion is true when one is
// set to something else, as opposed to missing.
func checkHeader(root *yaml.Node, source string) (errs []error, wrongVersion bool) {
	for _, h := range []struct{ key, want string }{{"apiVersion", APIVersion}, {"kind", Kind}} {
		var key, value *yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k := root.Content[i]; k.Kind == yaml.ScalarNode && k.Value == h.key {
				key, value = k, root.Content[i+1]
			}
		}
		if value != nil && value.Kind == yaml.AliasNode && value.Alias != nil {
			value = value.Alias
		}
		switch {
		case key == nil:
			errs = append(errs, &fieldError{source: source, line: root.Line,
				msg: fmt.Sprintf("%s is missing; add \"%s: %s\"", h.key, h.key, h.want)})
		case value.Kind != yaml.ScalarNode || value.Value != h.want:
			wrongVersion = true
			errs = append(errs, &fieldError{source: source, line: key.Line,
				msg: fmt.Sprintf("%s %s is not supported by this build; set \"%s: %s\"", h.key, describeNode(value), h.key, h.want)})
		}
	}
	return errs, wrongVersion
}

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlError turns an error of the yaml package into fieldErrors:
// "yaml: line 3: did not find expected key" becomes
// "config.yaml:3: invalid YAML: did not find expected key".
func yamlError(source string, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	errs := make([]error, 0, len(msgs))
	for _, m := range msgs {
		fe := &fieldError{source: source, msg: "invalid YAML: " + m}
		if sub := yamlLine.FindStringSubmatch(m); sub != nil {
			fe.line, _ = strconv.Atoi(sub[1])
			fe.msg = "invalid YAML: " + sub[2]
		}
		errs = append(errs, fe)
	}
	return errors.Join(errs...)
}

// schema walks the YAML tree alongside the Config type. It records the line
// of every field path and which paths hold a value (for the defaults), and
// reports unknown fields, duplicate keys and wrong types with their field
// path and line, all of them rather than the first.
type schema struct {
	source string
	lines  map[string]int  // field path -> line of its key
	set    map[string]bool // field paths written with a non-null value
	ids    map[int]string  // node group ids by index, for messages
	errs   []error
	seen   map[string]bool     // error messages already reported (a merged anchor repeats them)
	active map[*yaml.Node]bool // alias targets being expanded: an alias inside its own anchor is a cycle
	budget int                 // values left to visit
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (s *schema) errorf(line int, format string, args ...any) {
	e := &fieldError{source: s.source, line: line, msg: fmt.Sprintf(format, args...)}
	if !s.seen[e.Error()] {
		s.seen[e.Error()] = true
		s.errs = append(s.errs, e)
	}
}

func (s *schema) id(i int) string { return s.ids[i] }

// spend takes one value from the budget, reporting once when it runs out.
func (s *schema) spend(line int) bool {
	s.budget--
	if s.budget == -1 {
		s.errorf(line, "the config is too large, or its aliases expand to more than %d values", maxValues)
	}
	return s.budget >= 0
}

// deref follows an alias. ok is false for a cycle, which it reports.
func (s *schema) deref(n *yaml.Node, path string) (target *yaml.Node, release func(), ok bool) {
	if n.Kind != yaml.AliasNode {
		return n, func() {}, true
	}
	t := n.Alias
	if t == nil || s.active[t] {
		s.errorf(n.Line, "%s: alias *%s is used inside its own anchor; YAML can't expand that", s.subjectOrTop(path), short(n.Value))
		return nil, nil, false
	}
	s.active[t] = true
	return t, func() { delete(s.active, t) }, true
}

func (s *schema) subjectOrTop(path string) string {
	if path == "" {
		return "the config"
	}
	return subject(path, s.id)
}

func (s *schema) walk(n *yaml.Node, t reflect.Type, path string) {
	if !s.spend(n.Line) {
		return
	}
	n, release, ok := s.deref(n, path)
	if !ok {
		return
	}
	defer release()
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // like the decoder: null leaves the zero value, and the default applies
	}
	s.set[path] = true
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			s.errorf(n.Line, "%s: %v", s.subjectOrTop(path), err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			s.wrongType(n, path, "a mapping (key: value)", "")
			return
		}
		s.walkStruct(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			s.wrongType(n, path, "a mapping (key: value)", "")
			return
		}
		for _, e := range s.entries(n, path) {
			child := joinKey(path, e.key.Value)
			s.lines[child] = e.key.Line
			s.walk(e.value, t.Elem(), child)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			s.wrongType(n, path, "a list", "")
			return
		}
		for i, item := range n.Content {
			child := joinIndex(path, i)
			s.lines[child] = item.Line
			s.walk(item, t.Elem(), child)
		}
	default:
		want := scalarWant(t)
		if n.Kind != yaml.ScalarNode {
			s.wrongType(n, path, want, "")
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			hint := ""
			if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
				hint = "; remove the quotes"
			}
			s.wrongType(n, path, want, hint)
		}
	}
}

func (s *schema) wrongType(n *yaml.Node, path, want, hint string) {
	s.errorf(n.Line, "%s: want %s, got %s%s", s.subjectOrTop(path), want, describeNode(n), hint)
}

func scalarWant(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

func (s *schema) walkStruct(n *yaml.Node, t reflect.Type, path string) {
	names, types := structFields(t)
	if i, rest, ok := splitGroup(path); ok && rest == "" {
		// Name the group by its id in the messages about it.
		for j := 0; j+1 < len(n.Content); j += 2 {
			if k, v := n.Content[j], n.Content[j+1]; k.Value == "id" && v.Kind == yaml.ScalarNode {
				s.ids[i] = v.Value
			}
		}
	}
	for _, e := range s.entries(n, path) {
		name := e.key.Value
		ft, ok := types[name]
		if !ok {
			s.unknownField(e.key, path, name, names)
			continue
		}
		child := joinField(path, name)
		s.lines[child] = e.key.Line
		s.walk(e.value, ft, child)
	}
}

func (s *schema) unknownField(key *yaml.Node, path, name string, known []string) {
	var hint string
	if path == "providers" {
		switch {
		case suggest(name, known) != "":
			hint = fmt.Sprintf(" (did you mean %q?)", suggest(name, known))
		default:
			hint = fmt.Sprintf(" (available providers: %s)", strings.Join(known, ", "))
		}
	} else if sug := suggest(name, known); sug != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", sug)
	} else {
		hint = fmt.Sprintf(" (known fields: %s)", strings.Join(known, ", "))
	}
	s.errorf(key.Line, "unknown field %q %s%s", short(name), within(path, s.id), hint)
}

// entry is one key and value of a mapping, merges resolved.
type entry struct{ key, value *yaml.Node }

// entries returns the effective keys of mapping n in order: its own keys
// first, then those it merges in with "<<" that it doesn't set itself
// (earlier merge sources win), as the decoder resolves them. Non-string
// keys and duplicate keys are reported.
func (s *schema) entries(n *yaml.Node, path string) []entry {
	var out []entry
	s.collect(n, path, map[string]bool{}, &out)
	return out
}

func (s *schema) collect(n *yaml.Node, path string, have map[string]bool, out *[]entry) {
	own := map[string]int{} // key -> line, for duplicates within n
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			s.errorf(k.Line, "%s: keys must be plain strings, got %s", s.subjectOrTop(path), describeNode(k))
			continue
		}
		if line, dup := own[k.Value]; dup {
			s.errorf(k.Line, "%q is set twice %s (first on line %d); keep one", short(k.Value), within(path, s.id), line)
			continue
		}
		own[k.Value] = k.Line
		if !have[k.Value] {
			have[k.Value] = true
			*out = append(*out, entry{k, v})
		}
	}
	for _, m := range merges {
		s.merge(m, path, have, out)
	}
}

func (s *schema) merge(m *yaml.Node, path string, have map[string]bool, out *[]entry) {
	if !s.spend(m.Line) {
		return
	}
	m, release, ok := s.deref(m, path)
	if !ok {
		return
	}
	defer release()
	switch m.Kind {
	case yaml.MappingNode:
		s.collect(m, path, have, out)
	case yaml.SequenceNode:
		for _, item := range m.Content {
			if item.Kind == yaml.SequenceNode {
				s.errorf(item.Line, "%s: a \"<<\" merge takes a mapping or a list of mappings, got a list in the list", s.subjectOrTop(path))
				continue
			}
			s.merge(item, path, have, out)
		}
	default:
		s.errorf(m.Line, "%s: a \"<<\" merge takes a mapping or a list of mappings, got %s", s.subjectOrTop(path), describeNode(m))
	}
}

// structFields returns the YAML names of t's fields in order, and their
// types by name.
func structFields(t reflect.Type) ([]string, map[string]reflect.Type) {
	names := make([]string, 0, t.NumField())
	types := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name := yamlName(f)
		if name == "-" {
			continue
		}
		names = append(names, name)
		types[name] = f.Type
	}
	return names, types
}

// yamlName is the key the yaml package uses for a struct field.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}
