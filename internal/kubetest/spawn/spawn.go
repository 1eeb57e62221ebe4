// Package spawn starts child processes so that they die with the test
// process: Setpgid plus Pdeathsig=SIGKILL, forked from one goroutine locked
// to its OS thread.
//
// Pdeathsig fires when the *thread* that forked the child exits, not when the
// process exits (golang/go#27505). The Go runtime retires a thread only when
// a goroutine that locked it exits, so children forked from an arbitrary
// goroutine could be killed at a random moment if that goroutine had locked
// its thread. Forking from one dedicated, locked thread that lives until
// Close makes the signal mean exactly "our process is gone, or Close was
// called". The thread is never unlocked, so Close retires it, and any child
// still alive then gets SIGKILL.
package spawn

import (
	"errors"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Spawner forks children from one locked OS thread.
type Spawner struct {
	reqs chan request
	quit chan struct{}
	once sync.Once
}

type request struct {
	cmd *exec.Cmd
	res chan error
}

// New starts the spawner's thread; Close stops it.
func New() *Spawner {
	s := &Spawner{reqs: make(chan request), quit: make(chan struct{})}
	go s.loop()
	return s
}

func (s *Spawner) loop() {
	runtime.LockOSThread() // never unlocked, see the package comment
	for {
		select {
		case r := <-s.reqs:
			r.res <- r.cmd.Start()
		case <-s.quit:
			return
		}
	}
}

// Start starts cmd in its own process group with Pdeathsig=SIGKILL (any
// SysProcAttr already set is kept and completed).
func (s *Spawner) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	res := make(chan error, 1)
	select {
	case s.reqs <- request{cmd: cmd, res: res}:
		return <-res
	case <-s.quit:
		return errors.New("spawner closed")
	}
}

// Close retires the thread; children still alive get SIGKILL.
func (s *Spawner) Close() { s.once.Do(func() { close(s.quit) }) }
