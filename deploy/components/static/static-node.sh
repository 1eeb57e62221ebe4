#!/bin/sh
# Node script for examples/static.yaml, piped to `sh -s` as root on each
# claimed machine. It must be idempotent: a retried scale-up runs it again.
# Until the bootstrap renderer writes this script per scale-up, fill in a
# join command of your cluster (kubeadm token create --print-join-command)
# and keep this file as secret as the token in it.
set -eu
: "${PREBAKE_JOIN:=kubeadm join API_ENDPOINT:6443 --token TOKEN --discovery-token-ca-cert-hash sha256:HASH}"
if [ -f /etc/kubernetes/kubelet.conf ]; then
	echo "already joined"
	exit 0
fi
# The provider runs this script with PREBAKE_PROVIDER_ID=static://<host>:
# the kubelet must register with it, so the Node matches the claim.
mkdir -p /etc/default
# PREBAKE_NODE_LABELS holds the machine's own labels (k=v,k=v), maybe none.
echo "KUBELET_EXTRA_ARGS=--provider-id=$PREBAKE_PROVIDER_ID${PREBAKE_NODE_LABELS:+ --node-labels=$PREBAKE_NODE_LABELS}" >/etc/default/kubelet
$PREBAKE_JOIN
