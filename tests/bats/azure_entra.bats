#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# Entra ID bearer tokens for the Azure store, against Azurite over https
# with --oauth basic (it checks a token's issuer, audience and lifetime)
# and tests/azure/tokensrv.py, a token service on 127.0.0.1 that checks
# what it is sent (client ID, secret or federated assertion, scope, the
# managed identity headers) and counts its requests.  Each source: a
# mount (-d) whose files equal the local extract, `ckptfs cat` and
# ckptfs.load equal to the local checkpoint's; a refresh during a mount;
# an unmount while a refresh hangs; a wrong secret, a hanging endpoint
# (bounded, and Ctrl-C ends it).  No token, secret or key may show in any
# output, log, /proc/mounts or xattr.  teardown_file stops Azurite.

load helpers
load ../s3/suite	# direct_env

AZ=devstoreaccount1
ENTRA="$PY $ROOT/tests/azure/entra_check.py"
SECRET='sp-Secret~8Q.x+/=&y'	# form-encoding matters

setup_file() {
	AZTMP=$(mktemp -d "${BATS_TMPDIR:-/tmp}/ckptfs-aze.XXXXXX")
	export AZTMP
	AZURITE_TLS=1 AZURITE_OAUTH=1 \
		"$ROOT/tests/azure/azurite.sh" start "$AZTMP/azurite" || return 1
	# shellcheck disable=SC1091
	. "$AZTMP/azurite/env"
	export AZURE_STORAGE_ACCOUNT AZURE_STORAGE_KEY AZURE_STORAGE_BLOB_ENDPOINT
	export AZBLOB_CAFILE="$AZTMP/azurite/tls/ca.pem"
	"$ROOT/tests/azure/azurite.sh" mkcontainer "$AZTMP/azurite" ckpt
	$GEN --seed 43 --keys 20 --files 3 "$AZTMP/native" >/dev/null
	$PY "$ROOT/tests/azure/azblob.py" putdir ckpt/native "$AZTMP/native"
	"$CKPTFS" extract "$AZTMP/native" "$AZTMP/local" --world 3 --rank 1 \
		>/dev/null
}

teardown_file() {
	"$ROOT/tests/azure/azurite.sh" stop "$AZTMP/azurite"
	rm -rf "$AZTMP"
}

setup() {
	common_setup
	# The tests find no key: only the token sources below are set.
	AZKEY=$AZURE_STORAGE_KEY
	unset AZURE_STORAGE_KEY AZURE_STORAGE_ACCOUNT AZURE_STORAGE_SAS_TOKEN \
		AZURE_STORAGE_CONNECTION_STRING AZURE_CLIENT_SECRET \
		AZURE_FEDERATED_TOKEN_FILE IDENTITY_ENDPOINT IDENTITY_HEADER \
		AZURE_POD_IDENTITY_AUTHORITY_HOST AZURE_CLIENT_ID \
		AZURE_TENANT_ID AZURE_AUTHORITY_HOST
	EP=$AZURE_STORAGE_BLOB_ENDPOINT
	CA=$AZTMP/azurite/tls/ca.pem
	OPTS=(--az-endpoint "$EP" --s3-ca-bundle "$CA")
	MOPTS=(-o "az_endpoint=$EP,s3_ca_bundle=$CA")
	TOKPID=
}

teardown() {
	[ -n "$TOKPID" ] && kill "$TOKPID" 2>/dev/null
	[ -n "${EPPID:-}" ] && kill "$EPPID" 2>/dev/null
	common_teardown
}

# tokensrv [--tls] ARGS...: start tests/azure/tokensrv.py in $TMP/tok
# (--tls: https, with Azurite's certificate of the test CA); TOKURL its
# base URL.
tokensrv() {
	local scheme=http
	if [ "$1" = --tls ]; then
		shift
		set -- --tls "$AZTMP/azurite/tls/server.pem" \
			"$AZTMP/azurite/tls/server.key" "$@"
		scheme=https
	fi
	local deadline=$((SECONDS + $(secs 10)))
	mkdir -p "$TMP/tok"
	setsid $PY "$ROOT/tests/azure/tokensrv.py" --dir "$TMP/tok" \
		--max-seconds 600 "$@" </dev/null >"$TMP/tok/log" 2>&1 &
	TOKPID=$!
	until [ -s "$TMP/tok/port" ]; do
		[ $SECONDS -lt $deadline ] || { cat "$TMP/tok/log"; return 1; }
		sleep 0.05
	done
	TOKURL="$scheme://127.0.0.1:$(cat "$TMP/tok/port")"
}

