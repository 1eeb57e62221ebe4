# --- the node script: everything below is the same for every node -------------------------
# It runs as root under /bin/sh (dash on Debian), from cloud-init's runcmd or piped to `sh -s`.
# Each phase is timed and reported in $PREBAKE_STATUS. A second run changes nothing: files
# are only rewritten when their content differs, host commands only run when a file they
# apply changed, and apt only runs when a component is missing or at another version.
set -eu
umask 022
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LC_ALL=C
DEBIAN_FRONTEND=noninteractive
export PATH LC_ALL DEBIAN_FRONTEND

MANIFEST=/etc/prebake/manifest.json
RECORD=/var/lib/prebake/recorded-host-commands
DPKG_LOCK=/var/lib/dpkg/lock-frontend
PROC_SYS=/proc/sys
KUBELET_CLIENT_CERT=/var/lib/kubelet/pki/kubelet-client-current.pem
KUBELET_CONF=/etc/kubernetes/kubelet.conf

PHASE=start
PHASES=""
SUMMARY=""
RESULT=running
ERROR=""
INSTALLED=""
PRESENT=""
PREBAKED=false
MANIFEST_COMPONENTS=""
MANIFEST_IMAGES=""
MISSING_IMAGES=""
MANIFEST_UU=false
UU_DISABLED=false
TODO=""
APT_ARGS=""
APT_PKGS=""
CHANGED=""
CHANGED_FILES=""
P_RESULT=ok
P_DETAIL=""
P_START=0

now_ms() { date +%s%3N; }
START_ALL=$(now_ms)

# json_str quotes $1 as a JSON string. Values are our own messages and validated names, so
# escaping backslash, quote and control characters is enough.
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
			"$(json_str "$PREBAKE_PROVIDER")" "$(json_str "$PREBAKE_NODE")" "$RESULT" "$PREBAKED"
		printf '"installed":%s,"alreadyPresent":%s,"totalMs":%s,"phases":[%s],"error":%s,"missingImages":%s}\n' \
			"$(json_words "$INSTALLED")" "$(json_words "$PRESENT")" "$(($(now_ms) - START_ALL))" \
			"$PHASES" "$(json_str "$ERROR")" "$(json_words "$MISSING_IMAGES")"
	} >"$PREBAKE_STATUS.tmp"
	mv -f "$PREBAKE_STATUS.tmp" "$PREBAKE_STATUS"
}

end_phase() {
	p_ms=$(($(now_ms) - P_START))
	PHASES="$PHASES${PHASES:+,}{\"name\":\"$PHASE\",\"ms\":$p_ms,\"result\":\"$1\",\"detail\":$(json_str "$P_DETAIL")}"
	SUMMARY="$SUMMARY $PHASE=${p_ms}ms/$1"
}

# fail ends the run: the status file names the phase and the error, and so does stderr.
fail() {
	ERROR="$PHASE: $*"
	RESULT=failed
	end_phase failed
	write_status
	echo "prebake-bootstrap: $ERROR" >&2
	if [ "$PREBAKE_STANDBY" = 1 ]; then standby_report || true; fi
	exit 1
}

# A command that fails under set -e ends the script without passing through fail; this
# still leaves a status file that says so.
on_exit() {
	rc=$?
	if [ "$RESULT" = running ]; then
		ERROR="$PHASE: exited with status $rc (see the output above)"
		RESULT=failed
		end_phase failed
		write_status
		if [ "$PREBAKE_STANDBY" = 1 ]; then standby_report || true; fi
	fi
}
trap on_exit EXIT

run_phase() {
	PHASE=$1
	P_START=$(now_ms)
	P_RESULT=ok
	P_DETAIL=""
	CHANGED_FILES=""
	"$2"
	end_phase "$P_RESULT"
	write_status
}

# host runs a command that changes the running kernel or services (sysctl, modprobe,
# systemctl). Under PREBAKE_RECORD=1 it only records it: a chroot shares the host's kernel.
host() {
	if [ "$PREBAKE_RECORD" = 1 ]; then
		mkdir -p "$(dirname "$RECORD")"
		printf '%s\n' "$*" >>"$RECORD"
		return 0
	fi
	if ! command -v "$1" >/dev/null 2>&1; then
		echo "prebake-bootstrap: $1 is not installed; skipping: $*" >&2
		return 0
	fi
	"$@"
}

