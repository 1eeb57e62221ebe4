package bootstrap

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestParseNodeAnnotation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		want        NodeReport
		ranInstall  bool
		wantErr     string
	}{
		{
			name:  "prebaked",
			value: "prebaked=true total=2100ms manifest=3ms/ok plan=20ms/ok install=0ms/skipped configure=40ms/ok kubelet=5ms/ok join=2000ms/ok",
			want: NodeReport{Prebaked: true, TotalMs: 2100, Phases: []Phase{
				{Name: "manifest", Ms: 3, Result: "ok"}, {Name: "plan", Ms: 20, Result: "ok"}, {Name: "install", Ms: 0, Result: "skipped"},
				{Name: "configure", Ms: 40, Result: "ok"}, {Name: "kubelet", Ms: 5, Result: "ok"}, {Name: "join", Ms: 2000, Result: "ok"},
			}},
		},
		{
			name:  "with the script's start",
			value: "prebaked=false total=84210ms start=1764669601123 manifest=4ms/ok install=80012ms/ok join=3880ms/ok",
			want: NodeReport{TotalMs: 84210, Start: time.UnixMilli(1764669601123).UTC(), Phases: []Phase{
				{Name: "manifest", Ms: 4, Result: "ok"}, {Name: "install", Ms: 80012, Result: "ok"}, {Name: "join", Ms: 3880, Result: "ok"},
			}},
			ranInstall: true,
		},
		{
			name:       "prebaked image that installed",
			value:      "prebaked=true total=90000ms install=88000ms/ok",
			want:       NodeReport{Prebaked: true, TotalMs: 90000, Phases: []Phase{{Name: "install", Ms: 88000, Result: "ok"}}},
			ranInstall: true,
		},
		{
			name:       "runtime install",
			value:      "prebaked=false total=5ms install=4ms/ok",
			want:       NodeReport{TotalMs: 5, Phases: []Phase{{Name: "install", Ms: 4, Result: "ok"}}},
			ranInstall: true,
		},
		{
			name:  "missing container images",
			value: "prebaked=true total=9100ms start=1764669601123 manifest=3ms/ok images=31ms/missing join=9000ms/ok missing-images=registry.k8s.io/pause:3.10,r.example:5000/app@sha256:0a",
			want: NodeReport{Prebaked: true, TotalMs: 9100, Start: time.UnixMilli(1764669601123).UTC(), Phases: []Phase{
				{Name: "manifest", Ms: 3, Result: "ok"}, {Name: "images", Ms: 31, Result: "missing"}, {Name: "join", Ms: 9000, Result: "ok"},
			}, MissingImages: []string{"registry.k8s.io/pause:3.10", "r.example:5000/app@sha256:0a"}},
		},
		{name: "empty missing images", value: "prebaked=true total=1ms images=1ms/missing missing-images=", wantErr: "want missing-images=REF,REF"},
		{name: "empty missing image", value: "prebaked=true total=1ms images=1ms/missing missing-images=a/b:1,", wantErr: "want missing-images=REF,REF"},
		{name: "empty", value: "", wantErr: "want \"prebaked="},
		{name: "bad flag", value: "prebaked=maybe total=1ms", wantErr: "prebaked=true or prebaked=false"},
		{name: "no total", value: "prebaked=true install=1ms/ok", wantErr: "want total=MSms"},
		{name: "bad phase", value: "prebaked=true total=1ms install", wantErr: "want PHASE=MSms/RESULT"},
		{name: "bad ms", value: "prebaked=true total=1ms install=xms/ok", wantErr: "not a duration"},
		{name: "bad start", value: "prebaked=true total=1ms start=yesterday install=1ms/ok", wantErr: "want start=UNIXMS"},
		{name: "start out of place", value: "prebaked=true total=1ms install=1ms/ok start=1764669601123", wantErr: "want PHASE=MSms/RESULT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseNodeAnnotation(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseNodeAnnotation(%q) = %+v, %v; want an error containing %q", tc.value, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
			if got.RanInstall() != tc.ranInstall {
				t.Errorf("RanInstall() = %v, want %v", got.RanInstall(), tc.ranInstall)
			}
		})
	}
}

// The script writes the annotation under the key ParseNodeAnnotation's callers read.
func TestNodeScriptSetsNodeAnnotation(t *testing.T) {
	t.Parallel()
	if !strings.Contains(nodeScript, `"`+NodeAnnotation+`=$value"`) || !strings.Contains(nodeScript, `value="prebaked=$PREBAKED total=$(($(now_ms) - START_ALL))ms start=$START_ALL$SUMMARY"`) {
		t.Errorf("node.sh no longer annotates %s=\"prebaked=... total=...ms start=... PHASE=...\"; update ParseNodeAnnotation with it", NodeAnnotation)
	}
	if !strings.Contains(nodeScript, `value="$value `+missingImagesWord+`$(`) {
		t.Errorf("node.sh no longer ends the annotation with %sREF,...; update ParseNodeAnnotation with it", missingImagesWord)
	}
}

func TestTokensForNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := fake.NewClientset()
	ts := Tokens{Client: client}
	a1, err := ts.CreateForNode(ctx, "g-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.CreateForNode(ctx, "g-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Create(ctx, "prebake node g-a"); err != nil { // unlabelled: not found by node
		t.Fatal(err)
	}
	long := strings.Repeat("n", 70)
	if _, err := ts.CreateForNode(ctx, long); err != nil {
		t.Fatalf("a node name too long for a label still gets a token: %v", err)
	}
	sec, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, tokenSecretPrefix+a1.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Labels[NodeLabel] != "g-a" || sec.Labels[ManagedByLabel] != ManagedByValue || string(sec.Data["description"]) != "prebake node g-a" {
		t.Errorf("token Secret labels %v, description %q", sec.Labels, sec.Data["description"])
	}
	n, err := ts.DeleteForNode(ctx, "g-a")
	if err != nil || n != 1 {
		t.Fatalf("DeleteForNode(g-a) = %d, %v; want 1", n, err)
	}
	if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, tokenSecretPrefix+a1.ID, metav1.GetOptions{}); err == nil {
		t.Error("g-a's token is still there")
	}
	if n, err := ts.DeleteForNode(ctx, "g-a"); err != nil || n != 0 {
		t.Errorf("DeleteForNode(g-a) again = %d, %v; want 0, nil", n, err)
	}
	if n, err := ts.DeleteForNode(ctx, long); err != nil || n != 0 {
		t.Errorf("DeleteForNode(long) = %d, %v; want 0, nil", n, err)
	}
	l, _ := client.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if len(l.Items) != 3 {
		t.Errorf("%d token Secrets left, want 3 (g-b's, the unlabelled one and the long name's)", len(l.Items))
	}
}
