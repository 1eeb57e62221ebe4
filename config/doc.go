// Package config reads the versioned YAML config of `prebake serve`
// (apiVersion prebake.dev/v1alpha1, kind ProviderConfig); docs/configuration.md
// is its reference.
//
// Load and Parse decode strictly (an unknown field is an error), apply the
// defaults and Validate, so a *Config they return is complete and valid and
// the rest of prebake need not check it again. The helpers Taints,
// MachineTypeList and Reserved map it onto the providers value types.
//
// Invariants:
//   - Every error names the source, the line and the field, and says what to
//     do: `kwok.yaml:14: node group "gpu-a": maxSize 3 < minSize 5; ...`.
//     Validate reports all problems at once (errors.Join), not the first.
//   - A field left out gets its default. A field that is written, even as 0
//     or "", is validated as written; that is how `simulatedBoot.prebaked: 0s`
//     and `retries: 0` stay expressible.
//   - Secrets never live in the config: a SecretRef names a file or an
//     environment variable, and no error carries a secret's value.
//   - A *Config is not changed after Load or Parse returns it, and may be
//     read from many goroutines.
//   - Besides reading the config file, the only I/O is the check that a
//     userDataFile exists, and SecretRef.Resolve.
package config
