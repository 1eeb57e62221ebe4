package nodetimeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestWriteFormats(t *testing.T) {
	t.Parallel()
	in := scaleUp()
	in.Nodes = append(in.Nodes, nodeOf{name: "cx-fsn1-old01", group: "cx-fsn1", kind: "prebaked", created: 400, readySince: 402}.build())
	r := Build(in)

	var table bytes.Buffer
	if err := Write(&table, r, FormatTable); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	for _, want := range []string{
		"3 nodes made since 2026-12-02T09:10:00Z (the last 1h0m0s)",
		"PENDING→CA", "INCREASE→READY",
		"cx-fsn1-ab3de", "31.44s", // requested → ready of the prebaked node
		"1.0–3.0s",        // pod Pending → CA decision: whole seconds
		"? no annotation", // the old node
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The bootstrap table: the vanilla node's install took 80 s, the prebaked one skipped it.
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "cx-fsn1-ab3de") && strings.Contains(line, prebakedImage):
			if !strings.Contains(line, "true") || !strings.Contains(line, "skipped") || !strings.Contains(line, "none detected") {
				t.Errorf("prebaked bootstrap row %q: want prebaked, install skipped, no skew", line)
			}
		case strings.HasPrefix(line, "cx-fsn1-vq7kp  –"):
			if !strings.Contains(line, "false") || !strings.Contains(line, "ran") || !strings.Contains(line, "1m20.0s") {
				t.Errorf("vanilla bootstrap row %q: want not prebaked, install ran 1m20.0s", line)
			}
		}
	}
	if strings.Contains(out, "not cluster-autoscaler") {
		t.Errorf("cluster-autoscaler's own Events flagged as another component's:\n%s", out)
	}
	if !strings.Contains(out, "? no annotation: "+Legend[UnknownNoAnnotation]) {
		t.Errorf("table lacks the legend of the unknowns it shows:\n%s", out)
	}

	var md bytes.Buffer
	if err := Write(&md, r, FormatMarkdown); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| NODE | GROUP | IMAGE KIND | PENDING→CA |") || !strings.Contains(md.String(), "|---|---|") {
		t.Errorf("markdown lacks its table header:\n%s", md.String())
	}
	if strings.Contains(out, "FROM") {
		t.Errorf("a report without resumed standbys shows the warm pool:\n%s", out)
	}

	var js bytes.Buffer
	if err := Write(&js, r, FormatJSON); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r, back); d != "" {
		t.Errorf("JSON round trip (-built +decoded):\n%s", d)
	}
	if err := Write(&js, r, "yaml"); err == nil || !strings.Contains(err.Error(), "table, json or markdown") {
		t.Errorf("Write yaml: %v", err)
	}
}

func TestWriteMarksSimulated(t *testing.T) {
	t.Parallel()
	r := Build(Input{Now: at(60), Nodes: []corev1.Node{nodeOf{name: "small-7hq2x", group: "small", created: 5, readySince: 5,
		moments:     "requested=2026-12-02T10:00:02.100Z accepted=2026-12-02T10:00:02.104Z running=2026-12-02T10:00:04.140Z registered=2026-12-02T10:00:04.140Z ready=2026-12-02T10:00:04.181Z",
		annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "prebake.dev/simulated-boot": "2s"}}.build()}})
	var b bytes.Buffer
	if err := Write(&b, r, FormatTable); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIMULATED: 1 of the nodes are kwok's", "2.04s sim", "kwok runs no node script: the boot is SIMULATED (2s)", "SIMULATED on 1 of 1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

// A node whose machine was a resumed warm-pool standby says so, in its own column beside
// the created ones, in a line above the table and in the JSON.
func TestWriteMarksResumedStandbys(t *testing.T) {
	t.Parallel()
	in := scaleUp()
	pooled := nodeOf{name: "cx-fsn1-pl00l", group: "cx-fsn1", kind: "prebaked", image: prebakedImage, created: 12, readySince: 13,
		moments: "requested=2026-12-02T10:00:02.512Z accepted=2026-12-02T10:00:03.020Z running=2026-12-02T10:00:06.000Z " +
			"registered=2026-12-02T10:00:11.900Z ready=2026-12-02T10:00:12.700Z from=warm-pool"}
	in.Nodes = append(in.Nodes, pooled.build(), nodeOf{name: "cx-fsn1-old01", group: "cx-fsn1", kind: "prebaked", created: 400, readySince: 402}.build())
	r := Build(in)
	if n := find(t, r, "cx-fsn1-pl00l"); !n.FromWarmPool || !strings.Contains(n.Moment(Accepted).Source, "resume") {
		t.Errorf("pooled node = FromWarmPool %v, accepted from %q; want from the warm pool, accepted by its resume", n.FromWarmPool, n.Moment(Accepted).Source)
	}
	if n := find(t, r, "cx-fsn1-ab3de"); n.FromWarmPool {
		t.Error("a created node is marked from the warm pool")
	}

	var table bytes.Buffer
	if err := Write(&table, r, FormatTable); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	if !strings.Contains(out, "FROM WARM POOL: 1 of the nodes were resumed standbys") {
		t.Errorf("table lacks the warm-pool line:\n%s", out)
	}
	cells := map[string]string{}
	var header []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 4 && f[0] == "NODE" && f[1] == "GROUP" && header == nil:
			header = f
		case len(f) > 4 && header != nil && strings.HasPrefix(f[0], "cx-fsn1-") && cells[f[0]] == "":
			cells[f[0]] = strings.Join(f[3:5], " ")
		}
	}
	if len(header) < 5 || header[3] != "KIND" || header[4] != "FROM" {
		t.Fatalf("phase table header %q: want FROM after IMAGE KIND", header)
	}
	for node, want := range map[string]string{"cx-fsn1-pl00l": "warm pool", "cx-fsn1-ab3de": "create ", "cx-fsn1-old01": "? no"} {
		if got := cells[node]; !strings.HasPrefix(got+" ", want) {
			t.Errorf("FROM of %s = %q, want %q", node, got, want)
		}
	}

	var md bytes.Buffer
	if err := Write(&md, r, FormatMarkdown); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| NODE | GROUP | IMAGE KIND | FROM | PENDING→CA |") || !strings.Contains(md.String(), "| cx-fsn1-pl00l | cx-fsn1 | prebaked | warm pool |") {
		t.Errorf("markdown lacks the FROM column:\n%s", md.String())
	}
	var js bytes.Buffer
	if err := Write(&js, r, FormatJSON); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(js.String(), `"fromWarmPool": true`); n != 1 {
		t.Errorf("JSON has %d nodes fromWarmPool, want 1:\n%s", n, js.String())
	}
}

