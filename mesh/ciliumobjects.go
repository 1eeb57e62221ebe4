package mesh

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The objects Cilium reads when the chart is installed with clustermesh.config.enabled=false
// ("you need to provide them yourself"). Names and formats follow the Cilium v1.20.2 chart:
// install/kubernetes/cilium/templates/clustermesh-config/{clustermesh-secret.yaml,
// kvstoremesh-secret.yaml,_helpers.tpl} and clustermesh-apiserver/users-configmap.yaml.
// mesh/ciliumcompat has Cilium's own ClusterMesh and etcd client read them.
const (
	// SecretClusterMesh is read by the agents: one key per peer, an etcd client config.
	SecretClusterMesh = "cilium-clustermesh"
	// SecretKVStoreMesh is read by the kvstoremesh sidecar of clustermesh-apiserver, which
	// mirrors every peer; the agents then only talk to their local clustermesh-apiserver.
	SecretKVStoreMesh = "cilium-kvstoremesh"
	// ConfigMapRemoteUsers lists the etcd users "remote-<peer>" the local
	// clustermesh-apiserver lets in (tls.authMode migration or cluster).
	ConfigMapRemoteUsers = "clustermesh-remote-users"
	// RemoteUsersKey is the ConfigMapRemoteUsers key.
	RemoteUsersKey = "users.yaml"

	// SecretCA is the CA every clustermesh certificate is signed with (certgen runs with
	// --ca-secret-name=cilium-ca --ca-reuse-secret). A shared CA is what lets a peer's
	// client certificate work against every clustermesh-apiserver.
	SecretCA = "cilium-ca"
	// SecretRemoteCert is the client certificate peers present; its ca.crt is the
	// fallback CA when cilium-ca is absent (what cilium-cli does).
	SecretRemoteCert = "clustermesh-apiserver-remote-cert"

	// DefaultCiliumNamespace is the chart's default namespace.
	DefaultCiliumNamespace = "kube-system"
	// DefaultMeshDomain is clustermesh.config.domain: peers given by IP are dialled as
	// <name>.<domain>, which the server certificate's SANs cover (*.mesh.cilium.io).
	DefaultMeshDomain = "mesh.cilium.io"
	// MaxObjectBytes is the API server's limit on a Secret's or ConfigMap's data.
	MaxObjectBytes = 1 << 20

	// clustermeshDir is where the agent and kvstoremesh mount the Secrets.
	clustermeshDir = "/var/lib/cilium/clustermesh/"
	// kvstoremeshPort is the port of the local clustermesh-apiserver's etcd.
	kvstoremeshPort = 2379
)

// MeshObjects is what one cluster is configured with: the data of its three objects.
type MeshObjects struct {
	// ClusterMesh is cilium-clustermesh's data, peer name → etcd config.
	ClusterMesh map[string]string
	// KVStoreMesh is cilium-kvstoremesh's data; nil when KVStoreMesh is off.
	KVStoreMesh map[string]string
	// RemoteUsers is clustermesh-remote-users' users.yaml.
	RemoteUsers string
}

// renderOptions are the chart values the rendering depends on.
type renderOptions struct {
	namespace   string
	domain      string
	kvstoremesh bool
}

// renderObjects renders cluster's objects for the given peers, in the chart's format with a
// shared CA (no per-peer tls blobs, so every peer uses the common- certificate files).
func renderObjects(o renderOptions, peers []Cluster) (MeshObjects, error) {
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(x, y Cluster) int { return Compare(x.Name, y.Name) })
	m := MeshObjects{ClusterMesh: make(map[string]string, len(peers))}
	if o.kvstoremesh {
		m.KVStoreMesh = make(map[string]string, len(peers))
	}
	var users strings.Builder
	users.WriteString("users:\n")
	for _, p := range peers {
		remote, err := remoteEtcdConfig(p, o.domain)
		if err != nil {
			return MeshObjects{}, fmt.Errorf("peer %s: %w", p.label(), err)
		}
		if o.kvstoremesh {
			// The agents dial the local clustermesh-apiserver, which kvstoremesh fills with
			// the peer's data; it authenticates with the local- certificate.
			m.ClusterMesh[p.Name] = localEtcdConfig(o.namespace)
			m.KVStoreMesh[p.Name] = remote
		} else {
			m.ClusterMesh[p.Name] = remote
		}
		fmt.Fprintf(&users, "- name: remote-%s\n  role: remote\n", p.Name)
	}
	m.RemoteUsers = users.String()
	return m, nil
}

