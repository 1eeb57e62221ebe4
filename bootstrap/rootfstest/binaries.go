package rootfstest

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/internal/tb"
)

// nodeBinaries is built once per test binary: BuildNodeBinaries reuses its on-disk cache,
// but checking that still costs a stat of every file and a log line.
var nodeBinaries struct {
	sync.Mutex
	bins kubetest.NodeBinaries
	err  error
	done bool
}

// NodeBinaryComponents builds (once, cached under ~/.cache/prebake) kubelet and kubeadm at
// kubetest.KubernetesVersion and the CNI plugins at kubetest.CNIPluginsVersion, serves them
// from 127.0.0.1, and returns them as binary components: kubelet and kubeadm at /usr/bin,
// each plugin as cni-<name> at /opt/cni/bin/<name>, each with its sha256.
func NodeBinaryComponents(t tb.TB) []bootstrap.Component {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		MissingPrereq(t, "the go command is not on PATH (needed to build kubelet and kubeadm)")
	}
	nodeBinaries.Lock()
	if !nodeBinaries.done {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		nodeBinaries.bins, nodeBinaries.err = kubetest.BuildNodeBinaries(ctx, kubetest.BuildOptions{Out: testWriter{t}})
		cancel()
		nodeBinaries.done = true
	}
	bins, err := nodeBinaries.bins, nodeBinaries.err
	nodeBinaries.Unlock()
	if err != nil {
		t.Fatalf("build kubelet and kubeadm: %v", err)
	}
	var out []bootstrap.Component
	add := func(name, version, src, dst string) {
		out = append(out, bootstrap.Component{Name: name, Version: version, URL: src, SHA256: FileSHA256(t, src), Path: dst})
	}
	add("kubelet", kubetest.KubernetesVersion, bins.Kubelet, "/usr/bin/kubelet")
	add("kubeadm", kubetest.KubernetesVersion, bins.Kubeadm, "/usr/bin/kubeadm")
	for _, p := range slices.Sorted(maps.Keys(bins.CNIPlugins)) {
		add("cni-"+p, kubetest.CNIPluginsVersion, bins.CNIPlugins[p], "/opt/cni/bin/"+p)
	}
	return Serve(t, out)
}

// Serve serves each binary component's URL, which holds a local file path on the way in,
// from a loopback HTTP server at /<name>, and returns the components with their URLs
// pointing there. The server stops when the test ends.
func Serve(t tb.TB, comps []bootstrap.Component) []bootstrap.Component {
	t.Helper()
	files := map[string]string{} // URL path → local file
	out := slices.Clone(comps)
	for _, c := range out {
		if c.URL != "" {
			files["/"+c.Name] = c.URL
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, p)
	}))
	t.Cleanup(srv.Close)
	for i := range out {
		if out[i].URL != "" {
			out[i].URL = srv.URL + "/" + out[i].Name
		}
	}
	return out
}

type testWriter struct{ t tb.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
