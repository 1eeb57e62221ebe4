#!/bin/sh
# prebake-container-init: PID 1 of a prebake docker node. It shows systemd what a VM's
# hardware would, then becomes systemd. It changes nothing outside the container.
#
# 1. cgroups. The node runs in its own cgroup namespace (--cgroupns=private), so it sees its
#    own cgroup as the root, as a VM sees its whole machine; Docker mounts the v1 controllers
#    read-only there, and systemd, the kubelet and runc must create cgroups. Remounting each
#    controller read-write is allowed (CAP_SYS_ADMIN) and still reaches only this subtree.
# 2. Kernel settings that are global, not per network namespace. The kubelet insists on
#    vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1 (and three more) and
#    exits when it cannot set them; /proc/sys is read-only in a container, and writing them
#    would change the host for everybody. Each one whose host value differs is shown to the
#    node, read-only, with the kubelet's value; the host keeps its own.
set -u
log() { echo "prebake-container-init: $*" >&2; }

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
	mount -o remount,rw /sys/fs/cgroup 2>/dev/null || log "cannot make /sys/fs/cgroup writable"
else
	for d in /sys/fs/cgroup/*; do
		[ -L "$d" ] && continue
		mountpoint -q "$d" || continue
		mount -o remount,bind,rw "$d" || log "cannot make $d writable"
	done
fi

shown=/run/prebake-container/sysctl
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
	key=${kv%%=*} want=${kv#*=} f=/proc/sys/${kv%%=*}
	[ -r "$f" ] || continue
	[ "$(cat "$f")" = "$want" ] && continue
	mkdir -p "$shown"
	src=$shown/$(echo "$key" | tr / .)
	echo "$want" >"$src"
	if mount --bind "$src" "$f" && mount -o remount,bind,ro "$f"; then
		log "$(echo "$key" | tr / .): shown as $want inside this node (host value unchanged)"
	else
		log "cannot show $key as $want; the kubelet may refuse to start"
	fi
done

exec /sbin/init "$@"
