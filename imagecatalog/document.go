package imagecatalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// The catalog document's type. It is YAML a person reviews in git (or keeps
// in a ConfigMap): images and channels in a stable order, one field a line.
const (
	APIVersion = "prebake.dev/v1alpha1"
	Kind       = "ImageCatalog"
)

// Document is the catalog as stored. Generation counts the saves; it is for
// people reading diffs. Compare-and-swap uses the content hash (Revision),
// which also catches hand edits.
type Document struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Generation int64  `yaml:"generation"`
	Catalog    `yaml:",inline"`
}

// Marshal writes the document for c at the generation.
func Marshal(c Catalog, generation int64) ([]byte, error) {
	c = c.Clone()
	c.sort()
	if c.Images == nil {
		c.Images = []Image{}
	}
	if c.Channels == nil {
		c.Channels = []Channel{}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(Document{APIVersion: APIVersion, Kind: Kind, Generation: generation, Catalog: c}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Unmarshal strictly reads a document: an unknown field, a wrong apiVersion or
// kind, a second document or an inconsistent catalog is an error naming
// source (a file name, for messages).
func Unmarshal(source string, data []byte) (Catalog, int64, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var d Document
	if err := dec.Decode(&d); err != nil {
		if errors.Is(err, io.EOF) {
			return Catalog{}, 0, fmt.Errorf("%s: empty document; want apiVersion %s, kind %s", source, APIVersion, Kind)
		}
		return Catalog{}, 0, fmt.Errorf("%s: %w", source, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Catalog{}, 0, fmt.Errorf("%s: more than one YAML document; want exactly one %s", source, Kind)
	}
	switch {
	case d.APIVersion != APIVersion:
		return Catalog{}, 0, fmt.Errorf("%s: apiVersion %q, want %q", source, d.APIVersion, APIVersion)
	case d.Kind != Kind:
		return Catalog{}, 0, fmt.Errorf("%s: kind %q, want %q", source, d.Kind, Kind)
	case d.Generation < 0:
		return Catalog{}, 0, fmt.Errorf("%s: generation %d is negative", source, d.Generation)
	}
	if err := d.Catalog.Validate(); err != nil {
		return Catalog{}, 0, fmt.Errorf("%s: %w", source, err)
	}
	return d.Catalog, d.Generation, nil
}
