package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// stubCtr is a stateful stand-in for containerd's ctr: images pull and images tag add a name
// to the namespace's image list ($CTR_STATE), images ls prints it as ctr does (REF TYPE
// DIGEST ...; -q: the names only), and every call is logged to $CTR_LOG. An image is held
// under the digest it is pinned to, else under the sha256 of its name. With $CTR_DOWN set,
// containerd does not answer.
const stubCtr = `#!/bin/sh
[ -z "${CTR_DOWN:-}" ] || { echo "ctr: failed to dial \"/run/containerd/containerd.sock\": connection refused" >&2; exit 1; }
echo "$*" >>"$CTR_LOG"
[ "$1" = -n ] && [ "$2" = k8s.io ] || { echo "ctr: unexpected namespace: $*" >&2; exit 2; }
shift 2
case "$1 $2" in
"images pull")
	for ref; do :; done
	echo "$ref" >>"$CTR_STATE"
	;;
"images tag")
	[ "$3" = --force ] || { echo "ctr: tag without --force" >&2; exit 2; }
	echo "$5" >>"$CTR_STATE"
	;;
"images ls")
	touch "$CTR_STATE"
	if [ "${3:-}" = -q ]; then cat "$CTR_STATE"; exit 0; fi
	echo "REF TYPE DIGEST SIZE PLATFORMS LABELS"
	while read -r r; do
		case "$r" in
		*@*) d=${r##*@} ;;
		*) d=sha256:$(printf '%s' "$r" | sha256sum | cut -d' ' -f1) ;;
		esac
		echo "$r application/vnd.oci.image.index.v1+json $d 1.2 MiB linux/amd64 -"
	done <"$CTR_STATE"
	;;
*) echo "ctr: unexpected command: $*" >&2; exit 2 ;;
esac
`

