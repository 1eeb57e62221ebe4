package deploy

import (
	"bytes"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/imagecatalog"
)

// TestOverlays renders every overlay and holds it to the policy, to the
// wiring between CA's cloud-config, the Service and the certificates, and
// to prebake serve being told CA's --expander (expanderMismatches).
func TestOverlays(t *testing.T) {
	t.Parallel()
	kc := kubectl(t)
	staged := stage(t)
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			objs := decode(t, render(t, kc, staged, name))
			got, err := violations(objs)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range got {
				t.Error(v)
			}
			if find(objs, "Deployment", "cluster-autoscaler") == nil {
				t.Error("no cluster-autoscaler Deployment")
			}
			checkCloudConfig(t, name, objs)
			checkNodeCreate(t, name, objs)
			mismatches, err := expanderMismatches(objs)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range mismatches {
				t.Error(m)
			}
		})
	}
}

// checkCloudConfig: CA dials a host the server certificate carries, and a
// Service or loopback answers there.
func checkCloudConfig(t *testing.T, overlay string, objs []*unstructured.Unstructured) {
	t.Helper()
	cm := find(objs, "ConfigMap", "cluster-autoscaler-cloud-config")
	if cm == nil {
		t.Fatal("no cluster-autoscaler-cloud-config ConfigMap")
	}
	raw, _, _ := unstructured.NestedString(cm.Object, "data", "cloud-config.yaml")
	var cc struct {
		Address     string `json:"address"`
		Cert        string `json:"cert"`
		Key         string `json:"key"`
		CACert      string `json:"cacert"`
		GRPCTimeout string `json:"grpc_timeout"`
	}
	if err := sigsyaml.UnmarshalStrict([]byte(raw), &cc); err != nil {
		t.Fatalf("cloud-config: %v", err)
	}
	host, _, err := net.SplitHostPort(cc.Address)
	if err != nil {
		t.Fatalf("cloud-config address %q: %v (CA needs host:port)", cc.Address, err)
	}
	if cc.GRPCTimeout == "" {
		t.Error("cloud-config sets no grpc_timeout")
	}
	if host == "127.0.0.1" {
		if find(objs, "Deployment", "prebake") != nil {
			t.Error("loopback address but prebake runs in its own Deployment")
		}
		return
	}
	if cc.Cert == "" || cc.Key == "" || cc.CACert == "" {
		t.Errorf("cloud-config dials %s without mTLS (cert, key, cacert)", host)
	}
	parts := strings.Split(host, ".")
	if len(parts) < 3 || parts[2] != "svc" || find(objs, "Service", parts[0]) == nil || find(objs, "Service", parts[0]).GetNamespace() != parts[1] {
		t.Errorf("cloud-config address %s is not the DNS name of a Service in the render", host)
	}
	if host != serviceDNSName {
		t.Errorf("cloud-config host %s; docs/deploy.md and the mtls-files steps issue the certificate for %s", host, serviceDNSName)
	}
	if crt := find(objs, "Certificate", "prebake-server"); crt != nil {
		names, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "dnsNames")
		if !slices.Contains(names, host) {
			t.Errorf("server Certificate dnsNames %v lack %s, the host CA dials", names, host)
		}
	}
}

// checkNodeCreate: only the kwok provider creates Node objects.
func checkNodeCreate(t *testing.T, overlay string, objs []*unstructured.Unstructured) {
	t.Helper()
	kwok := find(objs, "Namespace", "prebake-kwok") != nil
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" || !strings.HasPrefix(o.GetName(), "prebake") {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			res, _, _ := unstructured.NestedStringSlice(rm, "resources")
			verbs, _, _ := unstructured.NestedStringSlice(rm, "verbs")
			if slices.Contains(verbs, "*") || slices.Contains(res, "*") {
				t.Errorf("ClusterRole %s grants a wildcard: list the verbs the code calls", o.GetName())
			}
			if slices.Contains(res, "nodes") && slices.Contains(verbs, "create") && !kwok {
				t.Errorf("ClusterRole %s grants create on nodes outside the kwok provider", o.GetName())
			}
		}
	}
}