# served KIND: how many tokens of KIND the server gave.
served() {
	grep -cx "$1" "$TMP/tok/count" 2>/dev/null || true
}

# no_leak FILE...: no token the server issued, nor the secret, the
# identity header, the federated assertion or the account key, is in any
# of the files.
no_leak() {
	local f s
	for f in "$@"; do
		while read -r s; do
			[ -n "$s" ] || continue
			if grep -qF -- "$s" "$f"; then
				echo "a secret ($s) shows in $f:"
				cat "$f"
				return 1
			fi
		done < <(cat "$TMP/tok/tokens" 2>/dev/null
			 printf '%s\n' "$SECRET" "$AZKEY" \
				"${IDHDR:-}" "${ASSERTION:-}")
	done
}

# same_through SOURCE_TEXT KIND: with the environment set for one token
# source: info names it, a -d mount's files equal the local extract, cat
# of each file equals it, ckptfs.load equals the local load; no secret
# anywhere; the server gave tokens of KIND.
same_through() {
	local want=$1 kind=$2 f
	run "$CKPTFS" info "az://$AZ/ckpt/native" "${OPTS[@]}"
	echo "$output" >"$TMP/info.out"
	echo "$output"
	[ "$status" -eq 0 ]
	grep -qxF "credentials	$want" "$TMP/info.out"
	start_mount "az://$AZ/ckpt/native" "$MNT" --world 3 --rank 1 -d \
		"${MOPTS[@]}"
	diff -r -x .ckptfs "$AZTMP/local" "$MNT"
	grep -qF "credentials: $want" "$TMP/daemon.log"
	grep -F " $MNT " /proc/mounts >"$TMP/leak.mounts"
	getfattr -R -d -m - "$MNT" >"$TMP/leak.xattrs" 2>&1 || true
	stop_mount
	for f in $(cd "$AZTMP/local" && find . -type f | sort); do
		"$CKPTFS" cat "az://$AZ/ckpt/native" --world 3 --rank 1 \
			"${f#./}" "${OPTS[@]}" >"$TMP/cat.bin" 2>>"$TMP/cat.err"
		cmp "$TMP/cat.bin" "$AZTMP/local/$f"
	done
	run $(direct_env) PYTHONPATH="$ROOT/scripts" $ENTRA same \
		"az://$AZ/ckpt/native" "$AZTMP/native" 3 1 "$CA"
	echo "$output" >"$TMP/py.out"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 problems"* ]]
	[ "$(served "$kind")" -ge 3 ]
	no_leak "$TMP/info.out" "$TMP/daemon.log" "$TMP/leak.mounts" \
		"$TMP/leak.xattrs" "$TMP/cat.err" "$TMP/py.out"
}

@test "azure_entra: a service principal secret (the authority on https, trusted through s3_ca_bundle): info, a -d mount, cat and ckptfs.load from az:// equal the local checkpoint's; no token or secret shows" {
	tokensrv --tls --secret "$SECRET"
	export AZURE_TENANT_ID=tenant-1 AZURE_CLIENT_ID=client-1 \
		AZURE_CLIENT_SECRET=$SECRET AZURE_AUTHORITY_HOST=$TOKURL
	same_through "an Entra ID token for a service principal (AZURE_CLIENT_SECRET, client ID client-1, tenant tenant-1)" secret
	[ "$(served secret-refused)" -eq 0 ]
	# Another CA: the token request fails on TLS, naming the source.
	run "$CKPTFS" info "az://$AZ/ckpt/native" --az-endpoint "$EP" \
		--s3-ca-bundle "$AZTMP/azurite/tls/other-ca.pem"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: an Entra ID token for a service principal (AZURE_CLIENT_SECRET, client ID client-1, tenant tenant-1): no answer from $TOKURL/tenant-1/oauth2/v2.0/token: "*"certificate"* ]]
}

