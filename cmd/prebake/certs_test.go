package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCertSANs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		dns, ips, hosts  []string
		want             []string
		wantErrSubstring string
	}{
		{name: "defaults", want: []string{"localhost", "127.0.0.1"}},
		{name: "service and loopback", dns: []string{"prebake.kube-system.svc"}, ips: []string{"127.0.0.1"}, want: []string{"prebake.kube-system.svc", "127.0.0.1"}},
		{name: "deprecated --host", hosts: []string{"a.example", "10.0.0.1"}, want: []string{"a.example", "10.0.0.1"}},
		{name: "IP as --dns", dns: []string{"10.0.0.1"}, wantErrSubstring: "pass it as --ip 10.0.0.1"},
		{name: "name as --ip", ips: []string{"prebake"}, wantErrSubstring: "pass names as --dns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := certSANs(tc.dns, tc.ips, tc.hosts)
			if tc.wantErrSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstring) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErrSubstring)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("SANs (-want +got):\n%s", d)
			}
		})
	}
}

func TestCertsCommandWritesTheSixFiles(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "tls")
	cmd := newCertsCommand()
	cmd.SetArgs([]string{"--out", out, "--dns", "prebake.kube-system.svc", "--ip", "127.0.0.1"})
	cmd.SetOut(new(strings.Builder))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "server.crt", "server.key", "client.crt", "client.key"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