# put_file PATH MODE ACTION CONTENT writes CONTENT when the file differs, and then adds
# ACTION to $CHANGED so the host command that applies it runs once.
put_file() {
	if [ -f "$1" ] && [ "$(stat -c %a "$1")" = "${2#0}" ] && [ "$(cat "$1"; printf x)" = "${4}x" ]; then
		return 0
	fi
	mkdir -p "$(dirname "$1")"
	printf '%s' "$4" >"$1.prebake-tmp"
	chmod "$2" "$1.prebake-tmp"
	mv -f "$1.prebake-tmp" "$1"
	if [ "$3" != none ]; then CHANGED="$CHANGED $3"; fi
	CHANGED_FILES="$CHANGED_FILES $1"
}

changed() {
	case " $CHANGED " in *" $1 "*) return 0 ;; esac
	return 1
}

manifest_version() {
	printf '%s\n' "$MANIFEST_COMPONENTS" | awk -F= -v n="$1" '$1 == n { print substr($0, length(n) + 2); exit }'
}

# --- phase 1: read the image manifest -------------------------------------------------------
# The manifest is imagecatalog.Manifest as JSON; names, versions, image references and
# digests never hold quotes, commas or braces, so sed can take the "components" and
# "containerImages" objects apart.
phase_manifest() {
	if [ ! -r "$MANIFEST" ]; then
		P_DETAIL="no manifest: runtime install"
		return 0
	fi
	PREBAKED=true
	flat=$(tr -d '\n\r' <"$MANIFEST")
	MANIFEST_COMPONENTS=$(printf '%s' "$flat" |
		sed -n 's/.*"components"[[:space:]]*:[[:space:]]*{\([^}]*\)}.*/\1/p' | tr ',' '\n' |
		sed -n 's/^[[:space:]]*"\([^"]*\)"[[:space:]]*:[[:space:]]*"\([^"]*\)"[[:space:]]*$/\1=\2/p')
	# One "REF DIGEST" line per container image the builder pulled.
	MANIFEST_IMAGES=$(printf '%s' "$flat" |
		sed -n 's/.*"containerImages"[[:space:]]*:[[:space:]]*{\([^}]*\)}.*/\1/p' | tr ',' '\n' |
		sed -n 's/^[[:space:]]*"\([^"]*\)"[[:space:]]*:[[:space:]]*"\([^"]*\)"[[:space:]]*$/\1 \2/p')
	case "$flat" in *'"unattendedUpgradesDisabled":true'* | *'"unattendedUpgradesDisabled": true'*) MANIFEST_UU=true ;; esac
	P_DETAIL="$(printf '%s\n' "$MANIFEST_COMPONENTS" | grep -c = || true) components"
	if [ -n "$MANIFEST_IMAGES" ]; then P_DETAIL="$P_DETAIL, $(printf '%s\n' "$MANIFEST_IMAGES" | grep -c . || true) container images"; fi
	P_DETAIL="$P_DETAIL in $MANIFEST"
}

# --- phase 2: work out what is missing ------------------------------------------------------
# An apt component is present when dpkg has it installed at exactly the wanted version. A
# binary is present when it is executable and either the manifest names the wanted version
# or its sha256 is the wanted one.
plan_component() { # kind name version package url sha256 path
	case "$1" in
	apt)
		# db:Status-Status is "installed" whether or not the package is held.
		have=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$4" 2>/dev/null || true)
		if [ "$have" = "installed $3" ]; then
			PRESENT="$PRESENT $2"
			return 0
		fi
		APT_ARGS="$APT_ARGS $4=$3"
		APT_PKGS="$APT_PKGS $4"
		;;
	bin)
		if [ -x "$7" ]; then
			if [ "$(manifest_version "$2")" = "$3" ] || [ "$(sha256sum "$7" | cut -d' ' -f1)" = "$6" ]; then
				PRESENT="$PRESENT $2"
				return 0
			fi
		fi
		;;
	esac
	TODO="$TODO $2"
}
phase_plan() {
	component() { plan_component "$@"; }
	prebake_components
	P_DETAIL="missing:${TODO:- none}"
}

