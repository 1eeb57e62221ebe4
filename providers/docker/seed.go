package docker

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

// cloud-init's NoCloud data source reads its seed from this directory; the
// provider writes it into the container before the container starts, so the
// first boot's cloud-init runs the request's user-data, as on a cloud.
const (
	SeedDir               = "/var/lib/cloud/seed/nocloud"
	seedUserDataPath      = SeedDir + "/user-data"
	seedMetaDataPath      = SeedDir + "/meta-data"
	seedNetworkConfigPath = SeedDir + "/network-config"
)

// seedNetworkConfig turns cloud-init's network configuration off: the engine
// configures the container's interface, and cloud-init's fallback (DHCP on
// eth0) would wait for a DHCP server that a Docker network does not have.
const seedNetworkConfig = "network:\n  config: disabled\n"

// KubeletCapacityPatch is the kubeadm patch (a JSON merge patch of the
// KubeletConfiguration, applied at kubeadm join with the rendered one) that
// reserves the host's CPUs and memory beyond the machine type's, so the
// node's allocatable is the machine type's (see docs/docker.md).
const KubeletCapacityPatch = bootstrap.KubeadmPatchesDir + "/kubeletconfigurationdockercapacity+merge.yaml"

// seedFile is one file of the seed archive.
type seedFile struct {
	path string // absolute, inside the container
	mode int64
	body []byte
}

// nocloudSeed is what cloud-init's NoCloud data source reads: the user-data
// as given (it may hold join secrets: it is written 0600 and never logged)
// and meta-data naming the instance and its hostname.
func nocloudSeed(name string, userData []byte) []seedFile {
	return nocloudSeedAs(name, name, userData)
}

// nocloudSeedAs is nocloudSeed with another instance-id. cloud-init runs its
// per-instance modules (write_files, runcmd) once per instance-id: at a boot
// whose seed names a new one, NoCloud's check_instance_id finds the cached
// instance stale and the user-data runs again (cloudinit/stages.py
// _restore_from_checked_cache, sources/DataSourceNoCloud.py). A resumed
// standby boots with one.
func nocloudSeedAs(name, instanceID string, userData []byte) []seedFile {
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", instanceID, name)
	return []seedFile{
		{seedMetaDataPath, 0o644, []byte(meta)},
		{seedUserDataPath, 0o600, userData},
		{seedNetworkConfigPath, 0o644, []byte(seedNetworkConfig)},
	}
}

// EvictionHardMemory is the kubelet's default hard eviction threshold for memory
// (memory.available<100Mi), which it takes from allocatable itself.
const EvictionHardMemory = 100 << 20

// kubeletPatch makes the kubelet's allocatable the template's: a kubelet in a container
// reports the host's CPUs and memory as its capacity, and allocatable is capacity less
// systemReserved, kubeReserved and the hard eviction threshold. So systemReserved holds
// back what the host has beyond the machine type, plus the config's kubeReserved (which
// the template takes from the machine type), less the eviction threshold the kubelet
// subtracts on its own. Then allocatable = machine type - kubeReserved, as in the template.
func kubeletPatch(host hostInfo, mt providers.MachineType, reserved providers.Reserved) seedFile {
	cpu := max(host.milliCPU-mt.MilliCPU+reserved.MilliCPU, 0)
	mem := max(host.memoryBytes-mt.MemoryBytes+reserved.MemoryBytes-EvictionHardMemory, 0)
	var b strings.Builder
	b.WriteString("# prebake docker provider: this kubelet reports the host's CPUs and memory as capacity;\n")
	b.WriteString("# systemReserved holds back the host beyond the machine type plus kubeReserved (less the\n")
	b.WriteString("# kubelet's own memory eviction threshold), so allocatable is the node group template's.\n")
	fmt.Fprintf(&b, "systemReserved:\n  cpu: %dm\n  memory: \"%d\"\n", cpu, mem)
	if mt.Pods > 0 {
		fmt.Fprintf(&b, "maxPods: %d\n", mt.Pods)
	}
	return seedFile{KubeletCapacityPatch, 0o644, []byte(b.String())}
}

// seedArchive is the tar that CopyToContainer unpacks at "/". It holds files
// only: the engine makes missing parent directories (0755, root), and an
// existing directory keeps its owner and mode.
func seedArchive(files []seedFile, now time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if !path.IsAbs(f.path) {
			return nil, fmt.Errorf("seed file %q: want an absolute path", f.path)
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(f.path, "/"), Mode: f.mode, Size: int64(len(f.body)),
			ModTime: now, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("seed file %s: %w", f.path, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("seed file %s: %w", f.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
