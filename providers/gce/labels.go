package gce

import "strings"

// GCE label keys may hold only [a-z0-9_-] and start with a letter, so the
// project's "prebake.dev/<name>" keys can't be used as they are. They are
// written as "prebake-dev_<name>": "." becomes "-" and "/" becomes "_",
// which keeps them readable in the console and in filters
// (labels.prebake-dev_cluster = "demo"). No prebake.dev key holds "_", so
// the mapping is reversible.
const (
	projectPrefix = "prebake.dev/"
	gcePrefix     = "prebake-dev_"
)

// LabelKey maps a project label key to its GCE form. Keys outside
// prebake.dev/ are returned unchanged.
func LabelKey(k string) string {
	if rest, ok := strings.CutPrefix(k, projectPrefix); ok {
		return gcePrefix + rest
	}
	return k
}

// ProjectLabelKey is the inverse of LabelKey.
func ProjectLabelKey(k string) string {
	if rest, ok := strings.CutPrefix(k, gcePrefix); ok {
		return projectPrefix + rest
	}
	return k
}

// ToGCE returns labels with their keys in GCE form.
func ToGCE(labels map[string]string) map[string]string {
	if labels == nil {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[LabelKey(k)] = v
	}
	return out
}

// FromGCE returns labels with their keys in project form.
func FromGCE(labels map[string]string) map[string]string {
	if labels == nil {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[ProjectLabelKey(k)] = v
	}
	return out
}