# --- phase 3: install only what is missing --------------------------------------------------
disable_unattended_upgrades() {
	put_file /etc/apt/apt.conf.d/99prebake-no-unattended-upgrades 0644 none 'APT::Periodic::Update-Package-Lists "0";
APT::Periodic::Unattended-Upgrade "0";
'
	# Stop the timers and mask the services so no new run starts. A run already under way is
	# not killed (that can leave dpkg half-configured): wait_dpkg_lock waits it out.
	host systemctl stop apt-daily.timer apt-daily-upgrade.timer || true
	host systemctl mask apt-daily.service apt-daily-upgrade.service unattended-upgrades.service || true
	UU_DISABLED=true
}

# wait_dpkg_lock waits at most PREBAKE_LOCK_WAIT seconds for whoever holds the dpkg frontend
# lock with flock(2); apt's own fcntl lock is then waited for by apt itself, with the rest of
# the bound (DPkg::Lock::Timeout).
wait_dpkg_lock() {
	w_start=$(now_ms)
	if [ -e "$DPKG_LOCK" ] && command -v flock >/dev/null 2>&1; then
		if ! flock -w "$PREBAKE_LOCK_WAIT" "$DPKG_LOCK" true; then
			fail "the dpkg lock $DPKG_LOCK was still held after ${PREBAKE_LOCK_WAIT}s (the dpkgLockWait bound): another apt, dpkg or unattended-upgrades run holds it; find it with 'fuser -v $DPKG_LOCK', or raise dpkgLockWait"
		fi
	fi
	LOCK_WAITED_MS=$(($(now_ms) - w_start))
	LOCK_LEFT=$((PREBAKE_LOCK_WAIT - LOCK_WAITED_MS / 1000))
	if [ "$LOCK_LEFT" -lt 1 ]; then LOCK_LEFT=1; fi
}

install_binary() { # name version url sha256 path
	tmp="$5.prebake-download"
	mkdir -p "$(dirname "$5")"
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --retry 3 -o "$tmp" "$3" || fail "$1: download from $3 failed"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$tmp" "$3" || fail "$1: download from $3 failed"
	else
		fail "$1: neither curl nor wget is installed to download $3; add curl to the image or as an apt component"
	fi
	got=$(sha256sum "$tmp" | cut -d' ' -f1)
	if [ "$got" != "$4" ]; then
		rm -f "$tmp"
		fail "$1: sha256 of $3 is $got, want $4: the file changed upstream or the component's sha256 is wrong"
	fi
	chmod 0755 "$tmp"
	mv -f "$tmp" "$5"
}

install_component() { # kind name version package url sha256 path
	case " $TODO " in *" $2 "*) ;; *) return 0 ;; esac
	if [ "$1" = bin ]; then
		install_binary "$2" "$3" "$5" "$6" "$7"
	fi
	INSTALLED="$INSTALLED $2"
}

manifest_component() { # kind name version ...: the wanted version of everything now present
	MANIFEST_COMPONENTS=$(printf '%s\n' "$MANIFEST_COMPONENTS" | awk -F= -v n="$2" 'NF && $1 != n')
	MANIFEST_COMPONENTS="$MANIFEST_COMPONENTS
$2=$3"
}

