#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Azurite, the Azure Storage emulator, for the Azure tests: its blob
# service alone, on 127.0.0.1 with a port the kernel picks, data in
# memory, no telemetry.  Installed by scripts/install-deps.sh (npm) under
# CKPTFS_AZURITE_PREFIX (default /opt/ckptfs-azurite).
#
#   azurite.sh start DIR      start it, state in DIR (new or empty);
#                             DIR/port the port it listens on, DIR/env the
#                             exports for its well-known account
#                             (AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY,
#                             AZURE_STORAGE_BLOB_ENDPOINT)
#                             With AZURITE_TLS=1 it serves https with a
#                             server certificate (IP:127.0.0.1,
#                             DNS:localhost) of a CA made here,
#                             DIR/tls/ca.pem (and an unrelated CA,
#                             DIR/tls/other-ca.pem); the endpoint in
#                             DIR/env is then https://; with
#                             AZURITE_OAUTH=1 as well it accepts bearer
#                             tokens too (--oauth basic: their issuer,
#                             audience and lifetime, not a signature)
#   azurite.sh stop DIR       stop it (and say so if it had died)
#   azurite.sh env DIR        print DIR/env
#   azurite.sh mkcontainer DIR C             create container C
#   azurite.sh put DIR C/NAME FILE           upload FILE as blob NAME of C
#   azurite.sh rm DIR C/NAME                 delete a blob
# (mkcontainer, put and rm sign with Shared Key: tests/azure/azblob.py.)
set -euo pipefail

die() { echo "azurite.sh: $*" >&2; exit 1; }

HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${CKPTFS_AZURITE_PREFIX:-/opt/ckptfs-azurite}
BIN=$PREFIX/bin/azurite-blob
# Azurite's documented development account (public, not a secret).
ACCOUNT=devstoreaccount1
KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

cmd=${1:-}
D=${2:-}
[ -n "$cmd" ] && [ -n "$D" ] || die "usage: azurite.sh start|stop|env|mkcontainer|put|rm DIR ..."

# make_certs (a CA and a server certificate for https)
. "$(dirname "${BASH_SOURCE[0]}")/../test_certs.sh"

cmd_start() {
	local end line port scheme=http tls=()
	[ -x "$BIN" ] || die "no Azurite at $BIN (scripts/install-deps.sh installs it)"
	mkdir -p "$D"
	[ -e "$D/pid" ] && die "$D: already started"
	: >"$D/log"
	if [ "${AZURITE_TLS:-0}" = 1 ]; then
		make_certs "$D/tls" "$D/tls/tls.out"
		tls=(--cert "$D/tls/server.pem" --key "$D/tls/server.key")
		scheme=https
		[ "${AZURITE_OAUTH:-0}" = 1 ] && tls+=(--oauth basic)
	fi
	# Port 0: the kernel picks a free one; Azurite prints the one it got.
	setsid "$BIN" --blobHost 127.0.0.1 --blobPort 0 \
		--inMemoryPersistence \
		--disableTelemetry --skipApiVersionCheck \
		--disableProductStyleUrl "${tls[@]}" >"$D/log" 2>&1 </dev/null &
	echo $! >"$D/pid"
	end=$((SECONDS + 30))
	port=
	while [ $SECONDS -lt $end ]; do
		line=$(grep -o "listens on $scheme://127.0.0.1:[0-9]*" "$D/log" || true)
		if [ -n "$line" ]; then
			port=${line##*:}
			break
		fi
		kill -0 "$(cat "$D/pid")" 2>/dev/null || {
			cat "$D/log" >&2
			die "Azurite died while starting"
		}
		sleep 0.2
	done
	[ -n "$port" ] || { cat "$D/log" >&2; die "Azurite did not listen within 30 s"; }
	echo "$port" >"$D/port"
	cat >"$D/env" <<EOF
export AZURE_STORAGE_ACCOUNT=$ACCOUNT
export AZURE_STORAGE_KEY='$KEY'
export AZURE_STORAGE_BLOB_ENDPOINT=$scheme://127.0.0.1:$port/$ACCOUNT
EOF
}

cmd_stop() {
	local pid end
	[ -e "$D/pid" ] || return 0
	pid=$(cat "$D/pid")
	if ! kill -0 "$pid" 2>/dev/null; then
		rm -f "$D/pid"
		echo "azurite.sh: Azurite (pid $pid) had already exited" >&2
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	end=$((SECONDS + 10))
	while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	rm -f "$D/pid"
}

az() {
	# shellcheck disable=SC1091
	. "$D/env"
	/usr/bin/python3 "$HERE/azblob.py" "$@"
}

case $cmd in
start) cmd_start ;;
stop) cmd_stop ;;
env) cat "$D/env" ;;
mkcontainer) az mkcontainer "$3" ;;
put) az put "$3" "$4" ;;
rm) az rm "$3" ;;
*) die "unknown command '$cmd'" ;;
esac