@test "azure_entra: workload identity (AZURE_FEDERATED_TOKEN_FILE, read again at each fetch): the same, and a changed file is what the next fetch sends" {
	ASSERTION="federated.assertion.$RANDOM$RANDOM"
	echo "$ASSERTION" >"$TMP/fed"
	tokensrv --federated-file "$TMP/fed"
	export AZURE_TENANT_ID=tenant-1 AZURE_CLIENT_ID=client-1 \
		AZURE_FEDERATED_TOKEN_FILE=$TMP/fed AZURE_AUTHORITY_HOST=$TOKURL
	same_through "an Entra ID token by workload identity (AZURE_FEDERATED_TOKEN_FILE, client ID client-1, tenant tenant-1)" federated
	# The server now wants another assertion; ckptfs sends the old one
	# until the file changes too.
	echo "rotated.$ASSERTION" >"$TMP/fed2"
	kill "$TOKPID"
	rm -f "$TMP/tok/port" "$TMP/tok/count"
	tokensrv --federated-file "$TMP/fed2"
	export AZURE_AUTHORITY_HOST=$TOKURL
	run "$CKPTFS" info "az://$AZ/ckpt/native" "${OPTS[@]}"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: an Entra ID token by workload identity (AZURE_FEDERATED_TOKEN_FILE, client ID client-1, tenant tenant-1): $TOKURL/tenant-1/oauth2/v2.0/token answered HTTP 401 invalid_client" ]]
	cp "$TMP/fed2" "$TMP/fed"
	"$CKPTFS" info "az://$AZ/ckpt/native" "${OPTS[@]}" >/dev/null
	[ "$(served federated)" -eq 1 ]
	[ "$(served federated-refused)" -eq 1 ]
}

@test "azure_entra: managed identity, through IDENTITY_ENDPOINT/IDENTITY_HEADER and through the instance metadata endpoint (a user-assigned identity): the same" {
	IDHDR="id-header-$RANDOM$RANDOM"
	tokensrv --identity-header "$IDHDR" --mi-client-id mi-client-7
	(
		export IDENTITY_ENDPOINT=$TOKURL/msi/token IDENTITY_HEADER=$IDHDR
		same_through "an Entra ID token from the managed identity endpoint (IDENTITY_ENDPOINT)" appservice
	)
	rm -f "$TMP/leak."*
	export AZURE_POD_IDENTITY_AUTHORITY_HOST=$TOKURL AZURE_CLIENT_ID=mi-client-7
	same_through "an Entra ID token from the instance metadata endpoint (managed identity at $TOKURL, client ID mi-client-7)" imds
	[ "$(served imds-refused)" -eq 0 ]
	# Without the client ID the server (a user-assigned identity only)
	# refuses: the error names the endpoint and that no source was found.
	run env -u AZURE_CLIENT_ID "$CKPTFS" info "az://$AZ/ckpt/native" "${OPTS[@]}"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: no Azure credentials: tried a SAS token on the URL, AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY, AZURE_STORAGE_CONNECTION_STRING, AZURE_CLIENT_SECRET, AZURE_FEDERATED_TOKEN_FILE, IDENTITY_ENDPOINT, an Entra ID token from the instance metadata endpoint (managed identity at $TOKURL): "*"answered HTTP 400 invalid_request; -o az_anonymous reads a public container" ]]
}

@test "azure_entra: tokens that live 4 s are fetched again in the background while a mount reads, and reads go on working" {
	local deadline n=0
	tokensrv --secret "$SECRET" --lifetime 4
	export AZURE_TENANT_ID=tenant-1 AZURE_CLIENT_ID=client-1 \
		AZURE_CLIENT_SECRET=$SECRET AZURE_AUTHORITY_HOST=$TOKURL
	start_mount "az://$AZ/ckpt/native" "$MNT" --world 3 --rank 1 \
		"${MOPTS[@]}"
	# Each pass reads every file through the mount (the page cache
	# dropped first), until the server has given a third token.
	deadline=$((SECONDS + $(secs 60)))
	while [ "$(served secret)" -lt 3 ]; do
		[ $SECONDS -lt $deadline ] || { echo "tokens: $(served secret)"; false; }
		sync
		echo 1 >/proc/sys/vm/drop_caches
		diff -r -x .ckptfs "$AZTMP/local" "$MNT"
		n=$((n + 1))
		sleep 0.5
	done
	diff -r -x .ckptfs "$AZTMP/local" "$MNT"
	echo "passes: $n, tokens: $(served secret)"
	stop_mount
	no_leak "$TMP/daemon.log"
}

