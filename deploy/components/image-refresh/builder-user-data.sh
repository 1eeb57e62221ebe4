#!/bin/sh
# Runtime-install user-data for the image builder, used verbatim until the
# bootstrap package renders it. It installs the recipe's pinned packages,
# bakes the kernel settings, disables unattended-upgrades and cleans the
# image. Keep the pins in step with recipe.yaml: the build checks the
# versions the builder observes against the recipe.
#
# NOT SHIPPED YET: the report step. A build waits for the builder to label
# its own server with its report (prebake.dev/report=done plus the
# prebake.dev/pkg-*, sysctl-*, module-*, unattended-upgrades and hygiene-*
# labels; docs/images.md, "The builder's report"). Hetzner has no metadata
# a server can write without an API token, and prebake does not hand the
# builder one yet, so with this script a build times out and publishes
# nothing. The tests play the builder with a fake agent.
set -eu
export DEBIAN_FRONTEND=noninteractive
systemctl disable --now unattended-upgrades.service apt-daily.timer apt-daily-upgrade.timer || true
systemctl mask unattended-upgrades.service apt-daily.service apt-daily-upgrade.service
install -d -m 0755 /etc/apt/keyrings
curl -fsSL https://pkgs.k8s.io/core:/stable:/v1.34/deb/Release.key | gpg --dearmor -o /etc/apt/keyrings/kubernetes.gpg
echo 'deb [signed-by=/etc/apt/keyrings/kubernetes.gpg] https://pkgs.k8s.io/core:/stable:/v1.34/deb/ /' > /etc/apt/sources.list.d/kubernetes.list
apt-get update
apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=300 \
  kubelet=1.34.2-1.1 kubeadm=1.34.2-1.1 kubectl=1.34.2-1.1 kubernetes-cni=1.7.1-1.1 cri-tools=1.34.0-1.1 \
  containerd=1.7.28-0ubuntu1~24.04.1 runc=1.3.3-0ubuntu1~24.04.2 wireguard=1.0.20210914-1ubuntu4 \
  conntrack=1:1.4.8-1ubuntu1 socat=1.8.0.0-4build3 ebtables=2.0.11-6build1 ethtool=1:6.7-1build1 \
  iptables=1.8.10-3ubuntu2 open-iscsi=2.1.9-3ubuntu5 nfs-common=1:2.6.4-3ubuntu5
apt-mark hold kubelet kubeadm kubectl
printf 'br_netfilter\noverlay\nwireguard\n' > /etc/modules-load.d/prebake.conf
printf 'net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n' > /etc/sysctl.d/90-prebake.conf
# Hygiene: what every node must not share.
apt-get clean
rm -rf /var/lib/apt/lists/*
rm -f /etc/ssh/ssh_host_*
truncate -s 0 /etc/machine-id
cloud-init clean --logs
# (report step: see the note at the top)