# write_manifest records what this run installed, so the next run (and an image snapshot
# of this machine) knows the node is baked. Same format as imagecatalog.Manifest. The
# container images it lists are the builder's (MANIFEST_IMAGES) or, on a node, the image's.
write_manifest() {
	component() { manifest_component "$@"; }
	prebake_components
	comps=$(printf '%s\n' "$MANIFEST_COMPONENTS" | grep = | sort | awk -F= '{ printf "%s\"%s\":\"%s\"", (n++ ? "," : ""), $1, substr($0, length($1) + 2) }')
	images=$(printf '%s\n' "$MANIFEST_IMAGES" | awk 'NF == 2 { printf "%s\"%s\":\"%s\"", (n++ ? "," : ""), $1, $2 }')
	# Built apart: a } inside ${images:+...} would end the expansion early, and a
	# manifest without images would get a stray brace.
	images_json=""
	if [ -n "$images" ]; then images_json=",\"containerImages\":{$images}"; fi
	uu=false
	if [ "$UU_DISABLED" = true ] || [ "$MANIFEST_UU" = true ]; then uu=true; fi
	put_file "$MANIFEST" 0644 none "{\"components\":{$comps},\"sysctls\":$PREBAKE_SYSCTLS_JSON,\"modules\":$PREBAKE_MODULES_JSON,\"unattendedUpgradesDisabled\":$uu$images_json}
"
}

phase_install() {
	if [ -z "$TODO" ]; then
		P_RESULT=skipped
		P_DETAIL="nothing to install"
		return 0
	fi
	if [ -n "$APT_ARGS" ]; then
		disable_unattended_upgrades
		wait_dpkg_lock
		# Refresh the package lists only when they lack a wanted version.
		stale=false
		for a in $APT_ARGS; do
			apt-cache show "$a" >/dev/null 2>&1 || stale=true
		done
		if [ "$stale" = true ]; then
			apt-get -q -o DPkg::Lock::Timeout="$LOCK_LEFT" update || fail "apt-get update failed (see its output above); check the node's apt sources and network"
		fi
		# apt waits for a dpkg lock held the way apt and dpkg hold it (fcntl), for the rest of
		# the bound. Its output goes through a log so a lock timeout gets the same clear error.
		apt_log=/var/log/prebake-apt-install.log
		# shellcheck disable=SC2086 # word splitting is wanted: one argument per package
		if ! apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout="$LOCK_LEFT" $APT_ARGS >"$apt_log" 2>&1; then
			cat "$apt_log" >&2
			if held=$(grep -m1 'Could not get lock' "$apt_log"); then
				fail "the dpkg lock $DPKG_LOCK was still held after ${PREBAKE_LOCK_WAIT}s (the dpkgLockWait bound): apt says: $held; wait for that process, or raise dpkgLockWait"
			fi
			fail "apt-get install$APT_ARGS failed (see its output above)"
		fi
		cat "$apt_log"
		# shellcheck disable=SC2086
		apt-mark hold $APT_PKGS >/dev/null || fail "apt-mark hold$APT_PKGS failed"
		P_DETAIL="dpkg lock waited ${LOCK_WAITED_MS}ms; apt $(($(now_ms) - P_START))ms;"
	fi
	b_start=$(now_ms)
	component() { install_component "$@"; }
	prebake_components
	write_manifest
	P_DETAIL="$P_DETAIL binaries $(($(now_ms) - b_start))ms"
}

# --- phase 4: kernel settings, containerd, kubelet unit -------------------------------------
# check_sysctls: on a kernel shared with a host (Runtime.SharedKernel) the node changes no
# kernel setting; each wanted sysctl must already have its value. Keys and values are
# validated names and plain words, so sed can take the JSON object apart.
check_sysctls() {
	for kv in $(printf '%s' "$PREBAKE_SYSCTLS_JSON" | tr -d '{}' | tr ',' '\n' | sed -n 's/^"\([^"]*\)":"\([^"]*\)"$/\1=\2/p' | tr ' ' '+'); do
		key=${kv%%=*}
		want=$(printf '%s' "${kv#*=}" | tr '+' ' ')
		if [ "$PREBAKE_RECORD" = 1 ]; then
			host check-sysctl "$key" "$want"
			continue
		fi
		f=$PROC_SYS/$(printf '%s' "$key" | tr . /)
		[ -r "$f" ] || fail "sysctl $key does not exist in this kernel, want $want: the kernel is shared with the host (runtime.sharedKernel); load its module on the host"
		have=$(tr -s ' \t' '  ' <"$f")
		[ "$have" = "$want" ] || fail "sysctl $key is $have, want $want: the kernel is shared with the host (runtime.sharedKernel), so set it on the machine (a container's --sysctl) or the host"
	done
}

