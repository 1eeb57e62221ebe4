package kubetest

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// JoinOptions makes a Hermetic cluster one that real nodes join with `kubeadm join`: the API
// server listens on Address (which nodes can reach) instead of loopback, bootstrap tokens
// authenticate, the kubelets' client certificates are signed and approved, each Node gets a
// podCIDR, and kubeadm itself uploads what join reads (cluster-info, kubeadm-config,
// kubelet-config, and their RBAC). Without JoinOptions nothing of this is on.
type JoinOptions struct {
	// Address is the IP address the API server binds and advertises, and that joining nodes
	// dial: for example the gateway of a Docker network the nodes are on. It must be an
	// address of this host. It goes into the serving certificate.
	Address string
	// Kubeadm is the kubeadm binary that uploads the cluster configuration
	// (NodeBinaries.Kubeadm, at KubernetesVersion).
	Kubeadm string
	// PodCIDR is the cluster's pod network, from which kube-controller-manager gives each
	// Node a /24 spec.podCIDR; "" means DefaultPodCIDR.
	PodCIDR string
}

// DefaultPodCIDR is JoinOptions.PodCIDR's default. kwok's fake pod IPs are in the same range;
// they are never routed, so they do not collide with real pods.
const DefaultPodCIDR = "10.244.0.0/16"

// nodeCIDRMaskSize is the size of each Node's podCIDR: 254 pod addresses.
const nodeCIDRMaskSize = 24

// serviceCIDR is the API server's --service-cluster-ip-range.
const serviceCIDR = "10.96.0.0/16"

func (j *JoinOptions) validate() error {
	ip := net.ParseIP(j.Address)
	if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return fmt.Errorf("JoinOptions.Address %q: want an IP address of this host that nodes reach, such as a Docker network's gateway (not loopback, not 0.0.0.0)", j.Address)
	}
	if err := checkExecutable(j.Kubeadm); err != nil {
		return fmt.Errorf("JoinOptions.Kubeadm: %w (BuildNodeBinaries makes it)", err)
	}
	if j.PodCIDR == "" {
		j.PodCIDR = DefaultPodCIDR
	}
	if _, n, err := net.ParseCIDR(j.PodCIDR); err != nil {
		return fmt.Errorf("JoinOptions.PodCIDR %q: %v", j.PodCIDR, err)
	} else if ones, _ := n.Mask.Size(); ones > nodeCIDRMaskSize-1 {
		return fmt.Errorf("JoinOptions.PodCIDR %q: want a network larger than one node's /%d, such as 10.244.0.0/16", j.PodCIDR, nodeCIDRMaskSize)
	}
	return nil
}

// listenHost is where the API server binds: loopback, or JoinOptions.Address.
func (h *Hermetic) listenHost() string {
	if h.opts.Join != nil {
		return h.opts.Join.Address
	}
	return "127.0.0.1"
}

// servingIPs are the extra IP SANs of the serving certificate.
func (h *Hermetic) extraServingIPs() []net.IP {
	if h.opts.Join == nil {
		return nil
	}
	return []net.IP{net.ParseIP(h.opts.Join.Address)}
}

// joinArgs are the flags Join adds to a component's.
func (h *Hermetic) joinArgs(component string) []string {
	switch component {
	case compAPIServer:
		return h.joinAPIServerArgs()
	case compKCM:
		return h.joinKCMArgs()
	}
	return nil
}

// joinAPIServerArgs: bootstrap tokens authenticate joining nodes; the Node authorizer and
// NodeRestriction let each kubelet manage its own Node (and only that), as on a kubeadm
// control plane.
func (h *Hermetic) joinAPIServerArgs() []string {
	if h.opts.Join == nil {
		return nil
	}
	return []string{
		"--enable-bootstrap-token-auth=true",
		// A list flag: this adds Node to the base RBAC (naming RBAC again is an error).
		"--authorization-mode=Node",
		"--enable-admission-plugins=NodeRestriction",
	}
}

// joinKCMArgs: bootstrapsigner signs cluster-info for each token (join's discovery checks
// it); tokencleaner deletes expired tokens; the default controllers include csrapproving and
// csrsigning, which approve and sign the kubelets' client certificates under kubeadm's RBAC;
// node CIDR allocation gives each Node its spec.podCIDR.
func (h *Hermetic) joinKCMArgs() []string {
	if h.opts.Join == nil {
		return nil
	}
	return []string{
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + h.opts.Join.PodCIDR,
		"--node-cidr-mask-size=" + strconv.Itoa(nodeCIDRMaskSize),
		"--service-cluster-ip-range=" + serviceCIDR,
	}
}

