package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// StatusReader reports what Cilium in a cluster says about its remote clusters. The
// executor polls it after writing a cluster, and counts the join as done only once every
// peer is ready (and, with KVStoreMesh, synced).
type StatusReader interface {
	MeshStatus(ctx context.Context, cluster string) (MeshStatus, error)
}

// RemoteStatus is one remote cluster as one Cilium component reports it: the fields of
// Cilium's models.RemoteCluster (api/v1/models/remote_cluster.go, v1.20.2) that a join
// depends on.
type RemoteStatus struct {
	Name      string `json:"name"`
	Ready     bool   `json:"ready"`
	Connected bool   `json:"connected"`
	Status    string `json:"status"`
	// Synced is what has been synchronised from the remote; nil when not reported.
	Synced *RemoteSynced `json:"synced"`
	// NumFailures counts the reconnections after a failure (a flapping remote).
	NumFailures int64 `json:"num-failures"`
}

// RemoteSynced is models.RemoteClusterSynced: the resource kinds synchronised so far.
type RemoteSynced struct {
	Nodes          bool  `json:"nodes"`
	Services       bool  `json:"services"`
	Identities     bool  `json:"identities"`
	Endpoints      bool  `json:"endpoints"`
	EndpointSlices *bool `json:"endpoint-slices"`
	ServiceExports *bool `json:"service-exports"`
}

// all reports whether every kind reported is synchronised.
func (s *RemoteSynced) all() bool {
	if s == nil {
		return false
	}
	opt := func(b *bool) bool { return b == nil || *b }
	return s.Nodes && s.Services && s.Identities && s.Endpoints && opt(s.EndpointSlices) && opt(s.ServiceExports)
}

// MeshStatus is what the components of one cluster report: each agent asked, and each
// KVStoreMesh asked (none when it was not asked).
type MeshStatus struct {
	Agents      [][]RemoteStatus
	KVStoreMesh [][]RemoteStatus
	// AgentPods and KVStoreMeshPods name the pod ("kube-system/cilium-x7k2p") that made
	// each report, when known (ExecStatus); Missing then names it instead of a number.
	AgentPods, KVStoreMeshPods []string
}

// Missing returns, for the peers a join needs, why each one is not there yet ("c3: not
// ready (status …)"), in peers' order; nil when the join is done. Every agent reported
// must list each peer ready; with kvstoremesh, at least one KVStoreMesh must have
// reported, and each must list each peer ready and synced.
func (s MeshStatus) Missing(peers []string, kvstoremesh bool) []string {
	var out []string
	if len(s.Agents) == 0 {
		return []string{"no agent status reported"}
	}
	if kvstoremesh && len(s.KVStoreMesh) == 0 {
		return []string{"no KVStoreMesh status reported (KVStoreMesh is enabled: the status command must print kvstoremesh-dbg status -o json too)"}
	}
	for _, p := range peers {
		why := ""
		for i, a := range s.Agents {
			if w := remoteProblem(a, p, false); w != "" {
				why = reporter("agent", s.AgentPods, i) + ": " + w
				break
			}
		}
		if why == "" && kvstoremesh {
			for i, k := range s.KVStoreMesh {
				if w := remoteProblem(k, p, true); w != "" {
					why = reporter("KVStoreMesh", s.KVStoreMeshPods, i) + ": " + w
					break
				}
			}
		}
		if why != "" {
			out = append(out, p+": "+why)
		}
	}
	return out
}

// reporter names the i-th report: "agent kube-system/cilium-x7k2p", or "agent 2" when its
// pod is not known.
func reporter(kind string, pods []string, i int) string {
	if i < len(pods) && pods[i] != "" {
		return kind + " " + pods[i]
	}
	return fmt.Sprintf("%s %d", kind, i+1)
}

func remoteProblem(rs []RemoteStatus, peer string, synced bool) string {
	i := slices.IndexFunc(rs, func(r RemoteStatus) bool { return r.Name == peer })
	switch {
	case i < 0:
		return "not configured yet"
	case !rs[i].Ready:
		return fmt.Sprintf("not ready (%s)", rs[i].Status)
	case synced && !rs[i].Synced.all():
		return "not synchronised yet"
	}
	return ""
}