phase_configure() {
	prebake_configure_files
	if [ "$PREBAKE_SHARED_KERNEL" = 1 ]; then
		check_sysctls
	else
		if changed sysctl; then host sysctl --system >/dev/null || fail "sysctl --system failed"; fi
		if changed modules; then
			for m in $PREBAKE_MODULES; do host modprobe "$m" || fail "modprobe $m failed: is the module in this kernel?"; done
		fi
	fi
	if changed containerd; then host systemctl restart containerd || fail "systemctl restart containerd failed"; fi
	if changed kubelet-unit; then
		host systemctl daemon-reload || fail "systemctl daemon-reload failed"
		host systemctl enable kubelet || fail "systemctl enable kubelet failed"
	fi
	P_DETAIL="changed:${CHANGED_FILES:- nothing}"
	CHANGED=""
	CHANGED_FILES=""
}

# --- phase 4b: the container images the image holds -----------------------------------------
# The builder pulled them into containerd's k8s.io namespace and listed them in the manifest.
# Each should still be there; one that is not (pruned, or removed by the kubelet's image
# garbage collection before the snapshot) is pulled by the kubelet when a pod needs it, as on
# any node. So a missing image is reported (result "missing", the status file's
# missingImages, the Node annotation), never a failure.
images_listed() { # prints the references containerd's CRI namespace holds, one a line
	ctr -n "$PREBAKE_IMAGES_NAMESPACE" images ls -q
}
phase_images() {
	if ! command -v ctr >/dev/null 2>&1; then
		P_RESULT=skipped
		P_DETAIL="ctr is not installed: the image's container images were not checked"
		return 0
	fi
	# containerd may still be starting (configure restarts it when its config changed).
	tries=${PREBAKE_IMAGES_TRIES:-10}
	while ! held=$(images_listed 2>&1); do
		tries=$((tries - 1))
		if [ "$tries" -le 0 ]; then
			P_RESULT=skipped
			P_DETAIL="containerd did not list its images (ctr: $(printf '%s' "$held" | head -n1)): the image's container images were not checked"
			return 0
		fi
		sleep 1
	done
	want=0
	for ref in $(printf '%s\n' "$MANIFEST_IMAGES" | awk 'NF == 2 { print $1 }'); do
		want=$((want + 1))
		if ! printf '%s\n' "$held" | grep -qxF "$ref"; then MISSING_IMAGES="$MISSING_IMAGES $ref"; fi
	done
	if [ -n "$MISSING_IMAGES" ]; then
		P_RESULT=missing
		P_DETAIL="$(echo $MISSING_IMAGES | wc -w) of $want container images missing in containerd namespace $PREBAKE_IMAGES_NAMESPACE (the kubelet pulls them):$MISSING_IMAGES"
		return 0
	fi
	P_DETAIL="$want container images present in containerd namespace $PREBAKE_IMAGES_NAMESPACE"
}

# --- phase 5: kubeadm join configuration, with the providerID for the kubelet ---------------
phase_kubelet() {
	prebake_kubelet_files
	# A providerID known only at boot: the static provider passes the claimed machine's in the
	# environment; without one the cloud's controller manager sets it, and the patch is empty.
	if [ "$PREBAKE_FIXED_PROVIDER_ID" != 1 ]; then
		if [ -n "${PREBAKE_PROVIDER_ID:-}" ]; then
			put_file "$PREBAKE_KUBELET_PATCH" 0644 none "providerID: '$(printf '%s' "$PREBAKE_PROVIDER_ID" | sed "s/'/''/g")'
"
		else
			put_file "$PREBAKE_KUBELET_PATCH" 0644 none '{}
'
		fi
	fi
	P_DETAIL="changed:${CHANGED_FILES:- nothing}"
	CHANGED=""
	CHANGED_FILES=""
}