// APIServerEndpoint is host:port of the API server, as `kubeadm join` and bootstrap take it.
// Valid after Start.
func (h *Hermetic) APIServerEndpoint() (string, error) {
	cfg, err := h.RESTConfig()
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(cfg.Host, "https://"), nil
}

// CACertHash is the cluster CA's public key pin, "sha256:<hex>", as kubeadm join's
// --discovery-token-ca-cert-hash takes it. Valid after Start.
func (h *Hermetic) CACertHash() (string, error) {
	data, err := os.ReadFile(filepath.Join(h.dir, "pki", "ca.crt"))
	if err != nil {
		return "", fmt.Errorf("hermetic cluster: read CA (is the cluster started?): %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", errors.New("hermetic cluster: ca.crt holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("hermetic cluster: parse ca.crt: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// kubeadmConfig is what `kubeadm init phase` reads. The InitConfiguration's node fields are
// never used (there is no control-plane node); they are set so kubeadm detects nothing on
// this host. The kubelet configuration is kubeadm's default plus the systemd cgroup driver,
// which bootstrap configures containerd for, and the CA path a joined node has (kubeadm
// would default it to certificatesDir, a directory of this host).
const kubeadmConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %[1]s
  bindPort: %[2]s
nodeRegistration:
  name: hermetic-control-plane
  criSocket: unix:///run/containerd/containerd.sock
  taints: []
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: prebake-e2e
kubernetesVersion: %[3]s
controlPlaneEndpoint: %[1]s:%[2]s
certificatesDir: %[4]s
networking:
  dnsDomain: cluster.local
  podSubnet: %[5]s
  serviceSubnet: %[6]s
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
authentication:
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
`

// kubeadmPhases are run against the started cluster with the admin kubeconfig, in order.
var kubeadmPhases = [][]string{
	{"init", "phase", "upload-config", "kubeadm"},
	{"init", "phase", "upload-config", "kubelet"},
	{"init", "phase", "bootstrap-token", "--skip-token-print"},
}

const kubeadmTimeout = 2 * time.Minute

// setupJoin runs kubeadm's own init phases that make the cluster joinable, then deletes the
// bootstrap token kubeadm makes by default (nodes get their own, one each).
func (h *Hermetic) setupJoin(ctx context.Context, logf func(string, ...any)) error {
	j := h.opts.Join
	endpoint, err := h.APIServerEndpoint()
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return fmt.Errorf("hermetic cluster: API endpoint %q: %w", endpoint, err)
	}
	cfgPath := filepath.Join(h.dir, "kubeadm-config.yaml")
	cfg := fmt.Sprintf(kubeadmConfig, host, port, KubernetesVersion, filepath.Join(h.dir, "pki"), j.PodCIDR, serviceCIDR)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("hermetic cluster: %w", err)
	}
	logPath := filepath.Join(h.dir, "logs", "kubeadm.log")
	log, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("hermetic cluster: %w", err)
	}
	defer log.Close()
	for _, phase := range kubeadmPhases {
		pctx, cancel := context.WithTimeout(ctx, kubeadmTimeout)
		args := append(append([]string{}, phase...), "--config="+cfgPath, "--kubeconfig="+h.Kubeconfig())
		fmt.Fprintf(log, "$ kubeadm %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(pctx, j.Kubeadm, args...)
		cmd.Stdout, cmd.Stderr = log, log
		err := cmd.Run()
		cancel()
		if err != nil {
			tail, _ := tailFile(logPath, 30)
			return fmt.Errorf("kubeadm %s: %w\n%s", strings.Join(phase, " "), err, tail)
		}
	}
	cs, err := h.clientset()
	if err != nil {
		return err
	}
	secrets := cs.CoreV1().Secrets(metav1.NamespaceSystem)
	list, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("type", "bootstrap.kubernetes.io/token").String()})
	if err != nil {
		return fmt.Errorf("hermetic cluster: list bootstrap tokens: %w", err)
	}
	for _, s := range list.Items {
		if err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("hermetic cluster: delete kubeadm's default token %s: %w", s.Name, err)
		}
	}
	logf("joinable: kubeadm uploaded cluster-info, kubeadm-config and kubelet-config (log %s)", logPath)
	return nil
}