@test "azure_entra: an unmount while the background refresh waits on a token endpoint that stopped answering ends at once (the refresh is cancelled, not waited out)" {
	local deadline
	tokensrv --secret "$SECRET" --lifetime 4 --hang-after 1
	export AZURE_TENANT_ID=tenant-1 AZURE_CLIENT_ID=client-1 \
		AZURE_CLIENT_SECRET=$SECRET AZURE_AUTHORITY_HOST=$TOKURL
	# a refresh may wait 10 minutes for its answer: only a cancel ends it
	# within stop_mount's bound
	start_mount "az://$AZ/ckpt/native" "$MNT" --world 3 --rank 1 \
		-o "az_endpoint=$EP,s3_ca_bundle=$CA,s3_open_deadline_ms=600000"
	diff -r -x .ckptfs "$AZTMP/local" "$MNT"
	# reads after half the token's life start the refresh, which hangs
	deadline=$((SECONDS + $(secs 60)))
	until grep -qx hang "$TMP/tok/count"; do
		[ $SECONDS -lt $deadline ] || false
		sync
		echo 1 >/proc/sys/vm/drop_caches
		diff -r -x .ckptfs "$AZTMP/local" "$MNT" >/dev/null || true
		sleep 0.5
	done
	stop_mount
}

@test "azure_entra: a wrong client secret is one line naming the source and the answer, never the secret, from info, mount and Python" {
	tokensrv --secret "$SECRET"
	export AZURE_TENANT_ID=tenant-1 AZURE_CLIENT_ID=client-1 \
		AZURE_CLIENT_SECRET="not-$SECRET" AZURE_AUTHORITY_HOST=$TOKURL
	local want="az://$AZ/ckpt/native: an Entra ID token for a service principal (AZURE_CLIENT_SECRET, client ID client-1, tenant tenant-1): $TOKURL/tenant-1/oauth2/v2.0/token answered HTTP 401 invalid_client"
	run "$CKPTFS" info "az://$AZ/ckpt/native" "${OPTS[@]}"
	echo "$output" >"$TMP/out1"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "ckptfs: $want" ]
	refuse_mount "az://$AZ/ckpt/native" "$want" "${MOPTS[@]}" -d
	echo "$output" >"$TMP/out2"
	run $(direct_env) PYTHONPATH="$ROOT/scripts" $ENTRA same \
		"az://$AZ/ckpt/native" "$AZTMP/native" 3 1 "$CA"
	echo "$output" >"$TMP/out3"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"$want"* ]]
	[ "$(served secret-refused)" -eq 3 ]
	SECRET="not-$SECRET" no_leak "$TMP/out1" "$TMP/out2" "$TMP/out3"
	no_leak "$TMP/out1" "$TMP/out2" "$TMP/out3"
	# A half-configured source is refused, naming what is missing.
	run env -u AZURE_TENANT_ID "$CKPTFS" info "az://$AZ/ckpt/native" "${OPTS[@]}"
	[ "$status" -eq 1 ]
	[ "$output" = "ckptfs: az://$AZ/ckpt/native: Entra ID: AZURE_CLIENT_SECRET is set but AZURE_TENANT_ID is not" ]
}

# A plain-http listener that counts the connections it is sent
# ($TMP/ep.hits), on a port of the kernel's ($TMP/ep.port); $EPPID.
counting_listener() {
	local deadline=$((SECONDS + $(secs 10)))
	setsid $PY -c 'import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1] + ".port.tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".port.tmp", sys.argv[1] + ".port")
while True:
    c, _ = s.accept()
    with open(sys.argv[1] + ".hits", "a") as f:
        f.write("connection\n")
    c.close()' "$TMP/ep" </dev/null >"$TMP/ep.log" 2>&1 &
	EPPID=$!
	until [ -s "$TMP/ep.port" ]; do
		[ $SECONDS -lt $deadline ] || { cat "$TMP/ep.log"; return 1; }
		sleep 0.05
	done
}