// TestPolicyCatchesBadManifests proves the policy can fail: each mutation of
// a compliant Deployment must produce exactly the expected violation.
func TestPolicyCatchesBadManifests(t *testing.T) {
	t.Parallel()
	good := `
apiVersion: apps/v1
kind: Deployment
metadata: {name: demo, namespace: kube-system}
spec:
  selector: {matchLabels: {app: demo}}
  template:
    metadata: {labels: {app: demo}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: prebake
          image: prebake
          resources: {requests: {cpu: 10m, memory: 10Mi}, limits: {cpu: 100m, memory: 100Mi}}
          securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
          volumeMounts: [{name: token, mountPath: /t}]
        - name: log-shipper
          image: shipper
          resources: {requests: {cpu: 10m, memory: 10Mi}, limits: {cpu: 100m, memory: 100Mi}}
          securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumes:
        - {name: token, secret: {secretName: hcloud-token}}
`
	for _, tc := range []struct {
		name   string
		mutate func(string) string
		want   []string
	}{
		{"compliant", func(s string) string { return s }, nil},
		{"runs as root", func(s string) string { return strings.Replace(s, "runAsUser: 65532", "runAsUser: 0", 1) },
			[]string{`container "prebake": runs as root`, `container "log-shipper": runs as root`}},
		{"no runAsNonRoot", func(s string) string { return strings.Replace(s, "runAsNonRoot: true, ", "", 1) },
			[]string{`container "prebake": runAsNonRoot is not true`, `container "log-shipper": runAsNonRoot is not true`}},
		{"no limits", func(s string) string {
			return strings.Replace(s, ", limits: {cpu: 100m, memory: 100Mi}}", "}", 1)
		}, []string{`container "prebake": no cpu limit`, `container "prebake": no memory limit`}},
		{"writable root filesystem", func(s string) string {
			return strings.Replace(s, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", 1)
		},
			[]string{`container "prebake": readOnlyRootFilesystem is not true`}},
		{"keeps capabilities", func(s string) string { return strings.Replace(s, "drop: [ALL]", "drop: [NET_RAW]", 1) },
			[]string{`container "prebake": capabilities do not drop ALL`}},
		{"no seccomp", func(s string) string { return strings.Replace(s, ", seccompProfile: {type: RuntimeDefault}", "", 1) },
			[]string{`container "prebake": no RuntimeDefault`, `container "log-shipper": no RuntimeDefault`}},
		{"token in a container that doesn't call the cloud", func(s string) string {
			return strings.Replace(s, "capabilities: {drop: [ALL]}}\n      volumes", "capabilities: {drop: [ALL]}}\n          volumeMounts: [{name: token, mountPath: /t}]\n      volumes", 1)
		}, []string{`container "log-shipper": reads Secret "hcloud-token", which only [prebake image-refresh] need`}},
		{"token from env in the wrong container", func(s string) string {
			return strings.Replace(s, "image: shipper", "image: shipper\n          env: [{name: T, valueFrom: {secretKeyRef: {name: hcloud-token, key: token}}}]", 1)
		}, []string{`container "log-shipper": reads Secret "hcloud-token"`}},
		{"unknown Secret", func(s string) string {
			return strings.Replace(s, "secretName: hcloud-token", "secretName: db-password", 1)
		},
			[]string{`container "prebake": reads Secret "db-password", which is not in secretConsumers`}},
		{"inlined token", func(s string) string {
			return s + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: hcloud-token, namespace: kube-system}\nstringData: {token: abc}\n"
		}, []string{`Secret kube-system/hcloud-token: a token Secret is inlined`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs, err := decodeObjects([]byte(tc.mutate(good)))
			if err != nil {
				t.Fatal(err)
			}
			got, err := violations(objs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("violations:\n  %s\nwant %d containing %q", strings.Join(got, "\n  "), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// TestProviderConfigsLoad: the configs the components ship pass prebake's
// own validation, and differ from the examples only where the cluster needs
// it.
func TestProviderConfigsLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ component, example string }{
		{"components/kwok/config.yaml", "../examples/kwok.yaml"},
		{"components/hcloud/config.yaml", "../examples/hcloud.yaml"},
		{"components/hcloud-bootstrap/config.yaml", "../examples/hcloud.yaml"},
		{"components/static/config.yaml", "../examples/static.yaml"},
	} {
		t.Run(tc.component, func(t *testing.T) {
			t.Parallel()
			got, err := config.Load(tc.component)
			if err != nil {
				t.Fatal(err)
			}
			want, err := config.Load(tc.example)
			if err != nil {
				t.Fatal(err)
			}
			if got.Providers.Hcloud != nil {
				if got.Providers.Hcloud.Token.File != "/var/run/secrets/hcloud/token" {
					t.Errorf("hcloud token = %+v, want the file of the mounted hcloud-token Secret", got.Providers.Hcloud.Token)
				}
				got.Providers.Hcloud.Token = want.Providers.Hcloud.Token
			}
			if (got.ImageCatalog.File == "") != (want.ImageCatalog.File == "") {
				t.Errorf("%s imageCatalog.file %q, the example's %q: groups with a channel would resolve differently", tc.component, got.ImageCatalog.File, want.ImageCatalog.File)
			}
			if want.ImageCatalog.File != "" {
				a, errA := os.ReadFile(got.ImageCatalog.File)
				b, errB := os.ReadFile(want.ImageCatalog.File)
				if errA != nil || errB != nil || !bytes.Equal(a, b) {
					t.Errorf("%s differs from %s (%v, %v): copy the example's catalog into the component", got.ImageCatalog.File, want.ImageCatalog.File, errA, errB)
				}
			}
			if strings.Contains(tc.component, "bootstrap") && (got.Bootstrap == nil || len(got.Bootstrap.Components) == 0) {
				t.Errorf("%s has no bootstrap block with components", tc.component)
			}
			// A userDataFile is shipped next to the component's config: the
			// same script as the example's, at another path.
			for i := range min(len(got.NodeGroups), len(want.NodeGroups)) {
				g, w := &got.NodeGroups[i], &want.NodeGroups[i]
				if g.UserDataFile == "" || w.UserDataFile == "" {
					continue
				}
				a, errA := os.ReadFile(g.UserDataFile)
				b, errB := os.ReadFile(w.UserDataFile)
				if errA != nil || errB != nil || !bytes.Equal(a, b) {
					t.Errorf("%s differs from %s (%v, %v): copy the example's script into the component", g.UserDataFile, w.UserDataFile, errA, errB)
				}
				g.UserDataFile = w.UserDataFile
			}
			if d := cmp.Diff(want.NodeGroups, got.NodeGroups); d != "" {
				t.Errorf("node groups drifted from %s (-example +component):\n%s", tc.example, d)
			}
		})
	}
}

// TestImageRefreshComponent: the CronJob's recipe loads with no userDataFile
// (the builder boots with bootstrap's builder user-data for the recipe's
// components, which bootstrap can render), and the CronJob runs refresh on
// the catalog ConfigMap its Role can write.
func TestImageRefreshComponent(t *testing.T) {
	t.Parallel()
	specs, err := imagecatalog.LoadRecipe("components/image-refresh/recipe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		if s.UserData != nil {
			t.Errorf("images[%d] has a userDataFile: the component ships bootstrap's builder, whose report prebake reads over SSH", i)
		}
		var comps []bootstrap.Component
		for _, c := range slices.Sorted(maps.Keys(s.Components)) {
			comps = append(comps, bootstrap.Component{Name: c, Version: s.Components[c]})
		}
		if _, err := bootstrap.RenderBuilder(bootstrap.BuilderInput{Provider: s.Provider, Components: comps}); err != nil {
			t.Errorf("images[%d]: bootstrap cannot render its builder: %v", i, err)
		}
	}
	kc := kubectl(t)
	objs := decode(t, render(t, kc, stage(t), "hcloud-image-refresh"))
	cj := find(objs, "CronJob", "prebake-image-refresh")
	if cj == nil {
		t.Fatal("no prebake-image-refresh CronJob")
	}
	args, _, _ := unstructured.NestedSlice(cj.Object, "spec", "jobTemplate", "spec", "template", "spec", "containers")
	c, _ := args[0].(map[string]any)
	got, _, _ := unstructured.NestedStringSlice(c, "args")
	for _, want := range []string{"images", "refresh", "--catalog=configmap://kube-system/prebake-images", "--recipe=/etc/prebake/recipe/recipe.yaml"} {
		if !slices.Contains(got, want) {
			t.Errorf("CronJob args %v lack %q", got, want)
		}
	}
	role := find(objs, "Role", "prebake-image-refresh")
	if role == nil {
		t.Fatal("no prebake-image-refresh Role")
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	var verbs []string
	for _, r := range rules {
		rm, _ := r.(map[string]any)
		vs, _, _ := unstructured.NestedStringSlice(rm, "verbs")
		verbs = append(verbs, vs...)
	}
	slices.Sort(verbs)
	if d := cmp.Diff([]string{"create", "get", "update"}, verbs); d != "" {
		t.Errorf("Role verbs (-want +got):\n%s", d)
	}
	checkImageRefreshCanary(t, objs, got)
}

// checkImageRefreshCanary: the CronJob promotes through prebake's own
// canary, on a group of the config it mounts, and may do exactly what the
// canary does: a join token for its server (the config has a bootstrap
// block to render its user-data), and list + delete of Nodes.
func checkImageRefreshCanary(t *testing.T, objs []*unstructured.Unstructured, args []string) {
	t.Helper()
	var group string
	for _, a := range args {
		if g, ok := strings.CutPrefix(a, "--canary-group="); ok {
			group = g
		}
		if strings.HasPrefix(a, "--canary-command") {
			t.Errorf("CronJob args %v: --canary-command next to the built-in canary", args)
		}
	}
	if group == "" {
		t.Fatalf("CronJob args %v lack --canary-group: nothing would ever be promoted", args)
	}
	cm := find(objs, "ConfigMap", "prebake-config")
	if cm == nil {
		t.Fatal("no prebake-config ConfigMap")
	}
	raw, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	path := t.TempDir() + "/config.yaml"
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("prebake-config: %v", err)
	}
	if cfg.Bootstrap == nil {
		t.Error("prebake-config has no bootstrap block: the canary's server would boot without user-data to join with")
	}
	var groups []string
	for _, g := range cfg.NodeGroups {
		groups = append(groups, g.ID)
	}
	if !slices.Contains(groups, group) {
		t.Errorf("--canary-group=%s is not a node group of prebake-config (%v)", group, groups)
	}
	rulesOf := func(kind, name string) map[string][]string {
		o := find(objs, kind, name)
		if o == nil {
			t.Fatalf("no %s %s", kind, name)
		}
		out := map[string][]string{}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			res, _, _ := unstructured.NestedStringSlice(rm, "resources")
			vs, _, _ := unstructured.NestedStringSlice(rm, "verbs")
			for _, x := range res {
				out[x] = append(out[x], vs...)
			}
		}
		return out
	}
	if d := cmp.Diff(map[string][]string{"nodes": {"list", "delete"}}, rulesOf("ClusterRole", "prebake-image-refresh-canary")); d != "" {
		t.Errorf("canary ClusterRole (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string][]string{"secrets": {"create", "list", "delete"}}, rulesOf("Role", "prebake-image-refresh-canary-tokens")); d != "" {
		t.Errorf("canary token Role (-want +got):\n%s", d)
	}
	for kind, name := range map[string]string{"ClusterRoleBinding": "prebake-image-refresh-canary", "RoleBinding": "prebake-image-refresh-canary-tokens"} {
		b := find(objs, kind, name)
		if b == nil {
			t.Errorf("no %s %s", kind, name)
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != "prebake-image-refresh" {
			t.Errorf("%s %s binds %v, want the prebake-image-refresh ServiceAccount only", kind, name, subjects)
		}
	}
}
