
# --- the image builder: runs after node.sh's functions, instead of its main call -----------
# A builder is a server booted from a base image to become an image. Its steps:
#   install  node.sh's phases without the join: install every component, write the kernel
#            settings, containerd's and the kubelet's config, pull the container images the
#            image holds into containerd, and write the image manifest;
#   cleanup  remove what first boot made and every node must make again (SSH host keys, the
#            machine id, cloud-init's instance state), the SSH keys that let prebake in, and
#            what is dead weight (apt lists and caches, logs);
#   report   observe the image (dpkg-query, --version, sha256, the kernel settings files,
#            unattended-upgrades, the container images' digests in containerd, the hygiene
#            checks) and write $BUILD_REPORT as JSON;
#   seal     once install has a result and cloud-init's final stage is over, cleanup then
#            report, and print the report on stdout (and nothing else); before that, exit 75.
#            Waiting for cloud-init matters: its final stage writes instance state after
#            runcmd, which must not stay in the image. On Hetzner prebake runs it over SSH;
#   seal-later gce-guest-attributes|file
#            start a waiter outside cloud-init that runs seal when it can and PUTs the report
#            to the metadata server's guest attribute prebake/report, where prebake reads it
#            (GCE), or leaves it at $BUILD_REPORT, where prebake reads it out of the machine
#            (docker).
# The cloud-config runs install (and on GCE and docker seal-later); a failed install is still cleaned
# and reported, with status "failed".
# The report says what is there, never what was asked for: the recipe only says where to
# look (a package name, a path) and which sha256 is which release.

BUILD_REPORT=/var/lib/prebake/build-report.json

# --- step 1: install -------------------------------------------------------------------------
# unattended-upgrades must be off in every image, also when the base image already has all
# the packages and phase_install has nothing to do.
builder_phase_quiet_apt() {
	disable_unattended_upgrades
	P_DETAIL="apt timers stopped, unattended-upgrades masked"
}

builder_phase_record() {
	write_manifest
	P_DETAIL="manifest $MANIFEST"
}

# image_digest prints the digest containerd holds the image under (the DIGEST column of ctr
# images ls: the manifest or index the reference resolved to), or nothing.
image_digest() { # ref
	ctr -n "$PREBAKE_IMAGES_NAMESPACE" images ls 2>/dev/null | awk -v r="$1" '$1 == r { print $3; exit }'
}

# name_image names the image also as the CRI names an image it pulls itself, so the kubelet
# finds it whichever way a pod writes it: name@digest always, and name:tag for a reference
# pinned as name:tag@digest (the CRI looks a pinned reference up by name@digest only).
name_image() { # ref digest
	undigested=${1%%@*}
	case "${undigested##*/}" in
	*:*) name=${undigested%:*} ;;
	*) name=$undigested ;;
	esac
	for alias in "$name@$2" "$undigested"; do
		[ "$alias" != "$1" ] && [ "$alias" != "$name" ] || continue
		host ctr -n "$PREBAKE_IMAGES_NAMESPACE" images tag --force "$1" "$alias" >/dev/null ||
			fail "ctr images tag $1 $alias failed"
	done
}

# The container images the image holds (BuilderInput.Images): pulled into containerd's CRI
# namespace through its registry host config, once containerd runs with the configuration
# every node of the image gets. Each one's digest goes into the manifest (write_manifest),
# which a node's images phase reads.
builder_phase_images() {
	n=0
	MANIFEST_IMAGES=""
	for ref in $PREBAKE_BUILDER_IMAGES; do
		host ctr -n "$PREBAKE_IMAGES_NAMESPACE" images pull --hosts-dir "$PREBAKE_HOSTS_DIR" "$ref" >/dev/null ||
			fail "ctr images pull $ref failed: is its registry reachable from the builder, and listed in the runtime's registries if it is plain HTTP?"
		digest=$(image_digest "$ref")
		case "$digest" in
		sha256:*) ;;
		*) fail "ctr -n $PREBAKE_IMAGES_NAMESPACE images ls shows no digest for $ref after its pull (got '$digest'): is containerd's ctr installed and containerd running?" ;;
		esac
		name_image "$ref" "$digest"
		MANIFEST_IMAGES="$MANIFEST_IMAGES${MANIFEST_IMAGES:+
}$ref $digest"
		n=$((n + 1))
	done
	P_DETAIL="$n images in containerd namespace $PREBAKE_IMAGES_NAMESPACE${PREBAKE_BUILDER_IMAGES:+: $PREBAKE_BUILDER_IMAGES}"
}