// remoteEtcdConfig is the etcd client config that dials peer's clustermesh-apiserver.
func remoteEtcdConfig(peer Cluster, domain string) (string, error) {
	ep, err := peerEndpoint(peer)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("endpoints:\n")
	if len(ep.IPs) > 0 {
		fmt.Fprintf(&b, "- https://%s.%s:%d\n", peer.Name, domain, ep.Port)
	} else {
		fmt.Fprintf(&b, "- https://%s:%d\n", ep.Address, ep.Port)
	}
	b.WriteString("trusted-ca-file: " + clustermeshDir + "common-etcd-client-ca.crt\n")
	b.WriteString("key-file: " + clustermeshDir + "common-etcd-client.key\n")
	b.WriteString("cert-file: " + clustermeshDir + "common-etcd-client.crt\n")
	if len(ep.IPs) > 0 {
		// The server certificate covers *.<domain>, not the IP: dial the name and map it.
		fmt.Fprintf(&b, "cilium-host-aliases:\n- hostname: %s.%s\n  ips:\n", peer.Name, domain)
		for _, ip := range ep.IPs {
			fmt.Fprintf(&b, "    - %s\n", ip)
		}
	}
	return b.String(), nil
}

// localEtcdConfig is the agents' config for a peer when kvstoremesh mirrors it.
func localEtcdConfig(namespace string) string {
	return fmt.Sprintf("endpoints:\n- https://clustermesh-apiserver.%s.svc:%d\n"+
		"trusted-ca-file: %slocal-etcd-client-ca.crt\nkey-file: %slocal-etcd-client.key\ncert-file: %slocal-etcd-client.crt\n",
		namespace, kvstoremeshPort, clustermeshDir, clustermeshDir, clustermeshDir)
}

// isPeerConfig reports whether a cilium-clustermesh/cilium-kvstoremesh key holds a peer's
// etcd config rather than a per-peer certificate ("<name>.etcd-client.crt"); cilium-cli's
// status uses the same test.
func isPeerConfig(key string, value []byte) bool {
	return !strings.Contains(key, ".") && strings.Contains(string(value), "endpoints:")
}

// parseRemoteUsers returns the peer names of a users.yaml ("remote-<name>" users).
func parseRemoteUsers(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(line, "- name: remote-"); ok {
			out = append(out, strings.TrimSpace(name))
		}
	}
	return out
}

// dataSize is what the API server counts against MaxObjectBytes: the bytes of the values.
func dataSize(data map[string]string) int {
	n := 0
	for _, v := range data {
		n += len(v)
	}
	return n
}

// checkSizes refuses objects over limit and says how many peers would fit, from the
// largest per-peer entry of the object that overflows.
func (m MeshObjects) checkSizes(cluster string, peers, limit int) error {
	check := func(name string, size, perPeer int) error {
		if size <= limit {
			return nil
		}
		fit := 0
		if perPeer > 0 {
			fit = limit / perPeer
		}
		return fmt.Errorf("cluster %q: %s would hold %d bytes for %d peers, over the API server's %d-byte limit; about %d peers fit per cluster: split the mesh into partial meshes, or shorten the peer endpoints", cluster, name, size, peers, limit, fit)
	}
	largest := func(data map[string]string) int {
		n := 0
		for _, v := range data {
			n = max(n, len(v))
		}
		return n
	}
	perUser := 0
	if peers > 0 {
		perUser = (len(m.RemoteUsers) + peers - 1) / peers
	}
	return errors.Join(
		check("Secret "+SecretClusterMesh, dataSize(m.ClusterMesh), largest(m.ClusterMesh)),
		check("Secret "+SecretKVStoreMesh, dataSize(m.KVStoreMesh), largest(m.KVStoreMesh)),
		check("ConfigMap "+ConfigMapRemoteUsers, len(m.RemoteUsers), perUser),
	)
}