func writeExecutable(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func nameDigest(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestBuilderBakesItsImagesAndTheNodeChecksThem runs the builder's images and record phases
// and its report's observation against a stub ctr, then a node's manifest and images phases
// and its annotation on the manifest the builder wrote: each image is pulled, named as the
// CRI names it, and recorded with its digest in the manifest and the report; a node finds
// them all, reports one that went missing (never failing), and skips the check when
// containerd does not answer.
func TestBuilderBakesItsImagesAndTheNodeChecksThem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stubs := filepath.Join(dir, "stubs")
	writeExecutable(t, filepath.Join(stubs, "ctr"), stubCtr)
	writeExecutable(t, filepath.Join(stubs, "kubectl"), "#!/bin/sh\nfor a; do last=$a; done\nprintf '%s' \"$last\" >\"$KUBECTL_ANNOTATION\"\n")
	state, log := filepath.Join(dir, "ctr-state"), filepath.Join(dir, "ctr-log")
	manifest := filepath.Join(dir, "etc", "prebake", "manifest.json")
	env := func(extra ...string) []string {
		return append(os.Environ(), append([]string{"CTR_STATE=" + state, "CTR_LOG=" + log}, extra...)...)
	}

	pause := "172.18.0.1:5000/prebake/pause:1"
	pinDigest := "sha256:" + strings.Repeat("c", 64)
	app := "172.18.0.1:5000/team/app:1.2@" + pinDigest
	in := BuilderInput{Provider: "docker", Components: []Component{{Name: "containerd", Version: "1.6.20~ds1-1+b1"}},
		Images: []string{pause, app}}
	ud, err := RenderBuilder(in)
	if err != nil {
		t.Fatal(err)
	}
	builder, _, ok := strings.Cut(string(ud.Script), "\ntrap - EXIT\ncase ")
	if !ok {
		t.Fatal("builder script has no step dispatch")
	}
	observed := filepath.Join(dir, "observed.json")
	builder += "\nPATH=" + shQuote(stubs) + ":$PATH\nMANIFEST=" + shQuote(manifest) +
		"\ntrap - EXIT\nPHASE=images\nbuilder_phase_images\necho \"$P_DETAIL\"\nbuilder_phase_record\nprintf '{%s}' \"$(observe_images)\" >" + shQuote(observed) + "\n"
	cmd := exec.Command("sh", "-c", builder)
	cmd.Env = env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("builder images phase: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "2 images in containerd namespace k8s.io") {
		t.Errorf("images phase detail: %s", out)
	}
	gotLog, _ := os.ReadFile(log)
	wantLog := "-n k8s.io images pull --hosts-dir /etc/containerd/certs.d " + pause + "\n" +
		"-n k8s.io images ls\n" +
		"-n k8s.io images tag --force " + pause + " 172.18.0.1:5000/prebake/pause@" + nameDigest(pause) + "\n" +
		"-n k8s.io images pull --hosts-dir /etc/containerd/certs.d " + app + "\n" +
		"-n k8s.io images ls\n" +
		"-n k8s.io images tag --force " + app + " 172.18.0.1:5000/team/app@" + pinDigest + "\n" +
		"-n k8s.io images tag --force " + app + " 172.18.0.1:5000/team/app:1.2\n" +
		"-n k8s.io images ls\n-n k8s.io images ls\n" // the report's observation
	if d := cmp.Diff(wantLog, string(gotLog)); d != "" {
		t.Errorf("ctr calls (-want +got):\n%s", d)
	}
	wantImages := map[string]string{pause: nameDigest(pause), app: pinDigest}
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if d := cmp.Diff(wantImages, m.ContainerImages); d != "" {
		t.Errorf("manifest's container images (-want +got):\n%s", d)
	}
	var obs map[string]string
	if data, err := os.ReadFile(observed); err != nil || json.Unmarshal(data, &obs) != nil {
		t.Fatalf("observed images %s: %v", data, err)
	}
	if d := cmp.Diff(wantImages, obs); d != "" {
		t.Errorf("report's container images (-want +got):\n%s", d)
	}

	// A node booted from the image.
	kubeletConf := filepath.Join(dir, "kubelet.conf")
	writeExecutable(t, kubeletConf, "")
	node := func(t *testing.T, extra ...string) (Status, NodeReport) {
		t.Helper()
		nd, err := Render(validInput("hcloud"))
		if err != nil {
			t.Fatal(err)
		}
		script, ok := strings.CutSuffix(string(nd.Script), nodeMain)
		if !ok {
			t.Fatal("script does not end with node.sh's main call")
		}
		sub := t.TempDir()
		status, annotation := filepath.Join(sub, "status.json"), filepath.Join(sub, "annotation")
		script += "\nPATH=" + shQuote(stubs) + ":$PATH\nPREBAKE_STATUS=" + shQuote(status) + "\nMANIFEST=" + shQuote(manifest) +
			"\nKUBELET_CONF=" + shQuote(kubeletConf) + "\nrun_phase manifest phase_manifest\nrun_phase images phase_images\nRESULT=ok\nwrite_status\nannotate_node\n"
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = env(append(extra, "KUBECTL_ANNOTATION="+annotation)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("node phases: %v\n%s", err, out)
		}
		data, err := os.ReadFile(status)
		if err != nil {
			t.Fatal(err)
		}
		st, err := ParseStatus(data)
		if err != nil {
			t.Fatal(err)
		}
		value, err := os.ReadFile(annotation)
		if err != nil {
			t.Fatal(err)
		}
		name, v, _ := strings.Cut(string(value), "=")
		if name != NodeAnnotation {
			t.Fatalf("annotated %s, want %s", name, NodeAnnotation)
		}
		r, err := ParseNodeAnnotation(v)
		if err != nil {
			t.Fatal(err)
		}
		return st, r
	}
	phaseOf := func(t *testing.T, st Status, r NodeReport) Phase {
		t.Helper()
		p, ok := st.Phase("images")
		ap, aok := r.Phase("images")
		if !ok || !aok || ap.Result != p.Result {
			t.Fatalf("images phase: status %+v, annotation %+v", st.Phases, r.Phases)
		}
		return p
	}

	t.Run("all present", func(t *testing.T) {
		st, r := node(t)
		p := phaseOf(t, st, r)
		if p.Result != "ok" || p.Detail != "2 container images present in containerd namespace k8s.io" || len(st.MissingImages) != 0 || r.MissingImages != nil {
			t.Errorf("images phase %+v, missing %v / %v; want ok with none missing", p, st.MissingImages, r.MissingImages)
		}
		if mp, _ := st.Phase("manifest"); !strings.Contains(mp.Detail, "2 container images in") {
			t.Errorf("manifest phase detail %q does not count the container images", mp.Detail)
		}
	})
	t.Run("one gone", func(t *testing.T) {
		// The kubelet's image GC removed the pinned image (every name of it).
		data, _ := os.ReadFile(state)
		var left []string
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if !strings.Contains(l, "/team/app") {
				left = append(left, l)
			}
		}
		if err := os.WriteFile(state, []byte(strings.Join(left, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, r := node(t)
		p := phaseOf(t, st, r)
		if p.Result != "missing" || !strings.Contains(p.Detail, "1 of 2 container images missing") || !strings.Contains(p.Detail, app) {
			t.Errorf("images phase %+v; want missing naming %s", p, app)
		}
		if !cmp.Equal(st.MissingImages, []string{app}) || !cmp.Equal(r.MissingImages, []string{app}) {
			t.Errorf("missing images: status %v, annotation %v; want [%s]", st.MissingImages, r.MissingImages, app)
		}
		if st.Result != "ok" || st.Error != "" {
			t.Errorf("status %s %q: a missing image must not fail the node", st.Result, st.Error)
		}
	})
	t.Run("containerd down", func(t *testing.T) {
		st, r := node(t, "CTR_DOWN=1", "PREBAKE_IMAGES_TRIES=1")
		p := phaseOf(t, st, r)
		if p.Result != "skipped" || !strings.Contains(p.Detail, "connection refused") || len(st.MissingImages) != 0 || r.MissingImages != nil {
			t.Errorf("images phase %+v, missing %v; want skipped saying why", p, st.MissingImages)
		}
	})
	if !strings.Contains(nodeScript, "\trun_phase configure phase_configure\n\tif [ -n \"$MANIFEST_IMAGES\" ]; then run_phase images phase_images; fi\n") {
		t.Error("node.sh's main does not run the images phase after configure when the manifest lists images")
	}
}

// A manifest written without container images (a recipe without containerImages, or a
// vanilla node's runtime install) is valid JSON, and says no images.
func TestManifestWithoutImagesIsValidJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	manifest := filepath.Join(dir, "etc", "prebake", "manifest.json")
	ud, err := RenderBuilder(BuilderInput{Provider: "docker", Components: []Component{{Name: "containerd", Version: "1.6.20~ds1-1+b1"}}})
	if err != nil {
		t.Fatal(err)
	}
	builder, _, ok := strings.Cut(string(ud.Script), "\ntrap - EXIT\ncase ")
	if !ok {
		t.Fatal("builder script has no step dispatch")
	}
	builder += "\nMANIFEST=" + shQuote(manifest) + "\ntrap - EXIT\nPHASE=record\nbuilder_phase_record\n"
	if out, err := exec.Command("sh", "-c", builder).CombinedOutput(); err != nil {
		t.Fatalf("builder record phase: %v\n%s", err, out)
	}
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if len(m.ContainerImages) != 0 || m.Components["containerd"] != "1.6.20~ds1-1+b1" {
		t.Errorf("manifest %+v: want containerd and no container images", m)
	}
}
