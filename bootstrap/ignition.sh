# --- the join script of an Ignition node (Flatcar, Fedora CoreOS) --------------------------
# Ignition has written every file before this runs: the kubeadm JoinConfiguration and the
# kubelet patch, the kernel settings (applied by systemd at boot), and on the runtime path the
# Kubernetes sysext, downloaded and checked against its sha256 by Ignition itself. The
# prebake-join unit runs this once per boot until the node has joined. Phases: sysext (the
# merged sysext has the wanted version), address (only with a network mode), join. The
# status file has the cloud-init script's format (bootstrap.Status), so the plugin reads both
# alike. The unit sets PATH.
set -eu
umask 022
LC_ALL=C
export LC_ALL

PHASE=start
PHASES=""
SUMMARY=""
RESULT=running
ERROR=""
INSTALLED=""
PRESENT=""
P_RESULT=ok
P_DETAIL=""
P_START=0

now_ms() { date +%s%3N; }
START_ALL=$(now_ms)

json_str() {
	printf '"%s"' "$(printf '%s' "$1" | tr '\n\t\r' '   ' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')"
}
json_words() {
	jw=""
	for w in $1; do jw="$jw${jw:+,}\"$w\""; done
	printf '[%s]' "$jw"
}

write_status() {
	mkdir -p "$(dirname "$PREBAKE_STATUS")"
	{
		printf '{"version":1,"provider":%s,"node":%s,"result":"%s","prebaked":%s,' \
			"$(json_str "$PREBAKE_PROVIDER")" "$(json_str "$PREBAKE_NODE")" "$RESULT" "$PREBAKE_PREBAKED"
		printf '"installed":%s,"alreadyPresent":%s,"totalMs":%s,"phases":[%s],"error":%s}\n' \
			"$(json_words "$INSTALLED")" "$(json_words "$PRESENT")" "$(($(now_ms) - START_ALL))" \
			"$PHASES" "$(json_str "$ERROR")"
	} >"$PREBAKE_STATUS.tmp"
	mv -f "$PREBAKE_STATUS.tmp" "$PREBAKE_STATUS"
}

end_phase() {
	p_ms=$(($(now_ms) - P_START))
	PHASES="$PHASES${PHASES:+,}{\"name\":\"$PHASE\",\"ms\":$p_ms,\"result\":\"$1\",\"detail\":$(json_str "$P_DETAIL")}"
	SUMMARY="$SUMMARY $PHASE=${p_ms}ms/$1"
}

fail() {
	ERROR="$PHASE: $*"
	RESULT=failed
	end_phase failed
	write_status
	echo "prebake-join: $ERROR" >&2
	exit 1
}

on_exit() {
	rc=$?
	if [ "$RESULT" = running ]; then
		ERROR="$PHASE: exited with status $rc (see the journal of prebake-join.service)"
		RESULT=failed
		end_phase failed
		write_status
	fi
}
trap on_exit EXIT

run_phase() {
	PHASE=$1
	P_START=$(now_ms)
	P_RESULT=ok
	P_DETAIL=""
	"$2"
	end_phase "$P_RESULT"
	write_status
}

# --- phase sysext: the Kubernetes sysext is merged at the wanted version -------------------
# systemd-sysext merged /etc/extensions/kubernetes.raw into /usr before this unit started;
# kubeadm and the kubelet say which release they are.
phase_sysext() {
	link=$(readlink -f "$PREBAKE_SYSEXT_LINK" 2>/dev/null || true)
	have=$(kubeadm version -o short 2>/dev/null || true)
	kubelet_have=$(kubelet --version 2>/dev/null | awk '{ print $2 }' || true)
	if [ "$have" != "$PREBAKE_SYSEXT_VERSION" ] || [ "$kubelet_have" != "$PREBAKE_SYSEXT_VERSION" ]; then
		where="the image carries it (prebaked)"
		if [ "$PREBAKE_PREBAKED" != true ]; then where="Ignition downloaded it to $PREBAKE_SYSEXT_PATH"; fi
		fail "kubeadm is '${have:-missing}' and the kubelet '${kubelet_have:-missing}', want $PREBAKE_SYSEXT_VERSION from the Kubernetes sysext ($where; $PREBAKE_SYSEXT_LINK points to '${link:-nothing}'): see 'systemd-sysext status'; an image whose catalog manifest names another version is a bad image, roll its channel back"
	fi
	if [ "$PREBAKE_PREBAKED" = true ]; then PRESENT="kubernetes-sysext"; else INSTALLED="kubernetes-sysext"; fi
	P_DETAIL="kubernetes sysext $have merged from ${link:-$PREBAKE_SYSEXT_LINK}"
}

# --- phase join ----------------------------------------------------------------------------
phase_join() {
	if [ "$PREBAKE_SKIP_JOIN" = 1 ]; then
		P_RESULT=skipped
		P_DETAIL="join skipped (test mode)"
		return 0
	fi
	if [ -f /etc/kubernetes/kubelet.conf ]; then
		P_RESULT=skipped
		P_DETAIL="already joined: /etc/kubernetes/kubelet.conf exists"
		return 0
	fi
	kubeadm join --config "$PREBAKE_JOIN_CONFIG" ||
		fail "kubeadm join $PREBAKE_ENDPOINT failed (see the journal of prebake-join.service); a join token expires after its TTL, so a new scale-up renders a new one"
}

# Once joined, the kubelet's own credentials annotate its Node, as the cloud-init script does.
annotate_node() {
	if [ "$PREBAKE_SKIP_JOIN" = 1 ] || ! command -v kubectl >/dev/null 2>&1 || [ ! -f /etc/kubernetes/kubelet.conf ]; then
		return 0
	fi
	value="prebaked=$PREBAKE_PREBAKED total=$(($(now_ms) - START_ALL))ms$SUMMARY"
	i=0
	while [ $i -lt 30 ]; do
		if kubectl --kubeconfig /etc/kubernetes/kubelet.conf annotate --overwrite node "$PREBAKE_NODE" \
			"prebake.dev/bootstrap=$value" >/dev/null 2>&1; then
			return 0
		fi
		i=$((i + 1))
		sleep 2
	done
	echo "prebake-join: could not annotate node $PREBAKE_NODE; the status is in $PREBAKE_STATUS" >&2
}

prebake_join_main() {
	run_phase sysext phase_sysext
	if [ -n "$PREBAKE_NODE_ADDRESS" ]; then run_phase address phase_address; fi
	run_phase join phase_join
	PHASE=done
	RESULT=ok
	write_status
	annotate_node
}
prebake_join_main </dev/null
