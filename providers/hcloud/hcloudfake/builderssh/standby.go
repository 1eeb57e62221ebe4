package builderssh

import (
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// The commands prebake runs on a warm-pool standby (bootstrap.StandbyStatusCommand and
// bootstrap.StandbyJoinCommand; a test in providers/hcloud keeps them equal, as this package
// does not import bootstrap).
const (
	StatusCommand = "cat /var/lib/prebake/bootstrap-status.json 2>/dev/null || true"
	JoinCommand   = "umask 077 && cat >/var/lib/prebake/bootstrap.sh.new && mv -f /var/lib/prebake/bootstrap.sh.new /var/lib/prebake/bootstrap.sh" +
		" && systemd-run --unit=prebake-join --collect --quiet /bin/sh /var/lib/prebake/bootstrap.sh"
)

// Standby plays the shell of warm-pool standbys, by server id: StatusCommand prints the status
// file SetStatus wrote (nothing before), JoinCommand keeps the node script it reads on stdin
// and starts it, after which the status says running, as the script's first write would. A
// join while one runs fails as systemd-run does when the unit exists. Any other command is
// not found. Its methods are safe for concurrent use.
type Standby struct {
	// mu guards status, scripts and joining.
	mu      sync.Mutex
	status  map[int64]string
	scripts map[int64][]string
	joining map[int64]bool // its prebake-join unit runs
}

// NewStandby returns a Standby whose servers have written no status yet.
func NewStandby() *Standby {
	return &Standby{status: map[int64]string{}, scripts: map[int64][]string{}, joining: map[int64]bool{}}
}

// SetStatus makes server id's status file a version-1 status with this result (prepared,
// failed, ok, running); errMsg is its error. A result other than running ends a join that
// runs.
func (b *Standby) SetStatus(id int64, result, errMsg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.joining[id] = b.joining[id] && result == "running"
	b.status[id] = fmt.Sprintf(`{"version":1,"provider":"hcloud","node":"n%d","result":%q,"error":%q,"phases":[]}`+"\n", id, result, errMsg)
}

// Scripts are the node scripts server id was given to run, in order.
func (b *Standby) Scripts(id int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.scripts[id])
}

// Shell is the Shell of the standbys, for NewShell.
func (b *Standby) Shell(s hcloudfake.Server, command string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch command {
	case StatusCommand:
		b.mu.Lock()
		st := b.status[s.ID]
		b.mu.Unlock()
		_, _ = io.WriteString(stdout, st)
		return 0
	case JoinCommand:
		script, err := io.ReadAll(stdin)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.joining[s.ID] {
			fmt.Fprintln(stderr, "Failed to start transient service unit: Unit prebake-join.service was already loaded or has a fragment file.")
			return 1
		}
		b.scripts[s.ID] = append(b.scripts[s.ID], string(script))
		b.joining[s.ID] = true
		b.status[s.ID] = fmt.Sprintf(`{"version":1,"provider":"hcloud","node":"n%d","result":"running","error":"","phases":[]}`+"\n", s.ID)
		return 0
	}
	fmt.Fprintf(stderr, "sh: %s: not found\n", command)
	return 127
}
