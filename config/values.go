package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Duration is a time.Duration written the Go way: "20s", "1m30s", "500ms".
type Duration struct {
	time.Duration
}

// UnmarshalYAML reads a duration string. A bare number is refused: its unit
// would be a guess.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration such as \"20s\" or \"1m30s\", got %s", describeNode(n))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		if _, numErr := strconv.ParseFloat(n.Value, 64); numErr == nil {
			return fmt.Errorf("duration %q has no unit; write it with one, such as \"%ss\"", short(n.Value), short(n.Value))
		}
		return fmt.Errorf("invalid duration %q; write a number with a unit (ms, s, m, h), such as \"20s\" or \"1m30s\"", short(n.Value))
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the duration as UnmarshalYAML reads it.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}

// Quantity is a Kubernetes resource quantity: "100m", "2", "256Mi", "4Gi".
type Quantity struct {
	resource.Quantity
}

// UnmarshalYAML reads a quantity with resource.ParseQuantity.
func (q *Quantity) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a quantity such as \"500m\", \"2\", \"256Mi\" or \"4Gi\", got %s", describeNode(n))
	}
	v, err := resource.ParseQuantity(n.Value)
	if err != nil {
		hint := ""
		if strings.HasSuffix(n.Value, "B") || strings.HasSuffix(n.Value, "b") {
			hint = " (Kubernetes quantities have no B: 4Gi, not 4GB)"
		}
		return fmt.Errorf("invalid quantity %q%s; write it like \"500m\", \"2\", \"256Mi\" or \"4Gi\"", short(n.Value), hint)
	}
	*q = newQuantity(v)
	return nil
}

// newQuantity wraps v with its String cached: resource.Quantity.String
// fills that cache on first use, a write that would race when goroutines
// share a Config.
func newQuantity(v resource.Quantity) Quantity {
	_ = v.String()
	return Quantity{v}
}

// MarshalYAML writes the quantity in its canonical form.
func (q Quantity) MarshalYAML() (any, error) {
	return q.String(), nil
}

// Equal reports whether two quantities are the same amount, so "1" equals
// "1000m". go-cmp uses it.
func (q Quantity) Equal(o Quantity) bool {
	return q.Cmp(o.Quantity) == 0
}

// SecretRef points at a secret: a file, or an environment variable. Exactly
// one of the two is set. The config never holds a secret itself.
type SecretRef struct {
	// File is a path whose contents are the secret.
	File string `yaml:"file"`
	// Env is the name of an environment variable holding the secret.
	Env string `yaml:"env"`
}

// Resolve reads the secret. Surrounding whitespace (a file's trailing
// newline) is trimmed, and an empty secret is an error. Errors name the
// file or the variable, never the value.
func (s SecretRef) Resolve() (string, error) {
	var v string
	switch {
	case s.File != "" && s.Env != "":
		return "", errors.New("secret: set either file or env, not both")
	case s.File != "":
		b, err := os.ReadFile(s.File)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err // os.PathError repeats the path
			}
			return "", fmt.Errorf("secret file %q: %w", s.File, err)
		}
		v = strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("secret file %q is empty; write the secret into it", s.File)
		}
	case s.Env != "":
		raw, ok := os.LookupEnv(s.Env)
		if !ok {
			return "", fmt.Errorf("secret env %q: the environment variable is not set", s.Env)
		}
		v = strings.TrimSpace(raw)
		if v == "" {
			return "", fmt.Errorf("secret env %q: the environment variable is empty", s.Env)
		}
	default:
		return "", errors.New("secret: set file (a path) or env (a variable name)")
	}
	return v, nil
}