@test "azure_entra: a token never goes to a plain http:// endpoint: info, mount and Python refuse it in one line naming the source and the endpoint, and the endpoint is never contacted" {
	tokensrv --secret "$SECRET"
	export AZURE_TENANT_ID=tenant-1 AZURE_CLIENT_ID=client-1 \
		AZURE_CLIENT_SECRET=$SECRET AZURE_AUTHORITY_HOST=$TOKURL
	counting_listener
	local hep="http://127.0.0.1:$(cat "$TMP/ep.port")/$AZ"
	local want="az://$AZ/ckpt/native: an Entra ID token for a service principal (AZURE_CLIENT_SECRET, client ID client-1, tenant tenant-1) would go over plain http to $hep, readable on the way; Azure Storage takes tokens over https only: use an https:// endpoint"
	run "$CKPTFS" info "az://$AZ/ckpt/native" --az-endpoint "$hep"
	echo "$output" >"$TMP/out1"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "ckptfs: $want" ]
	refuse_mount "az://$AZ/ckpt/native" "$want" -o "az_endpoint=$hep"
	echo "$output" >"$TMP/out2"
	run $(direct_env) AZURE_STORAGE_BLOB_ENDPOINT="$hep" \
		PYTHONPATH="$ROOT/scripts" $ENTRA same \
		"az://$AZ/ckpt/native" "$AZTMP/native" 3 1 "$CA"
	echo "$output" >"$TMP/out3"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"$want"* ]]
	[ ! -e "$TMP/ep.hits" ]
	no_leak "$TMP/out1" "$TMP/out2" "$TMP/out3"
}

@test "azure_entra: a token endpoint that never answers: the open fails at its deadline naming it; Ctrl-C ends ckptfs.load and the CLI while they wait" {
	local deadline pid
	tokensrv --hang
	export AZURE_TENANT_ID=tenant-1 AZURE_CLIENT_ID=client-1 \
		AZURE_CLIENT_SECRET=$SECRET AZURE_AUTHORITY_HOST=$TOKURL
	run timeout "$(secs 60)" "$CKPTFS" info "az://$AZ/ckpt/native" \
		"${OPTS[@]}" --s3-open-deadline-ms 1500
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: an Entra ID token for a service principal (AZURE_CLIENT_SECRET, client ID client-1, tenant tenant-1): no answer from $TOKURL/tenant-1/oauth2/v2.0/token: "*"timed out"* ]]
	# Python: KeyboardInterrupt, long before the 10-minute deadline.
	: >"$TMP/tok/count"
	run timeout "$(secs 120)" $(direct_env) PYTHONPATH="$ROOT/scripts" \
		$ENTRA interrupt "az://$AZ/ckpt/native" 3 1 "$CA" "$TMP/tok/count"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "KeyboardInterrupt" ]
	# The CLI: SIGINT while it waits ends it (a background job ignores
	# SIGINT: the CLI is started with its default action back).
	: >"$TMP/tok/count"
	$PY -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$CKPTFS" info "az://$AZ/ckpt/native" \
		"${OPTS[@]}" --s3-open-deadline-ms 600000 >"$TMP/cli.out" 2>&1 &
	pid=$!
	deadline=$((SECONDS + $(secs 30)))
	until [ -s "$TMP/tok/count" ]; do
		[ $SECONDS -lt $deadline ] || { kill "$pid"; false; }
		sleep 0.05
	done
	kill -INT "$pid"
	deadline=$((SECONDS + $(secs 30)))
	while kill -0 "$pid" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || { kill -9 "$pid"; false; }
		sleep 0.05
	done
	status=0
	wait "$pid" || status=$?
	cat "$TMP/cli.out"
	echo "status $status"
	[ "$status" -eq 130 ] || [ "$status" -eq 1 ]
	no_leak "$TMP/cli.out"
}
