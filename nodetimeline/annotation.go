package nodetimeline

import (
	"fmt"
	"strings"
	"time"
)

// Annotation is the Node annotation where `prebake serve` keeps the moments it observed of
// the machine behind the Node, so that they outlive the process:
//
//	prebake.dev/timeline: requested=2026-12-02T10:00:00.000Z accepted=2026-12-02T10:00:00.041Z running=... registered=... ready=... podRunning=...
//
// Each word is KEY=TIME, TIME in RFC 3339 with milliseconds in UTC, on the clock of the host
// prebake runs on. A key that is absent was not observed (yet). The keys, in this order:
//
//   - requested: IncreaseSize recorded the instance (for a warm-pool standby: took it);
//   - accepted: the provider's create call returned (the cloud has the machine), or for a
//     warm-pool standby its resume call;
//   - running: a List first said the machine runs, or its Node registered, whichever came first;
//   - registered: prebake's Node watch first saw the Node;
//   - ready: the watch first saw it Ready;
//   - podRunning: the first pod on it (not a DaemonSet's or a static pod) was seen Running.
//
// One word is no time: from=warm-pool, last, on the Node of a machine that was a warm-pool
// standby IncreaseSize took and resumed rather than created. Without it the machine was
// created. A reader ignores a from value it does not know.
//
// The format is stable: readers ignore keys they do not know, and a key once written keeps
// its value.
const Annotation = "prebake.dev/timeline"

// fromKey and fromWarmPool are the Annotation's word for a resumed warm-pool standby.
const (
	fromKey      = "from"
	fromWarmPool = "warm-pool"
)

// Moments are the times of the Annotation; a zero time was not observed.
type Moments struct {
	Requested, Accepted, Running, Registered, Ready, PodRunning time.Time
	// FromWarmPool: the machine was a warm-pool standby, resumed rather than created
	// (the word from=warm-pool).
	FromWarmPool bool
}

// momentKeys are the Annotation's keys in order, with the field each one holds.
var momentKeys = []struct {
	key string
	at  func(*Moments) *time.Time
}{
	{"requested", func(m *Moments) *time.Time { return &m.Requested }},
	{"accepted", func(m *Moments) *time.Time { return &m.Accepted }},
	{"running", func(m *Moments) *time.Time { return &m.Running }},
	{"registered", func(m *Moments) *time.Time { return &m.Registered }},
	{"ready", func(m *Moments) *time.Time { return &m.Ready }},
	{"podRunning", func(m *Moments) *time.Time { return &m.PodRunning }},
}

const annotationTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Format renders m as the Annotation's value ("" when no time is set).
func (m Moments) Format() string {
	var words []string
	for _, k := range momentKeys {
		if t := *k.at(&m); !t.IsZero() {
			words = append(words, k.key+"="+t.UTC().Truncate(time.Millisecond).Format(annotationTimeLayout))
		}
	}
	if m.FromWarmPool {
		words = append(words, fromKey+"="+fromWarmPool)
	}
	return strings.Join(words, " ")
}

// IsZero reports whether no moment is set.
func (m Moments) IsZero() bool { return m == Moments{} }

// Merge returns m with the moments it lacks taken from o: a moment once written keeps its
// value.
func (m Moments) Merge(o Moments) Moments {
	for _, k := range momentKeys {
		if at := k.at(&m); at.IsZero() {
			*at = *k.at(&o)
		}
	}
	m.FromWarmPool = m.FromWarmPool || o.FromWarmPool
	return m
}

// ParseMoments reads the Annotation's value. Unknown keys are skipped; a malformed word is
// an error that names it.
func ParseMoments(value string) (Moments, error) {
	var m Moments
	for _, w := range strings.Fields(value) {
		key, v, ok := strings.Cut(w, "=")
		if !ok {
			return Moments{}, fmt.Errorf("annotation %s=%q: word %q: want KEY=TIME", Annotation, value, w)
		}
		if key == fromKey {
			m.FromWarmPool = m.FromWarmPool || v == fromWarmPool
			continue
		}
		for _, k := range momentKeys {
			if k.key != key {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return Moments{}, fmt.Errorf("annotation %s=%q: %s: want an RFC 3339 time such as 2026-12-02T10:00:00.041Z: %v", Annotation, value, key, err)
			}
			*k.at(&m) = t.UTC()
		}
	}
	return m, nil
}
