package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// SchedulerOptions tunes the hermetic cluster's kube-scheduler. The zero value runs it
// with its own defaults, as every cluster does unless its operator changed them.
type SchedulerOptions struct {
	// Verbosity is kube-scheduler's -v. 0 keeps its default. At 4 the scheduler logs every
	// scheduling attempt and why it failed; at 5 also every queue move, with the event
	// and the QueueingHint that caused it.
	Verbosity int
	// PodInitialBackoff and PodMaxBackoff are the KubeSchedulerConfiguration's
	// podInitialBackoffSeconds and podMaxBackoffSeconds: a pod that failed n scheduling
	// attempts waits PodInitialBackoff·2^(n-1), at most PodMaxBackoff, after its last
	// attempt before the next. Whole seconds, at least 1 s, initial ≤ max. Zero keeps
	// kube-scheduler's default (1 s and 10 s). When either is set, the scheduler runs
	// with a --config file (run/kube-scheduler-config.yaml) instead of its
	// --kubeconfig and --leader-elect flags, which a config file overrides.
	PodInitialBackoff, PodMaxBackoff time.Duration
}

// DefaultPodInitialBackoff and DefaultPodMaxBackoff are kube-scheduler's defaults for
// podInitialBackoffSeconds and podMaxBackoffSeconds.
const (
	DefaultPodInitialBackoff = 1 * time.Second
	DefaultPodMaxBackoff     = 10 * time.Second
)

// withConfig reports whether the options need a KubeSchedulerConfiguration file.
func (o SchedulerOptions) withConfig() bool {
	return o.PodInitialBackoff != 0 || o.PodMaxBackoff != 0
}

// backoffs returns the effective initial and maximum backoff in whole seconds.
func (o SchedulerOptions) backoffs() (initial, maxBackoff int64, err error) {
	initial, maxBackoff = int64(DefaultPodInitialBackoff/time.Second), int64(DefaultPodMaxBackoff/time.Second)
	for _, f := range []struct {
		name string
		d    time.Duration
		dst  *int64
	}{
		{"SchedulerOptions.PodInitialBackoff", o.PodInitialBackoff, &initial},
		{"SchedulerOptions.PodMaxBackoff", o.PodMaxBackoff, &maxBackoff},
	} {
		switch {
		case f.d == 0:
		case f.d < time.Second || f.d%time.Second != 0:
			return 0, 0, fmt.Errorf("%s = %s: kube-scheduler takes whole seconds, at least 1s; use 0 for its default", f.name, f.d)
		default:
			*f.dst = int64(f.d / time.Second)
		}
	}
	if initial > maxBackoff {
		return 0, 0, fmt.Errorf("SchedulerOptions.PodInitialBackoff (%ds) exceeds PodMaxBackoff (%ds); kube-scheduler refuses that: lower the first or raise the second", initial, maxBackoff)
	}
	return initial, maxBackoff, nil
}

// schedulerConfig renders the KubeSchedulerConfiguration for o.
func (o SchedulerOptions) schedulerConfig(kubeconfig string) ([]byte, error) {
	initial, maxBackoff, err := o.backoffs()
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  leaderElect: false
podInitialBackoffSeconds: %d
podMaxBackoffSeconds: %d
`, strconv.Quote(kubeconfig), initial, maxBackoff), nil
}

// schedulerArgs returns kube-scheduler's flags for o; runDir receives the config file
// when one is needed. The serving and authentication flags stay flags: a config file
// does not cover them.
func (o SchedulerOptions) schedulerArgs(kubeconfig, runDir string, port int) ([]string, error) {
	args := []string{
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(runDir, "scheduler-certs"),
	}
	if o.withConfig() {
		cfg, err := o.schedulerConfig(kubeconfig)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(runDir, compScheduler+"-config.yaml")
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		args = append(args, "--config="+path)
	} else {
		args = append(args, "--kubeconfig="+kubeconfig, "--leader-elect=false")
	}
	if o.Verbosity > 0 {
		args = append(args, "-v="+strconv.Itoa(o.Verbosity))
	}
	return args, nil
}