builder_install() {
	run_phase manifest phase_manifest
	run_phase plan phase_plan
	run_phase quiet-apt builder_phase_quiet_apt
	run_phase install phase_install
	run_phase configure phase_configure
	if [ -n "$PREBAKE_BUILDER_IMAGES" ]; then run_phase images builder_phase_images; fi
	run_phase record builder_phase_record
	PHASE="done"
	RESULT=ok
	write_status
}

# --- step 2: cleanup -------------------------------------------------------------------------
# Every removal is attempted even when one fails: the report's hygiene checks are the gate,
# and they name what is left.
builder_cleanup() {
	set +e
	rm -f /etc/ssh/ssh_host_*
	# Empty, not removed: systemd then makes a new id at first boot and treats it as such.
	if [ -e /etc/machine-id ]; then : >/etc/machine-id; fi
	if [ -f /var/lib/dbus/machine-id ] && [ ! -L /var/lib/dbus/machine-id ]; then rm -f /var/lib/dbus/machine-id; fi
	# The keys prebake logged in with, and any other key: an image grants nobody access.
	rm -f /root/.ssh/authorized_keys /home/*/.ssh/authorized_keys
	rm -rf /var/lib/cloud/instance /var/lib/cloud/instances /var/lib/cloud/data/instance-id \
		/var/lib/cloud/data/previous-instance-id /var/lib/cloud/sem
	# A NoCloud seed (the docker provider writes the builder's there): every machine gets its own.
	rm -rf /var/lib/cloud/seed/nocloud
	if command -v apt-get >/dev/null 2>&1; then apt-get clean; fi
	rm -rf /var/cache/apt/archives/*.deb /var/lib/apt/lists/*
	# Logs: rotated ones go, the rest are emptied (a running daemon keeps its file open).
	if [ -d /var/log ]; then
		find /var/log -type f \( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \) -exec rm -f {} + 2>/dev/null
		rm -rf /var/log/journal/*
		find /var/log -type f -exec truncate -s 0 {} + 2>/dev/null
	fi
	set -e
	echo "prebake-builder: cleanup done"
}

# --- step 3: report --------------------------------------------------------------------------
OBSERVED=""

observed() { # name version
	OBSERVED="$OBSERVED${OBSERVED:+,}$(json_str "$1"):$(json_str "$2")"
}

# observe_component is called once per component (see prebake_components). A component that
# is not there is left out of the report; imagecatalog.Verify names it "not installed".
observe_component() { # kind name version package url sha256 path
	case "$1" in
	apt)
		v=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$4" 2>/dev/null) || v=
		case "$v" in "installed "*) observed "$2" "${v#installed }" ;; esac
		;;
	bin)
		[ -f "$7" ] || return 0
		# Binaries that can say their version say it; "Kubernetes v1.35.4" -> v1.35.4.
		out=""
		case "$2" in
		kubelet) out=$("$7" --version 2>/dev/null) || out="" ;;
		kubeadm) out=$("$7" version -o short 2>/dev/null) || out="" ;;
		esac
		if [ -n "$out" ]; then
			observed "$2" "${out##* }"
			return 0
		fi
		# The others are identified by their bits: the recipe's sha256 is its version's.
		got=$(sha256sum "$7" | cut -d' ' -f1)
		if [ "$got" = "$6" ]; then
			observed "$2" "$3"
		else
			observed "$2" "sha256-$(printf '%s' "$got" | cut -c1-12)"
		fi
		;;
	esac
}

# observe_sysctls prints the sysctls the image applies at boot as JSON members; a later file
# (in the order systemd-sysctl reads them) overrides an earlier one.
observe_sysctls() {
	cat /etc/sysctl.d/*.conf 2>/dev/null |
		sed -n 's/^[[:space:]]*\([a-z0-9_.-]*\)[[:space:]]*=[[:space:]]*\([^[:space:]]*\).*/\1 \2/p' |
		awk '{ if (!($1 in v)) k[n++] = $1; v[$1] = $2 } END { for (i = 0; i < n; i++) print k[i], v[k[i]] }' |
		while read -r key value; do
			printf '%s%s:%s' "${sep:-}" "$(json_str "$key")" "$(json_str "$value")"
			sep=,
		done
}