# --- phase 6: join ---------------------------------------------------------------------------
phase_join() {
	if [ "$PREBAKE_SKIP_JOIN" = 1 ]; then
		P_RESULT=skipped
		P_DETAIL="join skipped (test mode)"
		return 0
	fi
	if [ -f "$KUBELET_CONF" ]; then
		P_RESULT=skipped
		P_DETAIL="already joined: $KUBELET_CONF exists"
		return 0
	fi
	kubeadm join --config /etc/prebake/kubeadm-join.yaml ||
		fail "kubeadm join $PREBAKE_ENDPOINT failed (see its output above); a join token expires after its TTL, so a new scale-up renders a new one"
}

# --- phase 7: pod network (Runtime.PodNetwork) ----------------------------------------------
# Once joined, wait for the Node's spec.podCIDR (kube-controller-manager --allocate-node-cidrs)
# and write a bridge CNI configuration for it; containerd picks it up and the node goes
# Ready. It reads the Node with the kubelet's own client certificate.
phase_podnetwork() {
	if [ "$PREBAKE_SKIP_JOIN" = 1 ]; then
		P_RESULT=skipped
		P_DETAIL="join skipped (test mode)"
		return 0
	fi
	command -v curl >/dev/null 2>&1 || fail "curl is not installed to read the Node's podCIDR; add curl to the image or as an apt component"
	cert=$KUBELET_CLIENT_CERT
	url="https://$PREBAKE_ENDPOINT/api/v1/nodes/$PREBAKE_NODE"
	deadline=$(($(date +%s) + PREBAKE_POD_CIDR_WAIT))
	cidr=""
	while :; do
		if [ -r "$cert" ]; then
			cidr=$(curl -fsS --max-time 10 --cacert /etc/kubernetes/pki/ca.crt --cert "$cert" --key "$cert" "$url" 2>/dev/null |
				tr -d ' \n\t' | sed -n 's/.*"podCIDR":"\([0-9a-fA-F.:/]*\)".*/\1/p') || cidr=""
		fi
		[ -n "$cidr" ] && break
		if [ "$(date +%s)" -ge "$deadline" ]; then
			fail "node $PREBAKE_NODE has no spec.podCIDR after ${PREBAKE_POD_CIDR_WAIT}s: run kube-controller-manager with --allocate-node-cidrs and --cluster-cidr, or unset runtime.podNetwork and install a CNI"
		fi
		sleep 1
	done
	put_file "$PREBAKE_CNI_CONFIG" 0644 none "{\"cniVersion\":\"1.0.0\",\"name\":\"prebake\",\"plugins\":[{\"type\":\"bridge\",\"bridge\":\"$PREBAKE_CNI_BRIDGE\",\"isGateway\":true,\"ipMasq\":$PREBAKE_CNI_MASQ,\"hairpinMode\":true,\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"$cidr\"}]],\"routes\":[{\"dst\":\"0.0.0.0/0\"}]}},{\"type\":\"portmap\",\"capabilities\":{\"portMappings\":true}}]}
"
	P_DETAIL="podCIDR $cidr:${CHANGED_FILES:- unchanged}"
	CHANGED_FILES=""
}

# --- phase 8: report -------------------------------------------------------------------------
# Once joined, the kubelet's own credentials may annotate its Node; the status file is
# written in every case. The annotation is best effort: the Node appears shortly after join.
annotate_node() {
	if [ "$PREBAKE_SKIP_JOIN" = 1 ] || ! command -v kubectl >/dev/null 2>&1 || [ ! -f "$KUBELET_CONF" ]; then
		return 0
	fi
	# start= is the script's start on this machine's clock (Unix ms): `prebake timeline`
	# places the phases with it and detects the clock's skew.
	value="prebaked=$PREBAKED total=$(($(now_ms) - START_ALL))ms start=$START_ALL$SUMMARY"
	if [ -n "$MISSING_IMAGES" ]; then value="$value missing-images=$(echo $MISSING_IMAGES | tr ' ' ',')"; fi
	i=0
	while [ $i -lt 30 ]; do
		if kubectl --kubeconfig "$KUBELET_CONF" annotate --overwrite node "$PREBAKE_NODE" \
			"prebake.dev/bootstrap=$value" >/dev/null 2>&1; then
			return 0
		fi
		i=$((i + 1))
		sleep 2
	done
	echo "prebake-bootstrap: could not annotate node $PREBAKE_NODE; the status is in $PREBAKE_STATUS" >&2
}

