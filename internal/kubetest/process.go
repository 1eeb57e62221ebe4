package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prebake-dev/prebake/internal/kubetest/spawn"
)

const (
	// stopGrace is how long a component gets between SIGTERM and SIGKILL.
	stopGrace = 10 * time.Second
	// killWait bounds the wait for the kernel to tear a process down after SIGKILL.
	killWait = 5 * time.Second
)

// process is one running component.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	pidPath string
	done    chan struct{} // closed when Wait has returned; waitErr is then set.
	waitErr error
}

// startProcess starts bin with args in its own process group, with stdout and stderr going
// to a fresh logDir/<name>.log and its PID written to pidDir/<name>.pid.
func startProcess(sp *spawn.Spawner, name, bin string, args, env []string, logDir, pidDir string) (*process, error) {
	p := &process{
		name:    name,
		logPath: filepath.Join(logDir, name+".log"),
		pidPath: filepath.Join(pidDir, name+".pid"),
		done:    make(chan struct{}),
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", name, err)
	}
	// The child gets its own copy of the descriptor; ours is not needed after Start.
	defer logf.Close()

	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := sp.Start(p.cmd); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	if err := os.WriteFile(p.pidPath, []byte(strconv.Itoa(p.cmd.Process.Pid)+"\n"), 0o644); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s: write pid file: %w", name, err)
	}
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return true, errors.New("exited with status 0")
		}
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to stopGrace, then sends SIGKILL. It
// removes the pid file once the process is gone.
func (p *process) stop() error {
	pgid := p.cmd.Process.Pid // Setpgid makes the group id equal to the leader's pid.
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(killWait):
				return fmt.Errorf("%s (pid %d) still running %s after SIGKILL", p.name, pgid, killWait)
			}
		}
	}
	// A component that forked helpers leaves them in its group; make sure none survive.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if err := os.Remove(p.pidPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: remove pid file: %w", p.name, err)
	}
	return nil
}

// ReapStale kills processes recorded in dir/pids by an earlier run that was itself killed
// before it could stop them, and removes their pid files.
//
// A pid is only killed when /proc/<pid>/cmdline still names the binary the pid file is named
// after and mentions dir, so a pid reused by an unrelated process is left alone.
func ReapStale(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if err := reapOne(f, name, dir); err != nil {
			errs = append(errs, fmt.Errorf("reap stale %s from %s: %w", name, f, err))
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func reapOne(pidFile, name, dir string) error {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return nil // garbage in a pid file: nothing to kill, the file goes.
	}
	if !isOurs(pid, name, dir) {
		return nil
	}
	// The process was started with Setpgid, so it leads its own group.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(killWait)
	for isOurs(pid, name, dir) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still alive %s after SIGKILL", pid, killWait)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: there is no wait for a non-child.
	}
	return nil
}

// isOurs reports whether pid is alive (not a zombie), runs a binary called name, and has dir
// in its command line.
func isOurs(pid int, name, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 {
		return false // gone, or a zombie (whose cmdline is empty).
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if filepath.Base(args[0]) != name {
		return false
	}
	return bytes.Contains(cmdline, []byte(dir))
}

// tailFile returns the last n lines of path, reading at most the last 256 KiB.
func tailFile(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	const maxRead = 256 << 10
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	off := max(st.Size()-maxRead, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}

// waitFor polls check every interval until it returns nil, the process exits, ctx ends or
// timeout passes. what names the condition in errors.
func waitFor(ctx context.Context, what string, timeout time.Duration, p *process, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	const interval = 100 * time.Millisecond
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		if p != nil {
			if gone, err := p.exited(); gone {
				return fmt.Errorf("%s: %s exited before it was ready (%v); see %s", what, p.name, err, p.logPath)
			}
		}
		reqCtx, reqCancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(reqCtx)
		reqCancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%s: not ready after %s: last error: %v", what, timeout, last)
			}
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}
