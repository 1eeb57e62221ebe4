#!/bin/sh
# prebake warm-pool standby: resume hook for a machine whose instance-id survives stop/start
# and suspend/resume (GCE). cloud-init runs user-data once per instance-id, so the user-data a
# resume hands over would never run. This runs instead, as prebake-resume.service: at every
# boot, and all along while the machine runs (a suspended one continues where it was), it
# watches the metadata server's user-data. The first user-data whose node script joins
# (PREBAKE_STANDBY='0') has its script written where cloud-init would write it and run once,
# as cloud-init's runcmd would; from then on the machine is a node and this exits at once.
# It never prints the user-data: the script in it holds a join token.
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
MD=${PREBAKE_METADATA_URL:-http://metadata.google.internal}/computeMetadata/v1/instance/attributes/user-data
# The cloud-config's node script is its write_files entry for SCRIPT_PATH (bootstrap.ScriptPath).
SCRIPT_PATH=/var/lib/prebake/bootstrap.sh
# Tests move where it is written and taken, and what runs it.
SCRIPT=${PREBAKE_RESUME_SCRIPT:-$SCRIPT_PATH}
TAKEN=${PREBAKE_RESUME_TAKEN:-/var/lib/prebake/standby-taken}
RUN=${PREBAKE_RESUME_RUN:-sh}
# Each wait for a change is short: across a suspend the open request may hang (a monotonic
# timer does not advance while suspended), so a resumed machine notices within WAIT+3 s.
WAIT=${PREBAKE_RESUME_WAIT:-10}
umask 077

if [ -e "$TAKEN" ]; then
	exit 0
fi
command -v curl >/dev/null 2>&1 || { echo "prebake-resume: curl is missing" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "prebake-resume: python3 (cloud-init's own) is missing" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
etag=NONE
while :; do
	# wait_for_change answers at once when the value's ETag is not last_etag, else when it
	# changes or after timeout_sec.
	if ! curl -sS -f --max-time $((WAIT + 3)) -D "$work/headers" -o "$work/user-data" -H 'Metadata-Flavor: Google' \
		"$MD?wait_for_change=true&timeout_sec=$WAIT&last_etag=$etag"; then
		sleep 1
		continue
	fi
	new=$(tr -d '\r' <"$work/headers" | sed -n 's/^[Ee][Tt][Aa][Gg]: *//p' | tail -n1)
	[ -n "$new" ] && [ "$new" = "$etag" ] && continue
	etag=${new:-NONE}
	# The node script is the write_files entry cloud-init would write.
	if ! python3 -c '
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1])) or {}
for f in doc.get("write_files") or []:
    if f.get("path") == sys.argv[2]:
        sys.stdout.write(f.get("content") or "")
        sys.exit(0)
sys.exit(3)
' "$work/user-data" "$SCRIPT_PATH" >"$work/script" 2>/dev/null; then
		continue
	fi
	grep -qx "PREBAKE_STANDBY='0'" "$work/script" || continue
	mkdir -p "$(dirname "$TAKEN")" "$(dirname "$SCRIPT")"
	: >"$TAKEN"
	mv -f "$work/script" "$SCRIPT"
	chmod 0700 "$SCRIPT"
	rm -f "$work/user-data"
	echo "prebake-resume: taken: running the node script $SCRIPT" >&2
	$RUN "$SCRIPT"
	exit $?
done
