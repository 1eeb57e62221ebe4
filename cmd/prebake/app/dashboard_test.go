package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/deploy"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
)

// Every series deploy/grafana's dashboard queries exists in the /metrics of a running
// prebake serve. Histograms and labelled counters appear only once observed, so the server
// runs a scale-up on the kwok provider over a fake cluster, acted out the way the real
// one goes: a group that boots a catalog image (its Node turns Ready, a pod runs, the node
// reports its bootstrap phases), one in a full zone (a creation error), and one whose channel
// has no image (a runtime-install fallback).
func TestDashboardMetricsExistInServe(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	dash, err := deploy.LoadDashboard(deploy.DashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := filepath.Abs("../../../examples/kwok-catalog.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: t
providers:
  kwok:
    simulatedBoot: {prebaked: 0ms, runtimeInstall: 0ms}
    capacity: {zone-b: 0}
imageCatalog: {file: %s}
nodeGroups:
  - {id: small, provider: kwok, minSize: 0, maxSize: 3, machineType: kwok-small, location: zone-a, image: {channel: stable}}
  - {id: full, provider: kwok, minSize: 0, maxSize: 3, machineType: kwok-small, location: zone-b}
  - {id: beta, provider: kwok, minSize: 0, maxSize: 3, machineType: kwok-small, location: zone-a, image: {channel: beta}}
`, catalog))
	kube := kubefake.NewClientset()
	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: cfg, Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second,
			kube: kube, Logger: slog.New(slog.DiscardHandler), Ready: func(g, h string) { addrs <- [2]string{g, h} }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	var grpcAddr, httpAddr string
	select {
	case a := <-addrs:
		grpcAddr, httpAddr = a[0], a[1]
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ca := protos.NewCloudProviderClient(conn)
	// A Node made before the Node watch began, and Ready before it too, would reach it only
	// at the informer's resync.
	waitForWatch(t, kube, "nodes", providers.LabelCluster+"=t")
	for _, g := range []string{"small", "full", "beta"} {
		if _, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: g, Delta: 1}); err != nil {
			t.Fatalf("IncreaseSize %s: %v", g, err)
		}
	}

	// The kwok provider makes small's Node; kwok would turn it Ready and run its pod, and a
	// real node script would annotate it.
	var node *corev1.Node
	waitFor(t, "small's Node", func() bool {
		l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: providers.LabelGroup + "=small"})
		if err == nil && len(l.Items) == 1 {
			node = &l.Items[0]
		}
		return node != nil
	})
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForWatch(t, kube, "pods", "spec.nodeName="+node.Name)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"}, Spec: corev1.PodSpec{NodeName: node.Name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	report := fmt.Sprintf(`{"metadata":{"annotations":{%q:"prebaked=true total=9312ms start=%d manifest=3ms/ok plan=20ms/ok install=0ms/skipped configure=40ms/ok kubelet=5ms/ok join=9000ms/ok"}}}`,
		bootstrap.NodeAnnotation, time.Now().UnixMilli())
	if _, err := kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(report), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// Every series the dashboard queries, and the phases it selects by label value.
	var missing []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		fams, err := scrape(ctx, "http://"+httpAddr+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for _, name := range dash.MetricNames() {
			if !hasSeries(fams, name) {
				missing = append(missing, name)
			}
		}
		for _, phase := range []string{"node_ready", "pod_running"} {
			if !hasLabel(fams["prebake_instance_phase_seconds"], "phase", phase) {
				missing = append(missing, "prebake_instance_phase_seconds{phase="+phase+"}")
			}
		}
		if !hasLabel(fams["prebake_bootstrap_phase_seconds"], "phase", "install") {
			missing = append(missing, "prebake_bootstrap_phase_seconds{phase=install}")
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard queries series that prebake serve's /metrics lacks: %v", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hasLabel(f *dto.MetricFamily, name, value string) bool {
	for _, s := range f.GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				return true
			}
		}
	}
	return false
}

func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(string(body)))
}

// hasSeries reports whether a series called name is in fams: a family of that name with a
// series, or a histogram's _bucket, _count or _sum.
func hasSeries(fams map[string]*dto.MetricFamily, name string) bool {
	if f := fams[name]; f != nil {
		return f.GetType() != dto.MetricType_HISTOGRAM && len(f.GetMetric()) > 0
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			f := fams[base]
			return f != nil && f.GetType() == dto.MetricType_HISTOGRAM && len(f.GetMetric()) > 0
		}
	}
	return false
}
