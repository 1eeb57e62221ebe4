package mesh

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Command is a pairwise Backend that runs a command per pair, for users who keep
// "cilium clustermesh connect": the executor runs it round by round, so no cluster is in
// two commands at once (two connects of one cluster conflict: docs/mesh.md).
//
// The template is split on white space into argv and run without a shell, so cluster
// names can never be interpreted as shell syntax. Placeholders, replaced inside each
// argument: {a} and {b} (the two cluster names), {a.context} and {b.context} (their
// kubeconfig contexts, the name when unset). With Shell, the template is run by
// "sh -c" instead, and the placeholders become "$MESH_A", "$MESH_B", "$MESH_A_CONTEXT"
// and "$MESH_B_CONTEXT", quoted shell variables set in the environment: the names still
// never become script text.
//
// A command cannot be asked what is connected, so each success is appended to the
// Journal file, and Connections reads it back (plus Initial): a re-run resumes.
type Command struct {
	// Connect is the template run for a pair to connect. Required.
	Connect string
	// Disconnect is the template run for a pair to disconnect; empty means disconnects
	// fail with an error saying so.
	Disconnect string
	// Shell runs the templates with sh -c.
	Shell bool
	// Journal records the pairs done, one "connect a b" line each; empty means none is
	// kept (then only Initial is observed).
	Journal string
	// LogDir receives each attempt's output, <LogDir>/<a>_<b>.log; empty keeps it only in
	// the error of a failed attempt.
	LogDir string
	// Initial is connected before anything in the journal (e.g. --existing).
	Initial *Graph
	// Contexts maps cluster names to kubeconfig contexts for {a.context} and {b.context}.
	Contexts map[string]string

	mu sync.Mutex // guards the journal file and log files
}

var _ Backend = (*Command)(nil)

// placeholders in argument (argv mode) and shell-variable form.
var commandVars = []struct{ placeholder, env string }{
	{"{a.context}", "MESH_A_CONTEXT"},
	{"{b.context}", "MESH_B_CONTEXT"},
	{"{a}", "MESH_A"},
	{"{b}", "MESH_B"},
}

// Argv returns the argv that runs op: what Apply executes.
func (c *Command) Argv(op Op) ([]string, error) {
	tmpl := c.Connect
	if op.Disconnect {
		tmpl = c.Disconnect
		if tmpl == "" {
			return nil, fmt.Errorf("%s: no disconnect command given (--disconnect-command), so the pair cannot be disconnected", op)
		}
	}
	if strings.TrimSpace(tmpl) == "" {
		return nil, errors.New("command backend: the connect command template is empty (--command)")
	}
	if c.Shell {
		script := tmpl
		for _, v := range commandVars {
			script = strings.ReplaceAll(script, v.placeholder, `"$`+v.env+`"`)
		}
		return []string{"sh", "-c", script}, nil
	}
	vals := c.values(op)
	argv := strings.Fields(tmpl)
	for i, arg := range argv {
		for _, v := range commandVars {
			arg = strings.ReplaceAll(arg, v.placeholder, vals[v.env])
		}
		argv[i] = arg
	}
	return argv, nil
}

func (c *Command) values(op Op) map[string]string {
	ctx := func(name string) string {
		if s := c.Contexts[name]; s != "" {
			return s
		}
		return name
	}
	return map[string]string{
		"MESH_A": op.A, "MESH_B": op.B,
		"MESH_A_CONTEXT": ctx(op.A), "MESH_B_CONTEXT": ctx(op.B),
	}
}

// Apply runs the command for op and, when it exits 0, records the pair in the journal.
func (c *Command) Apply(ctx context.Context, op Op) error {
	argv, err := c.Argv(op)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	for k, v := range c.values(op) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	if err := c.log(op, argv, out.Bytes(), runErr); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("%s: %s: %w%s", op, strings.Join(argv, " "), runErr, tail(out.String(), 10))
	}
	return c.record(op)
}

func tail(s string, lines int) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return "; output:\n    " + strings.Join(parts, "\n    ")
}

func (c *Command) log(op Op, argv []string, out []byte, runErr error) error {
	if c.LogDir == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(c.LogDir, op.A+"_"+op.B+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	status := "exit 0"
	if runErr != nil {
		status = runErr.Error()
	}
	fmt.Fprintf(f, "$ %s\n%s[%s]\n", strings.Join(argv, " "), out, status)
	return f.Close()
}

func (c *Command) record(op Op) error {
	if c.Journal == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.OpenFile(c.Journal, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s succeeded but the journal %s cannot be written (a re-run would repeat it): %w", op, c.Journal, err)
	}
	if _, err := fmt.Fprintln(f, op.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Connections returns Initial with the journal's operations replayed in order.
func (c *Command) Connections(context.Context) (*Graph, error) {
	g := NewGraph()
	if c.Initial != nil {
		g = c.Initial.Clone()
	}
	if c.Journal == "" {
		return g, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.Open(c.Journal)
	if errors.Is(err, fs.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 || (fields[0] != "connect" && fields[0] != "disconnect") {
			return nil, fmt.Errorf("%s:%d: want \"connect A B\" or \"disconnect A B\", got %q", c.Journal, line, sc.Text())
		}
		if fields[0] == "connect" {
			g.Add(fields[1], fields[2])
		} else {
			g.Remove(fields[1], fields[2])
		}
	}
	return g, sc.Err()
}
