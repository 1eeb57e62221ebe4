// Package bootstrap renders a node's cloud-init user-data and manages the kubeadm join
// tokens it carries. One renderer serves every provider (kwok, hcloud, gce, static) and both
// boot paths: on a prebaked image the script finds everything installed and goes straight to
// join; on a vanilla image it installs what is missing first (docs/bootstrap.md).
//
// API:
//   - Render(Input) (UserData, error): UserData.CloudConfig is "#cloud-config" whose
//     write_files puts the node script at ScriptPath (0700) and whose runcmd runs it;
//     UserData.Script is the same script standalone, for `sh -s` over SSH.
//   - RenderIgnition(IgnitionInput) (IgnitionConfig, error): the same Input for a Flatcar or
//     Fedora CoreOS node, as an Ignition config (spec 3.4.0, coreos/ignition/v2's types,
//     checked with its validation before it is returned). kubelet and kubeadm come from the
//     Kubernetes sysext (sysext-bakery's format): baked into the image (Prebaked), or
//     downloaded by Ignition with its sha256 checked (verification.hash) and linked into
//     /etc/extensions. The prebake-join unit runs join.sh (ignition.sh after a generated
//     prelude): it checks the merged sysext's version, the node address (below), joins and
//     writes the same status file as the cloud-init script. Static machines can't take it.
//   - Input.Network {Mode: cilium-wireguard, NodeAddress: public}: both scripts run phase
//     address (netcheck.sh) before join: the provider's public IPv4 (Hetzner metadata, GCE
//     metadata, PREBAKE_PUBLIC_IPV4 or the default route on static) must be on an interface
//     and globally routable; then KUBELET_EXTRA_ARGS=--node-ip=<it> goes to the kubelet's
//     env file. A failed check fails the run before join, its reason in the status file.
//   - Tokens{Client}.Create makes one join token per node (Secret kube-system/bootstrap-token-<id>,
//     TTL ≤ MaxTokenTTL, labelled ManagedByLabel=prebake); Tokens.CleanupExpired deletes the
//     expired ones it made and no others; Tokens.Delete revokes one after its node joined.
//     Tokens.CreateForNode labels the token NodeLabel=<node>, so DeleteForNode can revoke
//     every token of a node that is gone (the image canary does).
//   - NodeScript(cloudConfig) reads the node script back out of a rendered cloud-config, for
//     a provider that runs it over SSH on a resumed warm-pool standby (ResumeBySSH, whose
//     StandbyStatusCommand and StandbyJoinCommand are what it runs).
//   - ParseStatus reads the status file the script writes (DefaultStatusPath);
//     ParseNodeAnnotation reads its summary on the Node (NodeAnnotation).
//   - RenderBuilder(BuilderInput) (UserData, error): an image builder's user-data. The same
//     prelude and node.sh's functions, then builder.sh: runcmd runs its steps install (no
//     join), cleanup (host keys, machine-id, cloud-init state, apt caches, logs) and report,
//     which observes the image and writes BuildReport (imagecatalog.Report's JSON) to
//     BuildReportPath. It holds no secret. ParseBuildReport reads that file. Its images
//     phase pulls BuilderInput.Images into containerd's k8s.io namespace, names each also
//     as the CRI would (name@digest), and records each digest in the manifest.
//
// The script (node.sh after a generated prelude), in order: reads ManifestPath if present;
// plans (an apt component is present when dpkg has exactly its version, a binary when the
// manifest names its version or its sha256 matches); installs only what is missing, after
// masking apt's timers and unattended-upgrades and waiting for the dpkg lock at most
// Options.DpkgLockWait (apt pinned with --no-install-recommends, then held; binaries with a
// sha256 check), then records what it installed in the manifest; writes sysctls, modules and
// the containerd config and applies each only when its file changed; checks that the
// container images the manifest lists are in containerd's k8s.io namespace (a missing one
// is reported in the status file and the annotation, never a failure); writes the kubeadm
// JoinConfiguration (labels, taints) and a kubelet configuration patch with the providerID;
// runs kubeadm join; writes each phase's duration to the status file and, once joined,
// annotates the Node (prebake.dev/bootstrap, best effort).
//
// Invariants:
//   - The join token appears only in UserData (and the rendered files on the node, mode
//     0600/0700). Errors and String methods never contain it; nothing here logs.
//   - Every value in the script is single-quoted by shQuote; every YAML document is made by
//     a YAML encoder. Inputs are validated first, so labels, taints and versions that would
//     change a file's meaning (a comma in a label value, a range as a version) are errors.
//   - A second run of the script changes nothing but the status file.
//   - The package imports no other prebake package; Manifest and BuildReport repeat
//     imagecatalog.Manifest's and imagecatalog.Report's JSON shapes.
//   - The builder's report observes (dpkg-query, --version, sha256, the files, ctr images
//     ls): the requested
//     versions only say where to look, never what is reported.
package bootstrap
