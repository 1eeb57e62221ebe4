package docker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
	"github.com/prebake-dev/prebake/providers/providertest"
)

// TestConformance runs the providers' conformance suite against the real
// engine: each provider has its own cluster, network and base image (the
// sleeper: the suite needs no systemd), and the restart case reopens a
// second provider over the same engine with nothing shared in memory.
func TestConformance(t *testing.T) {
	c := requireEngine(t)
	base := sleeperImage(t, c)
	var opened sync.Map // providers.Provider → Options
	build := func(t *testing.T, o Options) providers.Provider {
		t.Helper()
		p := newTestProvider(t, o)
		opened.Store(providers.Provider(p), o)
		return p
	}
	fresh := func(t *testing.T) Options { return testOptions(t, base) }
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(t *testing.T) providers.Provider { return build(t, fresh(t)) },
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			o, ok := opened.Load(p)
			if !ok {
				t.Fatal("Reopen of a provider this test did not build")
			}
			q, err := New(o.(Options))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { q.Close() })
			return q
		},
		CreateErrors: []providertest.CreateErrorCase[*testing.T]{
			{
				Name: "zone full",
				New: func(t *testing.T) providers.Provider {
					o := fresh(t)
					o.Capacity = map[string]int{"zone-a": 0}
					return build(t, o)
				},
				Class: providers.ErrorOutOfResources,
			},
			{
				Name: "image missing",
				New: func(t *testing.T) providers.Provider {
					o := fresh(t)
					o.BaseImage = testPrefix + "no-such-image:" + runID
					return build(t, o)
				},
				Class: providers.ErrorOther,
			},
			{
				Name: "no init in the image",
				New: func(t *testing.T) providers.Provider {
					o := fresh(t)
					o.BaseImage = fmt.Sprintf("%simg-%s-%d:noinit", testPrefix, runID, clusterSeq.Add(1))
					importImage(t, c, o.BaseImage, []tarFile{{name: "etc/", mode: 0o755, dir: true}, {name: "etc/os-release", mode: 0o644, body: []byte("ID=none\n")}})
					return build(t, o)
				},
				Class: providers.ErrorOther,
			},
			{
				Name: "name taken by a foreign container",
				New: func(t *testing.T) providers.Provider {
					o := fresh(t)
					foreignContainer(t, c, base, o.NamePrefix+"conf-e1")
					return build(t, o)
				},
				Class: providers.ErrorOther,
			},
			{
				Name: "machine type larger than the host",
				New: func(t *testing.T) providers.Provider {
					o := fresh(t)
					huge := testMachineType
					huge.MilliCPU = 4096 * 1000
					o.MachineTypes = []providers.MachineType{huge}
					return build(t, o)
				},
				Class: providers.ErrorOther,
			},
			{
				Name: "engine answers 500",
				New: func(t *testing.T) providers.Provider {
					o := fresh(t)
					o.Host = failingEngine(t, http.MethodPost, "/containers/create")
					return build(t, o)
				},
				Class: providers.ErrorOther, Retryable: true,
			},
			{
				Name: "engine unreachable",
				New: func(t *testing.T) providers.Provider {
					o := fresh(t)
					o.Host = "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")
					return build(t, o)
				},
				Class: providers.ErrorOther, Retryable: true,
			},
		},
		Cluster:     "", // set per provider; the suite's requests carry none
		MachineType: testMachineType.Name,
		Location:    "zone-a",
	})
}

// foreignContainer makes a container named name that no cluster owns, and
// removes it when t ends.
func foreignContainer(t *testing.T, c *client.Client, img, name string) {
	t.Helper()
	ctx := context.Background()
	_, err := c.ContainerCreate(ctx, &container.Config{Image: img, Entrypoint: []string{baseimage.InitPath}, Labels: map[string]string{labelTest: "foreign"}}, nil, nil, nil, name)
	if err != nil {
		t.Fatalf("create the foreign container %s: %v", name, err)
	}
	t.Cleanup(func() {
		// The provider's cleanup may have removed it already: its name
		// starts with the cluster's prefix.
		if err := c.ContainerRemove(context.Background(), name, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove the foreign container %s: %v", name, err)
		}
	})
}

// failingEngine is a proxy on loopback in front of the real engine that
// answers method path (after the API version prefix) with a 500, and
// passes everything else through. It returns its address for Options.Host.
func failingEngine(t *testing.T, method, path string) string {
	t.Helper()
	sock := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		u, err := url.Parse(h)
		if err != nil || u.Scheme != "unix" {
			t.Skipf("the failing-engine proxy needs a unix-socket engine; DOCKER_HOST is %q", h)
		}
		sock = u.Path
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == method && strings.HasSuffix(r.URL.Path, path) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"message":"injected by the test: the engine failed"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "tcp://" + ln.Addr().String()
}
