package mesh

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recorder is a script that logs "start a b" and "end a b", holds a lock directory per
// cluster while it runs (mkdir is atomic, so a cluster in two commands at once logs
// "conflict"), and fails the first call of $FAIL_PAIR.
const recorder = `#!/bin/sh
d="$REC_DIR"
echo "start $1 $2" >> "$d/calls"
mkdir "$d/lock.$1" 2>/dev/null || { echo "conflict $1" >> "$d/calls"; exit 3; }
mkdir "$d/lock.$2" 2>/dev/null || { rmdir "$d/lock.$1"; echo "conflict $2" >> "$d/calls"; exit 3; }
if [ "$1 $2" = "$FAIL_PAIR" ] && mkdir "$d/failed" 2>/dev/null; then
	rmdir "$d/lock.$1" "$d/lock.$2"
	echo "boom for $1 $2"
	exit 1
fi
echo "end $1 $2" >> "$d/calls"
rmdir "$d/lock.$1" "$d/lock.$2"
`

func writeRecorder(t *testing.T) (script, dir string) {
	t.Helper()
	dir = t.TempDir()
	script = filepath.Join(dir, "record.sh")
	if err := os.WriteFile(script, []byte(recorder), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, dir
}

func TestCommandBackendRounds(t *testing.T) {
	// Not parallel: it sets environment variables for the script.
	script, dir := writeRecorder(t)
	t.Setenv("REC_DIR", dir)
	t.Setenv("FAIL_PAIR", "c2 c5")
	ctx := context.Background()

	names := GeneratedNames(7)
	wanted := FullMesh(names...)
	c := &Command{Connect: script + " {a} {b}", Journal: filepath.Join(dir, "journal"), LogDir: filepath.Join(dir, "logs")}
	e := &Executor{Attempts: 3, Backoff: func(int) time.Duration { return 0 }}
	res, err := e.Run(ctx, c, wanted)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds != 7 || res.Succeeded != 21 || res.Retries != 1 {
		t.Errorf("run: %d rounds, %d succeeded, %d retries; want 7, 21, 1", res.Rounds, res.Succeeded, res.Retries)
	}

	// Which round each pair was planned in.
	roundOf := map[string]int{}
	for i, r := range res.Schedule.Rounds {
		for _, op := range r {
			roundOf[op.A+" "+op.B] = i
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	ended := map[string]int{}
	endedInRound := make([]int, len(res.Schedule.Rounds))
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		kind, pair, _ := strings.Cut(line, " ")
		switch kind {
		case "conflict":
			t.Errorf("cluster %s was in two commands at once", pair)
		case "start":
			r, ok := roundOf[pair]
			if !ok {
				t.Errorf("command for unplanned pair %q", pair)
				continue
			}
			// A round starts only when every command of the previous one has ended.
			if r > 0 && endedInRound[r-1] != len(res.Schedule.Rounds[r-1]) {
				t.Errorf("%q (round %d) started when %d of %d commands of round %d had ended",
					pair, r+1, endedInRound[r-1], len(res.Schedule.Rounds[r-1]), r)
			}
		case "end":
			ended[pair]++
			endedInRound[roundOf[pair]]++
		}
	}
	for _, p := range wanted.Pairs() {
		if n := ended[p.A+" "+p.B]; n != 1 {
			t.Errorf("pair %s ran to the end %d times, want 1", p, n)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, "logs", "c2_c5.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "boom for c2 c5\n[exit status 1]") || !strings.Contains(string(log), "[exit 0]") {
		t.Errorf("c2_c5.log lacks the failed and the successful attempt:\n%s", log)
	}

	// The journal makes the run resumable: observed = wanted, nothing left to do.
	got, err := c.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wanted.Pairs(), got.Pairs()); diff != "" {
		t.Errorf("journal connections (-want +got):\n%s", diff)
	}
	res, err = e.Run(ctx, c, wanted)
	if err != nil || res.Ops != 0 {
		t.Errorf("re-run: %d ops, err %v; want 0, nil", res.Ops, err)
	}
}

func TestCommandBackendFailureReported(t *testing.T) {
	t.Parallel()
	c := &Command{Connect: "false {a} {b}"}
	res, err := (&Executor{Attempts: 2, Backoff: func(int) time.Duration { return 0 }}).Run(context.Background(), c, FullMesh("x", "y"))
	if err == nil || len(res.Failures) != 1 || res.Failures[0].Attempts != 2 {
		t.Fatalf("failing command: failures %+v, err %v; want one failure after 2 attempts", res.Failures, err)
	}
	if !strings.Contains(err.Error(), "connect x y: false x y: exit status 1") {
		t.Errorf("error does not name the pair, argv and exit: %v", err)
	}
	if _, err := (&Command{Connect: "true"}).Argv(Op{A: "x", B: "y", Disconnect: true}); err == nil || !strings.Contains(err.Error(), "--disconnect-command") {
		t.Errorf("disconnect without template: err %v, want one naming --disconnect-command", err)
	}
}

func TestCommandBackendNoInjection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "args")
	evilA := "a;touch " + filepath.Join(dir, "pwned1")
	evilB := "$(touch " + filepath.Join(dir, "pwned2") + ")"
	for _, tc := range []struct {
		name string
		c    *Command
	}{
		// argv mode: printf gets the names as single arguments.
		{"argv", &Command{Connect: "sh " + filepath.Join(dir, "printargs.sh") + " {a} {b} {a.context}", Contexts: map[string]string{evilA: "ctx-a"}}},
		// shell mode: the names reach the script only as quoted variables.
		{"shell", &Command{Shell: true, Connect: `printf '%s\n' {a} {b} {a.context} > ` + out + ".shell", Contexts: map[string]string{evilA: "ctx-a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "printargs.sh"), []byte("printf '%s\\n' \"$@\" > "+out+".argv\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := tc.c.Apply(context.Background(), Op{A: evilA, B: evilB}); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out + "." + tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(evilA+"\n"+evilB+"\nctx-a\n", string(got)); diff != "" {
				t.Errorf("arguments the command got (-want +got):\n%s", diff)
			}
			for _, f := range []string{"pwned1", "pwned2"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					t.Errorf("a cluster name was run as shell code: %s exists", f)
				}
			}
		})
	}
}