observe_modules() {
	cat /etc/modules-load.d/*.conf 2>/dev/null |
		sed -n 's/^[[:space:]]*\([a-z0-9_-][a-z0-9_-]*\)[[:space:]]*$/\1/p' | awk '!seen[$0]++' |
		while read -r m; do
			printf '%s%s' "${sep:-}" "$(json_str "$m")"
			sep=,
		done
}

# observe_images prints, as JSON members, each container image of the recipe that containerd
# holds, with its digest; imagecatalog's verify names the ones left out.
observe_images() {
	for ref in $PREBAKE_BUILDER_IMAGES; do
		digest=$(image_digest "$ref")
		[ -n "$digest" ] || continue
		printf '%s%s:%s' "${sep:-}" "$(json_str "$ref")" "$(json_str "$digest")"
		sep=,
	done
}

# unattended-upgrades is disabled when apt's periodic run is off and the service is masked or
# not installed.
observe_uu() {
	UU=1
	if command -v apt-config >/dev/null 2>&1; then
		eval "$(apt-config shell UU APT::Periodic::Unattended-Upgrade)"
	fi
	if [ "${UU:-1}" != 0 ]; then
		echo false
		return 0
	fi
	if dpkg-query -W -f='${db:Status-Status}' unattended-upgrades 2>/dev/null | grep -q '^installed$' &&
		[ "$(readlink /etc/systemd/system/unattended-upgrades.service 2>/dev/null)" != /dev/null ]; then
		echo false
		return 0
	fi
	echo true
}

# The hygiene checks, named as imagecatalog.HygieneChecks names them.
hygiene_ssh_host_keys() {
	for k in /etc/ssh/ssh_host_*; do
		if [ -e "$k" ]; then return 1; fi
	done
}
hygiene_machine_id() {
	[ ! -s /etc/machine-id ] || [ "$(cat /etc/machine-id)" = uninitialized ]
}
hygiene_cloud_init_state() {
	[ ! -e /var/lib/cloud/instance ] && [ ! -e /var/lib/cloud/instances ] && [ ! -e /var/lib/cloud/data/instance-id ]
}
hygiene_ssh_authorized_keys() {
	for k in /root/.ssh/authorized_keys /home/*/.ssh/authorized_keys; do
		if [ -e "$k" ]; then return 1; fi
	done
}
hygiene_apt_cache() {
	left=$(
		find /var/cache/apt/archives -name '*.deb' 2>/dev/null | head -n1
		find /var/lib/apt/lists -type f ! -name lock 2>/dev/null | head -n1
	)
	[ -z "$left" ]
}
hygiene() { # check function
	if "$2"; then r=true; else r=false; fi
	HYGIENE="$HYGIENE${HYGIENE:+,}\"$1\":$r"
	HYGIENE_SUMMARY="$HYGIENE_SUMMARY $1=$r"
}

builder_report() {
	# The install step's own status says whether it finished: its top-level result, which
	# write_status puts before the first list (the phases have results of their own).
	status=failed
	if [ "$(sed -n 's/^[^[]*"result":"\([a-z]*\)".*/\1/p' "$PREBAKE_STATUS" 2>/dev/null)" = ok ]; then status="done"; fi
	OBSERVED=""
	component() { observe_component "$@"; }
	prebake_components
	HYGIENE=""
	HYGIENE_SUMMARY=""
	hygiene ssh-host-keys hygiene_ssh_host_keys
	hygiene machine-id hygiene_machine_id
	hygiene cloud-init-state hygiene_cloud_init_state
	hygiene ssh-authorized-keys hygiene_ssh_authorized_keys
	hygiene apt-cache hygiene_apt_cache
	images=""
	if [ -n "$PREBAKE_BUILDER_IMAGES" ]; then images=",\"containerImages\":{$(observe_images)}"; fi
	mkdir -p "$(dirname "$BUILD_REPORT")"
	printf '{"status":"%s","observed":{"components":{%s},"sysctls":{%s},"modules":[%s],"unattendedUpgradesDisabled":%s%s},"hygiene":{%s}}\n' \
		"$status" "$OBSERVED" "$(observe_sysctls)" "$(observe_modules)" "$(observe_uu)" "$images" "$HYGIENE" >"$BUILD_REPORT.tmp"
	chmod 0644 "$BUILD_REPORT.tmp"
	mv -f "$BUILD_REPORT.tmp" "$BUILD_REPORT"
	echo "prebake-builder: report $BUILD_REPORT: status $status; hygiene$HYGIENE_SUMMARY"
}

# --- seal: cleanup and report once the builder is done ----------------------------------------
# cloud-init writes boot-finished at the very end of its final stage, after runcmd.
CLOUD_BOOT_FINISHED=/var/lib/cloud/instance/boot-finished
SEAL_NOT_YET=75 # EX_TEMPFAIL: ask again later