# --- standby: the resume hook (Input.StandbyResume) -----------------------------------------
# A warm-pool standby whose instance-id survives stop/start and suspend/resume (GCE) would
# never run the user-data it is resumed with: cloud-init runs user-data once per instance-id.
# prebake-resume.service (standby-resume.sh) runs it instead; this phase installs, enables and
# starts it. It reads the user-data with curl and python3's yaml module (PyYAML, which
# cloud-init itself depends on), so both are checked here, before the standby says prepared.
phase_standby() {
	command -v curl >/dev/null 2>&1 || fail "curl is not installed; the resume hook reads the user-data it is resumed with from the metadata server with it: add curl to the image or as an apt component"
	python3 -c 'import yaml' >/dev/null 2>&1 ||
		fail "python3 with its yaml module (PyYAML, a dependency of cloud-init) is missing; the resume hook reads the cloud-config it is resumed with with it: use an image with cloud-init"
	prebake_standby_files
	if changed standby; then host systemctl daemon-reload || fail "systemctl daemon-reload failed"; fi
	host systemctl enable prebake-resume.service || fail "systemctl enable prebake-resume.service failed"
	# --no-block: this runs inside cloud-final.service; the hook needs nothing of it.
	host systemctl start --no-block prebake-resume.service || fail "systemctl start prebake-resume.service failed"
	P_DETAIL="prebake-resume.service enabled:${CHANGED_FILES:- unchanged}"
	CHANGED=""
	CHANGED_FILES=""
}

# standby_report hands the status file to a provider that can't read it (on GCE: the guest
# attribute prebake/standby, which the provider reads with instances.getGuestAttributes). A
# standby whose report never arrives stays warming. PREBAKE_METADATA_URL is for tests.
standby_report() {
	case "$PREBAKE_STANDBY_RESUME" in
	gce-metadata)
		command -v curl >/dev/null 2>&1 || return 1
		url="${PREBAKE_METADATA_URL:-http://metadata.google.internal}/computeMetadata/v1/instance/guest-attributes/prebake/standby"
		for _ in 1 2 3 4 5; do
			if curl -fsS -X PUT -H 'Metadata-Flavor: Google' --data-binary "@$PREBAKE_STATUS" "$url" >/dev/null; then return 0; fi
			sleep 2
		done
		echo "prebake-bootstrap: could not write the guest attribute prebake/standby: the provider does not see this standby $RESULT" >&2
		return 1
		;;
	esac
}

# Piped to `sh -s`, the script is the shell's stdin: anything that reads stdin (apt, a
# package's maintainer script, kubeadm) would swallow the rest of it. So everything runs
# from one function, defined in full before it is called, with stdin from /dev/null.
prebake_main() {
	run_phase manifest phase_manifest
	run_phase plan phase_plan
	run_phase install phase_install
	run_phase configure phase_configure
	if [ -n "$MANIFEST_IMAGES" ]; then run_phase images phase_images; fi
	if [ "$PREBAKE_STANDBY" = 1 ]; then
		# A warm-pool standby stops here, just before the join: its provider parks it once
		# the status says prepared. When it is taken it gets user-data with a join token and
		# this script runs again: install and configure find nothing to do, then it joins.
		# Only the gce-metadata hook has anything to install; an ssh standby's provider logs in.
		if [ "$PREBAKE_STANDBY_RESUME" = gce-metadata ]; then run_phase standby phase_standby; fi
		PHASE=done
		RESULT=prepared
		write_status
		standby_report || true
		return 0
	fi
	if [ -n "$PREBAKE_NODE_ADDRESS" ]; then run_phase address phase_address; fi
	run_phase kubelet phase_kubelet
	run_phase join phase_join
	if [ "$PREBAKE_POD_NETWORK" = 1 ]; then run_phase podnetwork phase_podnetwork; fi
	PHASE=done
	RESULT=ok
	write_status
	annotate_node
}
prebake_main </dev/null
