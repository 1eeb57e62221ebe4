package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/client"

	"github.com/prebake-dev/prebake/bootstrap"
)

// What a node says about its own boot, read out of its container: every figure here is the
// node's own clock (the container shares the host's) or its bootstrap status report.

// Status reads the node's bootstrap status file; ok is false while there is none.
func Status(ctx context.Context, c *client.Client, id string) (bootstrap.Status, bool, error) {
	out, code, err := Exec(ctx, c, id, "cat", bootstrap.DefaultStatusPath)
	if err != nil {
		return bootstrap.Status{}, false, err
	}
	if code != 0 {
		return bootstrap.Status{}, false, nil
	}
	st, err := bootstrap.ParseStatus([]byte(out))
	return st, err == nil, err
}

// CloudInitLog is where cloud-init puts the output of the node script (and kubeadm's).
const CloudInitLog = "/var/log/cloud-init-output.log"

// NodeError is the node's own account of a failed boot: its status file's error and the
// lines of cloud-init's output log that say error, fatal or prebake-bootstrap, with the
// log's last lines.
func NodeError(ctx context.Context, c *client.Client, id, name string, st bootstrap.Status) error {
	errs, _, err := Exec(ctx, c, id, "sh", "-c", "grep -iE 'error|fatal|prebake-bootstrap' "+CloudInitLog+" | tail -n 20")
	if err != nil {
		errs = fmt.Sprintf("(cannot read %s: %v)", CloudInitLog, err)
	}
	tail, _, _ := Exec(ctx, c, id, "tail", "-n", "15", CloudInitLog)
	return fmt.Errorf("node %s failed to boot: %s\n----- error lines of the node's %s -----\n%s----- its last 15 lines -----\n%s",
		name, st.Error, CloudInitLog, errs, tail)
}

// Boot is what a node's own clocks say about its boot (zero where it has not got there).
type Boot struct {
	ContainerStarted time.Time // the engine's State.StartedAt
	SystemdStarted   time.Time // systemd's UserspaceTimestampMonotonic on the node's uptime
	CloudInit        map[string][2]time.Time
	ScriptStarted    time.Time // the status file's mtime less its totalMs
	Status           bootstrap.Status
}

// ReadBoot reads what the node says about its boot.
func ReadBoot(ctx context.Context, c *client.Client, id string) (Boot, error) {
	var b Boot
	ins, err := c.ContainerInspect(ctx, id)
	if err != nil {
		return b, err
	}
	b.ContainerStarted = startedAt(ins)
	out, _, err := Exec(ctx, c, id, "sh", "-c",
		"echo $(systemctl show -p UserspaceTimestampMonotonic --value) $(cut -d' ' -f1 /proc/uptime) $(date +%s.%N)")
	var mono, up, now float64
	if _, serr := fmt.Sscan(out, &mono, &up, &now); err == nil && serr == nil {
		b.SystemdStarted = unixFloat(now - up + mono/1e6)
	}
	if st, err := cloudInitStages(ctx, c, id); err == nil {
		b.CloudInit = st
	}
	st, ok, err := Status(ctx, c, id)
	if err == nil && ok {
		b.Status = st
		if end, err := unixExec(ctx, c, id, "stat", "-c", "%.9Y", bootstrap.DefaultStatusPath); err == nil {
			b.ScriptStarted = end.Add(-time.Duration(st.TotalMs) * time.Millisecond)
		}
	}
	return b, nil
}

// cloudInitStages are cloud-init's own start and end times (/run/cloud-init/status.json).
func cloudInitStages(ctx context.Context, c *client.Client, id string) (map[string][2]time.Time, error) {
	out, code, err := Exec(ctx, c, id, "cat", "/run/cloud-init/status.json")
	if err != nil || code != 0 {
		return nil, fmt.Errorf("read cloud-init status: exit %d, %v", code, err)
	}
	var st struct {
		V1 map[string]json.RawMessage `json:"v1"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, err
	}
	stages := map[string][2]time.Time{}
	for name, raw := range st.V1 {
		var s struct {
			Start, Finished *float64
		}
		if json.Unmarshal(raw, &s) == nil && s.Start != nil && s.Finished != nil {
			stages[name] = [2]time.Time{unixFloat(*s.Start), unixFloat(*s.Finished)}
		}
	}
	return stages, nil
}

// unixExec runs a command whose output is a unix time in seconds (with a fraction).
func unixExec(ctx context.Context, c *client.Client, id string, argv ...string) (time.Time, error) {
	out, code, err := Exec(ctx, c, id, argv...)
	if err != nil || code != 0 {
		return time.Time{}, fmt.Errorf("%s: exit %d, %v: %s", strings.Join(argv, " "), code, err, out)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(strings.Fields(out + " 0")[0]), 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q: %w", strings.Join(argv, " "), out, err)
	}
	return unixFloat(f), nil
}

func unixFloat(f float64) time.Time { return time.Unix(0, int64(f*1e9)) }
