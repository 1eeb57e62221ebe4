package kubetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJoinOptionsValidate(t *testing.T) {
	kubeadm := filepath.Join(t.TempDir(), "kubeadm")
	if err := os.WriteFile(kubeadm, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		j    JoinOptions
		want string
	}{
		{"loopback", JoinOptions{Address: "127.0.0.1", Kubeadm: kubeadm}, "JoinOptions.Address"},
		{"any", JoinOptions{Address: "0.0.0.0", Kubeadm: kubeadm}, "JoinOptions.Address"},
		{"no kubeadm", JoinOptions{Address: "172.18.0.1"}, "JoinOptions.Kubeadm"},
		{"small pod CIDR", JoinOptions{Address: "172.18.0.1", Kubeadm: kubeadm, PodCIDR: "10.244.0.0/24"}, "JoinOptions.PodCIDR"},
		{"bad pod CIDR", JoinOptions{Address: "172.18.0.1", Kubeadm: kubeadm, PodCIDR: "10.244.0.0"}, "JoinOptions.PodCIDR"},
	} {
		if err := tc.j.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	j := JoinOptions{Address: "172.18.0.1", Kubeadm: kubeadm}
	if err := j.validate(); err != nil || j.PodCIDR != DefaultPodCIDR {
		t.Errorf("validate = %v, PodCIDR %q; want ok and the default", err, j.PodCIDR)
	}
	if _, err := NewHermetic(HermeticOptions{Dir: t.TempDir(), Join: &j, APIServerOnly: true}); err == nil {
		t.Error("NewHermetic accepted Join with APIServerOnly")
	}
}

// Without Join the components get no extra flags and listen on loopback, as before.
func TestJoinOffChangesNothing(t *testing.T) {
	h, err := NewHermetic(HermeticOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{compAPIServer, compKCM, compScheduler, compEtcd, compKwok} {
		if got := h.joinArgs(c); got != nil {
			t.Errorf("joinArgs(%s) = %q without Join", c, got)
		}
	}
	if h.listenHost() != "127.0.0.1" || h.extraServingIPs() != nil {
		t.Errorf("listen %q, extra SANs %v without Join", h.listenHost(), h.extraServingIPs())
	}
	kubeadm := filepath.Join(t.TempDir(), "kubeadm")
	if err := os.WriteFile(kubeadm, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hj, err := NewHermetic(HermeticOptions{Dir: t.TempDir(), Join: &JoinOptions{Address: "172.18.0.1", Kubeadm: kubeadm}})
	if err != nil {
		t.Fatal(err)
	}
	kcm := strings.Join(hj.joinArgs(compKCM), " ")
	for _, want := range []string{"bootstrapsigner", "--allocate-node-cidrs=true", "--cluster-cidr=" + DefaultPodCIDR} {
		if !strings.Contains(kcm, want) {
			t.Errorf("KCM join flags %q lack %q", kcm, want)
		}
	}
	if api := strings.Join(hj.joinArgs(compAPIServer), " "); !strings.Contains(api, "--enable-bootstrap-token-auth=true") {
		t.Errorf("apiserver join flags %q lack bootstrap token auth", api)
	}
}
