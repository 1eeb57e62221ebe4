package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Journal records the joins of a declarative apply, one line per event, appended as it
// happens, so that an apply that was killed resumes without redoing the joins it
// finished. A line is
//
//	<RFC 3339 time> <event> <cluster> <peers key> [detail]
//
// with event "write" (a join began by writing the cluster), "wait" (a join began with the
// cluster already written: only its status is awaited), "done" (the cluster reported
// every peer ready), "unverified" (the write succeeded and no status was read, e.g.
// --no-wait: a later run that waits treats the cluster as written, not done) or "failed"
// (detail says why). The peers key is a hash of the peer list the join was for: a join
// done for other peers does not count.
type Journal struct {
	path string
	now  func() time.Time

	mu   sync.Mutex        // guards f and done
	f    *os.File          // nil until the first event
	done map[string]string // cluster → peers key of its last finished join
}

// Journal events.
const (
	JournalWrite  = "write"
	JournalWait   = "wait"
	JournalDone   = "done"
	JournalFailed = "failed"
	// JournalUnverified ends a join that was written and not awaited.
	JournalUnverified = "unverified"
)

// JournalEntry is one line of a journal.
type JournalEntry struct {
	Time    time.Time
	Event   string
	Cluster string
	Key     string
	Detail  string
}

// PeersKey identifies a peer list (order does not matter).
func PeersKey(peers []string) string {
	s := slices.Clone(peers)
	slices.SortFunc(s, Compare)
	sum := sha256.Sum256([]byte(strings.Join(s, ",")))
	return hex.EncodeToString(sum[:8])
}

// ReadJournal returns the entries of the journal at path; a missing file has none. A last
// line without its newline (cut short by a kill) is ignored.
func ReadJournal(path string) ([]JournalEntry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if i := strings.LastIndexByte(string(data), '\n'); i < len(data)-1 {
		data = data[:i+1]
	}
	var out []JournalEntry
	for n, text := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		line := n + 1
		if strings.TrimSpace(text) == "" {
			continue
		}
		fields := strings.SplitN(text, " ", 5)
		if len(fields) < 4 {
			return nil, fmt.Errorf("%s:%d: want \"<time> <event> <cluster> <peers key> [detail]\", got %q", path, line, text)
		}
		t, err := time.Parse(time.RFC3339Nano, fields[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		e := JournalEntry{Time: t, Event: fields[1], Cluster: fields[2], Key: fields[3]}
		if len(fields) == 5 {
			e.Detail = fields[4]
		}
		switch e.Event {
		case JournalWrite, JournalWait, JournalDone, JournalFailed, JournalUnverified:
		default:
			return nil, fmt.Errorf("%s:%d: unknown event %q", path, line, e.Event)
		}
		out = append(out, e)
	}
	return out, nil
}

// OpenJournal reads the journal at path (to resume) and appends to it from then on. A last
// line cut short by a kill is cut off the file, so the next line starts on its own.
func OpenJournal(path string) (*Journal, error) {
	entries, err := ReadJournal(path)
	if err != nil {
		return nil, err
	}
	if data, err := os.ReadFile(path); err == nil && len(data) > 0 && data[len(data)-1] != '\n' {
		if err := os.Truncate(path, int64(strings.LastIndexByte(string(data), '\n')+1)); err != nil {
			return nil, fmt.Errorf("journal %s: cut its last, partial line: %w", path, err)
		}
	}
	j := &Journal{path: path, now: time.Now, done: map[string]string{}}
	for _, e := range entries {
		switch e.Event {
		case JournalDone:
			j.done[e.Cluster] = e.Key
		case JournalWrite:
			// A new write undoes an earlier join of the cluster until it is done again.
			delete(j.done, e.Cluster)
		}
	}
	return j, nil
}

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Finished reports whether the journal holds a finished join of cluster for peers.
func (j *Journal) Finished(cluster string, peers []string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done[cluster] == PeersKey(peers)
}

func (j *Journal) record(event, cluster string, peers []string, detail string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		f, err := os.OpenFile(j.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("journal %s: %w", j.path, err)
		}
		j.f = f
	}
	key := PeersKey(peers)
	line := fmt.Sprintf("%s %s %s %s", j.now().UTC().Format(time.RFC3339Nano), event, cluster, key)
	if detail != "" {
		line += " " + strings.Join(strings.Fields(detail), " ")
	}
	// One write per line, O_APPEND: a kill leaves whole lines (and at most a cut last one).
	if _, err := j.f.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	switch event {
	case JournalDone:
		j.done[cluster] = key
	case JournalWrite:
		delete(j.done, cluster)
	}
	return nil
}

// Close closes the journal's file.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// MaxInFlight replays entries and returns the most joins that were in flight at once
// (begun with "write" or "wait", not yet "done", "unverified" or "failed").
func MaxInFlight(entries []JournalEntry) int {
	in := map[string]bool{}
	most := 0
	for _, e := range entries {
		switch e.Event {
		case JournalWrite, JournalWait:
			in[e.Cluster] = true
		case JournalDone, JournalFailed, JournalUnverified:
			delete(in, e.Cluster)
		}
		most = max(most, len(in))
	}
	return most
}