builder_seal() {
	result=$(sed -n 's/^[^[]*"result":"\([a-z]*\)".*/\1/p' "$PREBAKE_STATUS" 2>/dev/null) || result=
	case "$result" in
	ok | failed) ;;
	*)
		echo "prebake-builder: not yet: the install step has no result (${result:-no status file})" >&2
		return $SEAL_NOT_YET
		;;
	esac
	if [ ! -e "$CLOUD_BOOT_FINISHED" ]; then
		echo "prebake-builder: not yet: cloud-init's final stage has not finished ($CLOUD_BOOT_FINISHED)" >&2
		return $SEAL_NOT_YET
	fi
	builder_cleanup >&2
	builder_report >&2
	cat "$BUILD_REPORT"
}

# Where seal-wait keeps the report and seal-later's waiter logs: /run, not the image's disk.
SEAL_REPORT_OUT=/run/prebake-build-report.json
SEAL_LOG=/run/prebake-builder-seal.log

# The guest attribute a GCE builder's report goes to; PREBAKE_METADATA_URL is for tests.
GCE_REPORT_ATTRIBUTE=computeMetadata/v1/instance/guest-attributes/prebake/report

put_gce_guest_attribute() { # file
	url="${PREBAKE_METADATA_URL:-http://metadata.google.internal}/$GCE_REPORT_ATTRIBUTE"
	for _ in 1 2 3 4 5; do
		if curl -fsS -X PUT -H 'Metadata-Flavor: Google' --data-binary "@$1" "$url"; then return 0; fi
		sleep 2
	done
	return 1
}

# seal_wait runs seal until it goes ahead (at most SEAL_WAIT_TRIES times, 2 s apart), then
# hands the report to the transport.
builder_seal_wait() { # transport
	tries=${SEAL_WAIT_TRIES:-5400}
	report_out=$SEAL_REPORT_OUT
	while :; do
		rc=0
		builder_seal >"$report_out.tmp" || rc=$?
		[ "$rc" = "$SEAL_NOT_YET" ] || break
		tries=$((tries - 1))
		if [ "$tries" -le 0 ]; then
			echo "prebake-builder: gave up waiting for the install step and cloud-init" >&2
			return 1
		fi
		sleep 2
	done
	if [ "$rc" != 0 ]; then
		echo "prebake-builder: seal failed (exit $rc)" >&2
		return "$rc"
	fi
	mv -f "$report_out.tmp" "$report_out"
	case "$1" in
	gce-guest-attributes) put_gce_guest_attribute "$report_out" ;;
	file) ;; # seal wrote it to $BUILD_REPORT, where the provider reads it
	*)
		echo "prebake-builder: unknown report transport '$1'" >&2
		return 2
		;;
	esac
	echo "prebake-builder: report handed to $1" >&2
}

# seal_later starts seal_wait outside cloud-init, which must finish before seal goes ahead: a
# transient systemd unit where systemd runs, else a process of its own session. Its output
# goes to /run (not /var/log, which is in the image).
builder_seal_later() { # transport
	case "$1" in
	gce-guest-attributes | file) ;;
	*)
		echo "prebake-builder: seal-later: unknown report transport '$1': want gce-guest-attributes or file" >&2
		return 2
		;;
	esac
	if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemd-run --unit=prebake-builder-seal --no-block --collect sh "$0" seal-wait "$1"
	else
		setsid sh "$0" seal-wait "$1" </dev/null >>"$SEAL_LOG" 2>&1 &
	fi
	echo "prebake-builder: seal-wait $1 started"
}

# Each step runs from a function defined in full before it is called, with stdin from
# /dev/null, as node.sh's main does. Only the install step writes the status file, so only it
# keeps node.sh's exit trap.
trap - EXIT
case "${1:-all}" in
install)
	trap on_exit EXIT
	builder_install </dev/null
	;;
cleanup) builder_cleanup </dev/null ;;
report) builder_report </dev/null ;;
seal) builder_seal </dev/null ;;
seal-wait) builder_seal_wait "${2:-}" </dev/null ;;
seal-later) builder_seal_later "${2:-}" </dev/null ;;
all)
	# Standalone (`sh -s` over SSH): all three steps; a failed install is reported, not fatal.
	# The subshell is not on the left of || because set -e is ignored there.
	set +e
	(
		set -e
		trap on_exit EXIT
		builder_install
	) </dev/null
	rc=$?
	set -e
	if [ "$rc" != 0 ]; then echo "prebake-builder: the install step failed; cleaning up and reporting anyway" >&2; fi
	builder_cleanup </dev/null
	builder_report </dev/null
	;;
*)
	echo "prebake-builder: unknown step '$1': want install, cleanup, report, seal, seal-wait TRANSPORT, seal-later TRANSPORT, or none for install, cleanup and report" >&2
	exit 2
	;;
esac