// ParseMeshStatus reads a stream of JSON documents as Cilium prints them:
//   - an object with "cluster-mesh" is one agent's `cilium-dbg status -o json`
//     (models.StatusResponse);
//   - an array is one KVStoreMesh's `clustermesh-apiserver kvstoremesh-dbg status -o json`
//     ([]models.RemoteCluster).
//
// Anything else is an error naming the document.
func ParseMeshStatus(r io.Reader) (MeshStatus, error) {
	dec := json.NewDecoder(r)
	var s MeshStatus
	for n := 1; ; n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return MeshStatus{}, fmt.Errorf("document %d: %w", n, err)
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case len(raw) > 0 && raw[0] == '[':
			var rs []RemoteStatus
			if err := json.Unmarshal(raw, &rs); err != nil {
				return MeshStatus{}, fmt.Errorf("document %d (kvstoremesh-dbg status): %w", n, err)
			}
			s.KVStoreMesh = append(s.KVStoreMesh, rs)
		case len(raw) > 0 && raw[0] == '{':
			var agent struct {
				ClusterMesh *struct {
					Clusters []RemoteStatus `json:"clusters"`
				} `json:"cluster-mesh"`
			}
			if err := json.Unmarshal(raw, &agent); err != nil {
				return MeshStatus{}, fmt.Errorf("document %d (cilium-dbg status): %w", n, err)
			}
			if agent.ClusterMesh == nil {
				return MeshStatus{}, fmt.Errorf(`document %d: an object without "cluster-mesh": is Cluster Mesh enabled on the agent? (want cilium-dbg status -o json)`, n)
			}
			s.Agents = append(s.Agents, agent.ClusterMesh.Clusters)
		default:
			return MeshStatus{}, fmt.Errorf("document %d: want a JSON object (cilium-dbg status -o json) or array (kvstoremesh-dbg status -o json)", n)
		}
	}
	return s, nil
}

// StatusCommand is a StatusReader that runs a command per cluster and parses its output
// with ParseMeshStatus. The template is split on white space and run without a shell;
// {cluster} and {context} are replaced inside each argument (the context is the cluster's
// kubeconfig context, its name when unset). With Shell it runs under sh -c, and the
// placeholders become "$MESH_CLUSTER" and "$MESH_CONTEXT", set in the environment.
type StatusCommand struct {
	Template string
	Shell    bool
	Contexts map[string]string
}

var _ StatusReader = (*StatusCommand)(nil)

// Argv returns what MeshStatus runs for cluster.
func (c *StatusCommand) Argv(cluster string) ([]string, error) {
	if strings.TrimSpace(c.Template) == "" {
		return nil, errors.New("the status command template is empty (--status-command)")
	}
	if c.Shell {
		s := strings.ReplaceAll(c.Template, "{cluster}", `"$MESH_CLUSTER"`)
		return []string{"sh", "-c", strings.ReplaceAll(s, "{context}", `"$MESH_CONTEXT"`)}, nil
	}
	argv := strings.Fields(c.Template)
	for i, a := range argv {
		argv[i] = strings.ReplaceAll(strings.ReplaceAll(a, "{cluster}", cluster), "{context}", c.context(cluster))
	}
	return argv, nil
}

func (c *StatusCommand) context(cluster string) string {
	if s := c.Contexts[cluster]; s != "" {
		return s
	}
	return cluster
}

// MeshStatus runs the command for cluster and parses what it prints.
func (c *StatusCommand) MeshStatus(ctx context.Context, cluster string) (MeshStatus, error) {
	argv, err := c.Argv(cluster)
	if err != nil {
		return MeshStatus{}, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "MESH_CLUSTER="+cluster, "MESH_CONTEXT="+c.context(cluster))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return MeshStatus{}, fmt.Errorf("cluster %q: status command %s: %w%s", cluster, strings.Join(argv, " "), err, tail(stderr.String(), 5))
	}
	s, err := ParseMeshStatus(&stdout)
	if err != nil {
		return MeshStatus{}, fmt.Errorf("cluster %q: status command %s printed something else than Cilium's status JSON: %w", cluster, strings.Join(argv, " "), err)
	}
	return s, nil
}
