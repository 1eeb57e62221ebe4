package kubetest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestSchedulerArgsDefaultHasNoConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args, err := SchedulerOptions{}.schedulerArgs("/k/admin.kubeconfig", dir, 1234)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--kubeconfig=/k/admin.kubeconfig", "--leader-elect=false", "--secure-port=1234", "--authentication-kubeconfig=/k/admin.kubeconfig"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--config=") || strings.HasPrefix(a, "-v=") {
			t.Errorf("default args have %q; want the scheduler's own defaults", a)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-scheduler-config.yaml")); !os.IsNotExist(err) {
		t.Errorf("a config file was written for the defaults (stat: %v)", err)
	}
}

func TestSchedulerArgsWriteBackoffConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		opts             SchedulerOptions
		wantInit, wantMx int64
	}{
		{"both", SchedulerOptions{PodInitialBackoff: time.Second, PodMaxBackoff: 2 * time.Second, Verbosity: 5}, 1, 2},
		{"only max keeps the initial default", SchedulerOptions{PodMaxBackoff: 3 * time.Second}, 1, 3},
		{"only initial keeps the max default", SchedulerOptions{PodInitialBackoff: 4 * time.Second}, 4, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args, err := tc.opts.schedulerArgs("/k/admin.kubeconfig", dir, 1234)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "kube-scheduler-config.yaml")
			if !slices.Contains(args, "--config="+path) {
				t.Fatalf("args %q lack --config=%s", args, path)
			}
			// A config file overrides these flags, so they must not be passed.
			for _, a := range args {
				if strings.HasPrefix(a, "--kubeconfig=") || strings.HasPrefix(a, "--leader-elect") {
					t.Errorf("args with a config file have %q, which the file overrides", a)
				}
			}
			if v := tc.opts.Verbosity; v > 0 && !slices.Contains(args, "-v=5") {
				t.Errorf("args %q lack -v=5", args)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				APIVersion       string `json:"apiVersion"`
				Kind             string `json:"kind"`
				ClientConnection struct {
					Kubeconfig string `json:"kubeconfig"`
				} `json:"clientConnection"`
				LeaderElection struct {
					LeaderElect *bool `json:"leaderElect"`
				} `json:"leaderElection"`
				Initial int64 `json:"podInitialBackoffSeconds"`
				Max     int64 `json:"podMaxBackoffSeconds"`
			}
			if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
				t.Fatalf("config %s:\n%s\n%v", path, data, err)
			}
			if cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || cfg.Kind != "KubeSchedulerConfiguration" {
				t.Errorf("config is %s %s, want kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration", cfg.APIVersion, cfg.Kind)
			}
			if cfg.ClientConnection.Kubeconfig != "/k/admin.kubeconfig" {
				t.Errorf("clientConnection.kubeconfig = %q", cfg.ClientConnection.Kubeconfig)
			}
			if cfg.LeaderElection.LeaderElect == nil || *cfg.LeaderElection.LeaderElect {
				t.Errorf("leaderElection.leaderElect = %v, want false", cfg.LeaderElection.LeaderElect)
			}
			if cfg.Initial != tc.wantInit || cfg.Max != tc.wantMx {
				t.Errorf("backoff = %d s / %d s, want %d s / %d s", cfg.Initial, cfg.Max, tc.wantInit, tc.wantMx)
			}
		})
	}
}

func TestSchedulerArgsRefuseWhatTheSchedulerRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts SchedulerOptions
		want string
	}{
		{SchedulerOptions{PodInitialBackoff: 500 * time.Millisecond}, "SchedulerOptions.PodInitialBackoff = 500ms"},
		{SchedulerOptions{PodMaxBackoff: 1500 * time.Millisecond}, "SchedulerOptions.PodMaxBackoff = 1.5s"},
		{SchedulerOptions{PodMaxBackoff: -time.Second}, "SchedulerOptions.PodMaxBackoff = -1s"},
		{SchedulerOptions{PodInitialBackoff: 5 * time.Second, PodMaxBackoff: 2 * time.Second}, "exceeds PodMaxBackoff"},
		// The max defaults to 10 s, below this initial.
		{SchedulerOptions{PodInitialBackoff: 20 * time.Second}, "exceeds PodMaxBackoff (10s)"},
	} {
		dir := t.TempDir()
		_, err := tc.opts.schedulerArgs("/k", dir, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one containing %q", tc.opts, err, tc.want)
		}
	}
}

func TestSystemNodeIsOwnedByNoGroupAndTainted(t *testing.T) {
	t.Parallel()
	n := SystemNode()
	if n.Name != SystemNodeName || n.Spec.ProviderID != "" {
		t.Errorf("system node %q has providerID %q; want %q with none, so no node group owns it", n.Name, n.Spec.ProviderID, SystemNodeName)
	}
	if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&SystemNodeTaint) }) {
		t.Errorf("taints %v lack %v: pods would land on the system node instead of needing a scale-up", n.Spec.Taints, SystemNodeTaint)
	}
	if n.Status.Allocatable.Cpu().IsZero() {
		t.Errorf("allocatable %v is empty; kwok would fill in a huge one", n.Status.Allocatable)
	}
	// Each call returns its own object: AddNode and callers may change it.
	n.Spec.Taints = nil
	if len(SystemNode().Spec.Taints) == 0 {
		t.Error("SystemNode returned a shared object")
	}
}
