package deploy

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// expanderMismatches holds a render to the rule that every container
// running `prebake serve` is told cluster-autoscaler's --expander as
// --ca-expander: then a config that can't serve CA's expanders (price
// needs a price for every group) stops prebake at start in every shipped
// shape, instead of leaving a CA that never scales up. It returns one line
// per breach.
func expanderMismatches(objs []*unstructured.Unstructured) ([]string, error) {
	type container struct {
		where string
		c     corev1.Container
	}
	var ca, serve []container
	for _, o := range objs {
		p, ok := podSpecPaths[o.GetKind()]
		if !ok {
			continue
		}
		where := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		raw, found, err := unstructured.NestedMap(o.Object, p...)
		if err != nil || !found {
			return nil, fmt.Errorf("%s: no pod spec at %s: %v", where, strings.Join(p, "."), err)
		}
		var spec corev1.PodSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
			return nil, fmt.Errorf("%s: pod spec: %w", where, err)
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			w := fmt.Sprintf("%s container %q", where, c.Name)
			switch {
			case c.Name == "cluster-autoscaler":
				ca = append(ca, container{w, c})
			case runsServe(c):
				serve = append(serve, container{w, c})
			}
		}
	}
	if len(ca) != 1 {
		return []string{fmt.Sprintf("%d cluster-autoscaler containers, want 1", len(ca))}, nil
	}
	want, ok := flagValue(ca[0].c, "--expander")
	if !ok {
		return []string{ca[0].where + ": no --expander"}, nil
	}
	if len(serve) == 0 {
		return []string{"no container runs prebake serve"}, nil
	}
	var out []string
	for _, s := range serve {
		got, ok := flagValue(s.c, "--ca-expander")
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s runs prebake serve without --ca-expander; add --ca-expander=%s (%s's --expander)", s.where, want, ca[0].where))
		case got != want:
			out = append(out, fmt.Sprintf("%s: --ca-expander=%s, but %s runs --expander=%s", s.where, got, ca[0].where, want))
		}
	}
	return out, nil
}

// runsServe says whether c runs `prebake serve`: a prebake image whose
// first word after the binary is serve.
func runsServe(c corev1.Container) bool {
	if !strings.Contains(path.Base(c.Image), "prebake") {
		return false
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		if strings.HasPrefix(a, "-") || path.Base(a) == "prebake" {
			continue
		}
		return a == "serve"
	}
	return false
}

// flagValue is the value of flag in c's command and args, in either of
// the forms Go's flag packages take: --flag=value or --flag value.
func flagValue(c corev1.Container, flag string) (string, bool) {
	args := append(slices.Clone(c.Command), c.Args...)
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// TestExpanderRuleCanFail: each breach of the rule, on a render shaped like
// the sidecar overlay (CA and prebake in one pod) plus a standalone
// prebake, gives exactly the expected line.
func TestExpanderRuleCanFail(t *testing.T) {
	t.Parallel()
	const good = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: cluster-autoscaler, namespace: kube-system}
spec:
  template:
    spec:
      containers:
        - name: cluster-autoscaler
          image: registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1
          command: [./cluster-autoscaler, --cloud-provider=externalgrpc, "--expander=price,least-waste"]
        - name: prebake
          image: ghcr.io/prebake-dev/prebake:latest
          args: [serve, --listen=127.0.0.1:8086, "--ca-expander=price,least-waste"]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: prebake, namespace: kube-system}
spec:
  template:
    spec:
      containers:
        - name: prebake
          image: prebake
          command: [/prebake]
          args: [serve, --ca-expander, "price,least-waste"]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: prebake-image-refresh, namespace: kube-system}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers:
            - name: image-refresh
              image: prebake
              args: [images, refresh]
`
	for _, tc := range []struct {
		name   string
		mutate func(string) string
		want   []string
	}{
		{"compliant", func(s string) string { return s }, nil},
		{"sidecar not told", func(s string) string {
			return strings.Replace(s, `, "--ca-expander=price,least-waste"]`, "]", 1)
		}, []string{`Deployment kube-system/cluster-autoscaler container "prebake" runs prebake serve without --ca-expander; add --ca-expander=price,least-waste`}},
		{"told another chain", func(s string) string {
			return strings.Replace(s, `--ca-expander, "price,least-waste"`, `--ca-expander, least-waste`, 1)
		}, []string{`Deployment kube-system/prebake container "prebake": --ca-expander=least-waste, but Deployment kube-system/cluster-autoscaler container "cluster-autoscaler" runs --expander=price,least-waste`}},
		{"CA changed alone", func(s string) string {
			return strings.Replace(s, `"--expander=price,least-waste"]`, "--expander=least-waste]", 1)
		}, []string{`container "prebake": --ca-expander=price,least-waste, but`, `container "prebake": --ca-expander=price,least-waste, but`}},
		{"CA without --expander", func(s string) string { return strings.Replace(s, `, "--expander=price,least-waste"]`, "]", 1) },
			[]string{`container "cluster-autoscaler": no --expander`}},
		{"no serve at all", func(s string) string { return strings.ReplaceAll(s, "[serve, ", "[version, ") },
			[]string{"no container runs prebake serve"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs, err := decodeObjects([]byte(tc.mutate(good)))
			if err != nil {
				t.Fatal(err)
			}
			got, err := expanderMismatches(objs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("mismatches:\n  %s\nwant %d containing %q", strings.Join(got, "\n  "), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("mismatch %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
