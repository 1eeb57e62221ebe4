# --- the address the node advertises (network mode cilium-wireguard) -----------------------
# Cilium's WireGuard peers reach a node at the address its kubelet advertises. Without an
# overlay that address must be the machine's public IPv4: bound to one of its interfaces (the
# kubelet drops a --node-ip it does not find there) and routable from other networks (not a
# private, shared or reserved range). phase_address finds it, checks both, and points the
# kubelet at it through KUBELET_EXTRA_ARGS in $PREBAKE_KUBELET_ENV. A check that fails ends
# the run before join, with the reason in the status file: a node its peers can't reach must
# not join. The generated part sets PREBAKE_NODE_ADDRESS (public or empty: no check),
# PREBAKE_KUBELET_ENV and PREBAKE_METADATA; the caller defines fail and P_DETAIL.

# metadata_get URL [HEADER] prints one value of the cloud's metadata service.
metadata_get() {
	if command -v curl >/dev/null 2>&1; then
		if [ -n "${2:-}" ]; then
			curl -fsS --max-time 5 --retry 5 --retry-connrefused -H "$2" "$1"
		else
			curl -fsS --max-time 5 --retry 5 --retry-connrefused "$1"
		fi
	elif command -v wget >/dev/null 2>&1; then
		if [ -n "${2:-}" ]; then wget -q -T 5 -O - --header="$2" "$1"; else wget -q -T 5 -O - "$1"; fi
	else
		echo "neither curl nor wget is installed to ask the metadata service" >&2
		return 1
	fi
}

# address_source names where public_ipv4 takes the address from, for messages.
address_source() {
	case "$PREBAKE_PROVIDER" in
	hcloud) echo "Hetzner's metadata service (public-ipv4)" ;;
	gce) echo "GCE's metadata server (access config 0's external-ip)" ;;
	*)
		if [ -n "${PREBAKE_PUBLIC_IPV4:-}" ]; then echo PREBAKE_PUBLIC_IPV4; else echo "the default route's interface"; fi
		;;
	esac
}

# public_ipv4 prints the machine's public IPv4 as its provider tells it.
public_ipv4() {
	case "$PREBAKE_PROVIDER" in
	hcloud)
		metadata_get "$PREBAKE_METADATA/hetzner/v1/metadata/public-ipv4"
		;;
	gce)
		metadata_get "$PREBAKE_METADATA/computeMetadata/v1/instance/network-interfaces/0/access-configs/0/external-ip" 'Metadata-Flavor: Google'
		;;
	*)
		# Static machines: the operator says it in PREBAKE_PUBLIC_IPV4, else it is the
		# address of the interface the default route leaves by.
		if [ -n "${PREBAKE_PUBLIC_IPV4:-}" ]; then
			printf '%s\n' "$PREBAKE_PUBLIC_IPV4"
			return 0
		fi
		dev=$(ip -4 route show default | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
		[ -n "$dev" ] || return 1
		ip -4 -o addr show dev "$dev" scope global | awk '{ split($4, a, "/"); print a[1]; exit }'
		;;
	esac
}

# ipv4_kind prints "public" for a globally routable IPv4 and the range's name otherwise,
# or "invalid" for anything that is no dotted quad.
ipv4_kind() {
	printf '%s\n' "$1" | awk -F. '
		NF != 4 { print "invalid"; exit }
		{ for (i = 1; i <= 4; i++) if ($i !~ /^[0-9]+$/ || $i > 255 || length($i) > 3) { print "invalid"; exit } }
		$1 == 10 || ($1 == 172 && $2 >= 16 && $2 <= 31) || ($1 == 192 && $2 == 168) { print "private (RFC 1918)"; exit }
		$1 == 100 && $2 >= 64 && $2 <= 127 { print "shared (carrier-grade NAT, RFC 6598)"; exit }
		$1 == 127 { print "loopback"; exit }
		$1 == 169 && $2 == 254 { print "link-local"; exit }
		$1 == 0 || $1 >= 224 { print "reserved"; exit }
		($1 == 192 && $2 == 0 && $3 == 2) || ($1 == 198 && $2 == 51 && $3 == 100) || ($1 == 203 && $2 == 0 && $3 == 113) { print "documentation (RFC 5737)"; exit }
		$1 == 198 && ($2 == 18 || $2 == 19) { print "benchmarking (RFC 2544)"; exit }
		{ print "public" }'
}

# on_interface ADDR prints the interface that holds ADDR, if one does.
on_interface() {
	ip -4 -o addr show | awk -v a="$1" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }'
}

phase_address() {
	if [ -z "$PREBAKE_NODE_ADDRESS" ]; then
		P_RESULT=skipped
		P_DETAIL="no network mode"
		return 0
	fi
	ADDRESS_SOURCE=$(address_source)
	addr=$(public_ipv4 2>/dev/null | head -c 64 | tr -d ' \r\n' || true)
	if [ -z "$addr" ]; then
		fail "network mode cilium-wireguard needs the machine's public IPv4, and $ADDRESS_SOURCE gave none: give the machine a public IPv4 (a Hetzner primary IP; PREBAKE_PUBLIC_IPV4 for a static machine), or use an overlay (docs/networking.md)"
	fi
	kind=$(ipv4_kind "$addr")
	if [ "$kind" != public ]; then
		fail "the address $addr from $ADDRESS_SOURCE is $kind, not a public IPv4: peers on other networks can't reach it, so Cilium WireGuard needs an overlay or relay for this machine (docs/networking.md)"
	fi
	if ! command -v ip >/dev/null 2>&1; then
		fail "ip (iproute2) is not installed to check that $addr is on an interface"
	fi
	ifname=$(on_interface "$addr")
	if [ -z "$ifname" ]; then
		fail "the public address $addr from $ADDRESS_SOURCE is on none of this machine's interfaces (a 1:1 NAT, as GCE's external IPv4 is): the kubelet can't advertise it, so peers would get the private address; use an overlay for this machine (docs/networking.md)"
	fi
	mkdir -p "$(dirname "$PREBAKE_KUBELET_ENV")"
	printf 'KUBELET_EXTRA_ARGS=--node-ip=%s\n' "$addr" >"$PREBAKE_KUBELET_ENV.prebake-tmp"
	mv -f "$PREBAKE_KUBELET_ENV.prebake-tmp" "$PREBAKE_KUBELET_ENV"
	P_DETAIL="node-ip $addr (public, on $ifname, from $ADDRESS_SOURCE) in $PREBAKE_KUBELET_ENV"
}