const metricsText = `# HELP prebake_instance_phase_seconds x
# TYPE prebake_instance_phase_seconds histogram
prebake_instance_phase_seconds_bucket{group="cx",image_kind="prebaked",phase="node_ready",le="10"} 0
prebake_instance_phase_seconds_bucket{group="cx",image_kind="prebaked",phase="node_ready",le="20"} 2
prebake_instance_phase_seconds_bucket{group="cx",image_kind="prebaked",phase="node_ready",le="40"} 4
prebake_instance_phase_seconds_bucket{group="cx",image_kind="prebaked",phase="node_ready",le="+Inf"} 4
prebake_instance_phase_seconds_sum{group="cx",image_kind="prebaked",phase="node_ready"} 100
prebake_instance_phase_seconds_count{group="cx",image_kind="prebaked",phase="node_ready"} 4
# HELP prebake_instances_requested_total x
# TYPE prebake_instances_requested_total counter
prebake_instances_requested_total{group="cx"} 5
# HELP prebake_instance_create_errors_total x
# TYPE prebake_instance_create_errors_total counter
prebake_instance_create_errors_total{class="OutOfResources",code="resource_unavailable",group="cx"} 1
`

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	m, err := ParseMetrics(strings.NewReader(metricsText), "http://127.0.0.1:8087/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if m.Requested != 5 || m.CreateErrors["OutOfResources"] != 1 || len(m.Phases) != 1 {
		t.Fatalf("metrics %+v", m)
	}
	// 4 samples: the median's rank 2 is the top of (10, 20]; p90's rank 3.6 lies 80% into (20, 40].
	if p := m.Phases[0]; p.P50S != 20 || p.P90S != 36 || p.Count != 4 {
		t.Errorf("phase %+v, want p50 20 s and p90 36 s", p)
	}
	if _, err := ParseMetrics(strings.NewReader("# TYPE go_goroutines gauge\ngo_goroutines 7\n"), "x"); err == nil || !strings.Contains(err.Error(), "prebake serve") {
		t.Errorf("metrics of another process: %v", err)
	}
}

// Read lists what Build needs; a list RBAC forbids fails naming the verb and the resource.
func TestReadAndRBACErrors(t *testing.T) {
	t.Parallel()
	in := scaleUp()
	var objs []runtime.Object
	for i := range in.Nodes {
		objs = append(objs, &in.Nodes[i])
	}
	for i := range in.Pods {
		objs = append(objs, &in.Pods[i])
	}
	for i := range in.Events {
		objs = append(objs, &in.Events[i])
	}
	client := fake.NewClientset(objs...)
	var progress bytes.Buffer
	got, err := Read(context.Background(), client, ReadOptions{Since: time.Hour, Now: func() time.Time { return in.Now }, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Nodes) != 2 || len(got.Events) < 3 || len(got.Pods) < 3 {
		t.Fatalf("read %d nodes, %d events, %d pods", len(got.Nodes), len(got.Events), len(got.Pods))
	}
	if r := Build(got); names(r) != "cx-fsn1-ab3de,cx-fsn1-vq7kp" || r.Nodes[0].Trigger.Pod != "shop/web-0" {
		t.Errorf("report from what Read listed: %s, trigger %+v", names(r), r.Nodes[0].Trigger)
	}
	if !strings.Contains(progress.String(), "prebake timeline: listing Nodes") || !strings.Contains(progress.String(), "ScaledUpGroup Events") {
		t.Errorf("progress:\n%s", progress.String())
	}

	for _, resource := range []string{"nodes", "events", "pods"} {
		c := fake.NewClientset(objs...)
		c.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New(`User "dev" cannot list resource "`+resource+`"`))
		})
		_, err := Read(context.Background(), c, ReadOptions{})
		var rbac *RBACError
		if !errors.As(err, &rbac) || rbac.Verb != "list" || rbac.Resource != resource || !strings.Contains(err.Error(), `the verb "list" on "`+resource+`"`) {
			t.Errorf("forbidden list of %s: %v; want an RBACError naming list and %s", resource, err, resource)
		}
	}
}
