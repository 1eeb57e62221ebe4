package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/static"
	"github.com/prebake-dev/prebake/providers/static/statictest"
)

// TestServeStaticExample runs `prebake serve` on examples/static.yaml with
// its pool replaced by real sshd machines in a network namespace and its
// cluster by a hermetic API server, and drives it the way CA does: scale
// metal-small 0 → 2 (both machines run the node script), once more (the
// pool is dry: OutOfResources), then delete a node (the machine is reset
// and freed).
func TestServeStaticExample(t *testing.T) {
	t.Parallel()
	sp := statictest.NewPool(t, 2)
	kc := statictest.StartCluster(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	statictest.WriteFile(t, keyFile, sp.ClientKey, 0o600)
	script := filepath.Join(dir, "node.sh")
	statictest.WriteFile(t, script, sp.MarkerScript("bootstrap"), 0o600)
	reset := filepath.Join(dir, "reset.sh")
	statictest.WriteFile(t, reset, sp.MarkerScript("reset"), 0o600)

	example, err := os.ReadFile("../../../examples/static.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(example)
	var machines strings.Builder
	for _, m := range sp.Machines {
		fmt.Fprintf(&machines, "      - {host: %s, address: %s, port: %d, machineType: metal-8c-32g, zone: dc1}\n", m.Host, m.Address, m.Port)
	}
	start := strings.Index(cfg, "    machines:\n")
	end := strings.Index(cfg, "\nnodeGroups:")
	if start < 0 || end < start {
		t.Fatal("examples/static.yaml lost its machines list or nodeGroups")
	}
	cfg = cfg[:start] + "    machines:\n" + machines.String() + cfg[end:]
	for _, r := range [][2]string{
		{"# kubeconfig: /etc/prebake/kubeconfig", "kubeconfig: " + kc.Kubeconfig},
		{"privateKey: {file: /etc/prebake/ssh/id_ed25519}", "privateKey: {file: " + keyFile + "}"},
		{"knownHosts: /etc/prebake/ssh/known_hosts", "knownHosts: " + sp.KnownHosts},
		{"resetCommand: kubeadm reset -f && rm -rf /etc/cni/net.d /var/lib/cni /etc/prebake", "resetCommand: sh " + reset},
		{"userDataFile: static-node.sh", "userDataFile: " + script},
	} {
		if !strings.Contains(cfg, r[0]) {
			t.Fatalf("examples/static.yaml lost the line %q the test rewrites", r[0])
		}
		cfg = strings.ReplaceAll(cfg, r[0], r[1])
	}

	ctx := t.Context()
	c := serveConfig(t, cfg)
	nodes, until := c.nodes, func(what string, cond func() bool) { t.Helper(); c.until(what, 60*time.Second, cond) }
	running := func() []string {
		var ids []string
		for _, in := range nodes("metal-small") {
			if strings.HasPrefix(in.GetId(), "static://") && in.GetStatus().GetInstanceState() == protos.InstanceStatus_instanceRunning {
				ids = append(ids, in.GetId())
			}
		}
		return ids
	}

	if _, err := c.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "metal-small", Delta: 2}); err != nil {
		t.Fatal(err)
	}
	until("2 running static machines", func() bool { return len(running()) == 2 })
	for _, m := range sp.Machines {
		if got := sp.Markers(t, m.Host, "bootstrap"); len(got) != 1 {
			t.Errorf("%s ran the node script %d times, want once", m.Host, len(got))
		}
	}

	if _, err := c.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "metal-small", Delta: 1}); err != nil {
		t.Fatal(err)
	}
	var failed *protos.Instance
	until("a creation error", func() bool {
		for _, in := range nodes("metal-small") {
			if in.GetStatus().GetErrorInfo() != nil {
				failed = in
				return true
			}
		}
		return false
	})
	if ei := failed.GetStatus().GetErrorInfo(); ei.GetInstanceErrorClass() != int32(providers.ErrorOutOfResources) || ei.GetErrorCode() != "no_free_machine" {
		t.Errorf("failed instance = %v, want OutOfResources no_free_machine", failed)
	}

	gone := running()[0]
	if _, err := c.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "metal-small", Nodes: []*protos.ExternalGrpcNode{
		{ProviderID: gone, Name: strings.TrimPrefix(gone, "static://")},
	}}); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(gone, "static://")
	client, err := kubernetes.NewForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	until("the deleted machine's claim to go", func() bool {
		_, err := client.CoordinationV1().Leases(static.DefaultNamespace).Get(ctx, host, metav1.GetOptions{})
		return err != nil
	})
	if got := sp.Markers(t, host, "reset"); len(got) != 1 {
		t.Errorf("%s was reset %d times, want once", host, len(got))
	}
}
