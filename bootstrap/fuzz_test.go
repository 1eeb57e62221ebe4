package bootstrap

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// FuzzRender feeds odd labels, taints, names and ids to Render. Whatever it accepts must
// come out intact: the cloud-config parses as YAML with the script as content, the script
// passes sh -n, the shell sees each generated value exactly, and the JoinConfiguration
// parses back to the labels and taints that went in.
func FuzzRender(f *testing.F) {
	f.Add("tier", "batch", "dedicated", "gpu", "NoSchedule", "node-1", "hcloud://1", "1.6.20~ds1-1+b1")
	f.Add("a.b/c", "x_y-z.1", "k", "", "NoExecute", "n.example", "gce://p/z/n 'quoted' $(x) `y`", "1:2.3")
	f.Add("x", "it's", "k", "v\n: x", "PreferNoSchedule", "a", "static://h\"#x", "v1.35.4")
	f.Add("prebake.dev/group", "true", "null", "~", "NoSchedule", "yes", "kwok://no", "0")
	f.Fuzz(func(t *testing.T, lk, lv, tk, tv, effect, node, providerID, version string) {
		in := validInput("hcloud")
		in.Labels = map[string]string{lk: lv}
		in.Taints = []Taint{{Key: tk, Value: tv, Effect: effect}}
		in.NodeName = node
		in.ProviderID = providerID
		in.Components[0].Version = version
		ud, err := Render(in)
		if err != nil {
			if strings.Contains(err.Error(), testToken) {
				t.Fatalf("error holds the token: %v", err)
			}
			return
		}
		var cc cloudConfig
		if err := yaml.Unmarshal(ud.CloudConfig, &cc); err != nil {
			t.Fatalf("cloud-config does not parse: %v", err)
		}
		if len(cc.WriteFiles) != 1 || cc.WriteFiles[0].Content != string(ud.Script) {
			t.Fatalf("cloud-config does not carry the script intact")
		}
		shN(t, ud.Script)

		valid, _ := in.validate()
		files, err := kubeletFiles(valid)
		if err != nil {
			t.Fatal(err)
		}
		got := generated(t, ud.Script, "prebake_kubelet_files")
		if len(got) != 8 || got[3] != files[0].content || got[7] != files[1].content {
			t.Fatalf("the shell does not see the kubelet files Go rendered")
		}
		var jc joinConfiguration
		if err := yaml.Unmarshal([]byte(got[3]), &jc); err != nil {
			t.Fatalf("JoinConfiguration does not parse: %v", err)
		}
		if jc.NodeRegistration.Name != node || jc.Discovery.BootstrapToken.Token != testToken {
			t.Errorf("JoinConfiguration name %q token ok %v", jc.NodeRegistration.Name, jc.Discovery.BootstrapToken.Token == testToken)
		}
		wantTaints := []taint{{Key: tk, Value: tv, Effect: effect}}
		if diff := cmp.Diff(wantTaints, jc.NodeRegistration.Taints); diff != "" {
			t.Errorf("taints (-want +got):\n%s", diff)
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(jc.NodeRegistration.KubeletExtraArgs[0].Value, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = v
		}
		if !maps.Equal(labels, in.Labels) {
			t.Errorf("node-labels %v, want %v", labels, in.Labels)
		}
		var patch map[string]string
		if err := yaml.Unmarshal([]byte(got[7]), &patch); err != nil || patch["providerID"] != providerID {
			t.Errorf("kubelet patch %q does not give back providerID %q (%v)", got[7], providerID, err)
		}
		comps := generated(t, ud.Script, "prebake_components")
		if !slices.Contains(comps, version) {
			t.Errorf("the shell does not see version %q in %q", version, comps)
		}
	})
}
