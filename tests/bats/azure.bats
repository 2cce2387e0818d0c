#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# The Azure Blob Storage store against Azurite, the Azure Storage emulator,
# which this suite starts itself (tests/azure/azurite.sh: 127.0.0.1, a port
# the kernel picks, data in memory).  Checkpoints are uploaded by
# tests/azure/azblob.py, a Shared Key client written from Azure's rules
# with Python's hmac (independent of the C signer); SAS tokens are made
# the same way.  Every view read from az:// must equal the local copy's;
# no key or SAS signature may show in any output, the daemon's log,
# /proc/mounts or an xattr.  teardown_file stops Azurite.

load helpers
load ../s3/suite	# sums, same_views, direct_env
load ../azure/suite	# az_setup_file, az_teardown_file, azput, $AZ
DIRECT="$PY $ROOT/tests/direct_checks.py"

setup_file() {
	az_setup_file || return 1
	"$ROOT/tests/azure/azurite.sh" mkcontainer "$AZTMP/azurite" other
	$GEN --seed 41 --keys 30 --files 4 "$AZTMP/native" >/dev/null
	azput ckpt/native "$AZTMP/native"
	# The fault proxy in front of Azurite (tests/s3/faultproxy.py).
	setsid $PY "$ROOT/tests/s3/faultproxy.py" \
		--upstream "http://127.0.0.1:$(cat "$AZTMP/azurite/port")" \
		--port-file "$AZTMP/proxy.port" --max-seconds 3600 \
		</dev/null >"$AZTMP/proxy.log" 2>&1 &
	echo $! >"$AZTMP/proxy.pid"
	local deadline=$((SECONDS + $(secs 10)))
	until [ -s "$AZTMP/proxy.port" ]; do
		[ $SECONDS -lt $deadline ] || { cat "$AZTMP/proxy.log"; return 1; }
		sleep 0.05
	done
	export S3CHECK_PROXY="http://127.0.0.1:$(cat "$AZTMP/proxy.port")"
	export AZPROXY="$S3CHECK_PROXY/$AZ"
}

teardown_file() {
	if [ -s "$AZTMP/proxy.pid" ]; then
		kill "$(cat "$AZTMP/proxy.pid")" 2>/dev/null || true
	fi
	az_teardown_file
}

setup() { common_setup; }
teardown() {
	# an Azurite of the test's own (https), stopped even when it failed
	[ -e "$TMP/az2/pid" ] && "$ROOT/tests/azure/azurite.sh" stop "$TMP/az2"
	common_teardown
}

# sas account|container:C PERMS: a SAS token made with Python's hmac.
sas() {
	$PY "$ROOT/tests/azure/azblob.py" sas "$1" "$2"
}

# The signature of a SAS token, URL-decoded as Azure checks it.
sas_sig() {
	$PY -c 'import sys, urllib.parse
print(urllib.parse.parse_qs(sys.argv[1])["sig"][0])' "$1"
}

# no_secret FILE...: neither the account key nor SECRET (if set) is in
# any of the files (fixed strings; URL-encoded forms too).
no_secret() {
	local f s
	for f in "$@"; do
		for s in "$AZURE_STORAGE_KEY" ${SECRET:+"$SECRET"} \
		    ${SECRET:+"$($PY -c 'import sys, urllib.parse
print(urllib.parse.quote(sys.argv[1], safe=""))' "$SECRET")"}; do
			if grep -qF -- "$s" "$f"; then
				echo "a secret shows in $f:"
				cat "$f"
				return 1
			fi
		done
	done
}

# mount_leaks MNT: /proc/mounts, the xattrs of the mount's files and
# the daemon's log into $TMP/leak.*, for no_secret.
mount_leaks() {
	grep -F " $1 " /proc/mounts >"$TMP/leak.mounts"
	getfattr -R -d -m - "$1" >"$TMP/leak.xattrs" 2>&1 || true
	cat "$1"/.ckptfs/* >"$TMP/leak.source" 2>/dev/null || true
	cp "$TMP/daemon.log" "$TMP/leak.log"
}

@test "azure: native checkpoint: every view of an az:// mount equals the local mount's (W=1,3), ckptfs.load equals it too" {
	same_views "$AZTMP/native" "az://$AZ/ckpt/native" "1 0" "3 2"
	start_mount "$AZTMP/native" "$MNT" --world 3 --rank 1
	run $(direct_env) $DIRECT same "az://$AZ/ckpt/native" "$MNT" 3 1
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 problems"* ]]
}

@test "azure: ckptfs cat of every view file equals the local mount's bytes (cmp); ls lists the same; info names the credential source, never the key" {
	local f n=0
	start_mount "$AZTMP/native" "$MNT" --world 3 --rank 2
	"$CKPTFS" ls "az://$AZ/ckpt/native" --world 3 --rank 2 >"$TMP/az.ls"
	"$CKPTFS" ls "$AZTMP/native" --world 3 --rank 2 >"$TMP/local.ls"
	diff "$TMP/local.ls" "$TMP/az.ls"
	while read -r f; do
		"$CKPTFS" cat "az://$AZ/ckpt/native" --world 3 --rank 2 "$f" >"$TMP/cat.bin"
		cmp "$TMP/cat.bin" "$MNT/$f"
		n=$((n + 1))
	done < <(cut -f1 "$TMP/az.ls" | tail -n +2)
	stop_mount
	echo "$n files"
	[ "$n" -ge 20 ]
	run "$CKPTFS" info "az://$AZ/ckpt/native"
	echo "$output" >"$TMP/info.out"
	[ "$status" -eq 0 ]
	grep -qx "credentials	Shared Key of account $AZ from the environment (AZURE_STORAGE_KEY, AZURE_STORAGE_ACCOUNT)" "$TMP/info.out"
	no_secret "$TMP/info.out"
	# The same account through a connection string, endpoint included.
	run env -u AZURE_STORAGE_KEY -u AZURE_STORAGE_ACCOUNT -u AZURE_STORAGE_BLOB_ENDPOINT \
		AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=http;AccountName=$AZ;AccountKey=$AZURE_STORAGE_KEY;BlobEndpoint=$AZURE_STORAGE_BLOB_ENDPOINT;" \
		"$CKPTFS" info "az://$AZ/ckpt/native"
	echo "$output" >"$TMP/info2.out"
	[ "$status" -eq 0 ]
	grep -qx "credentials	Shared Key of account $AZ from the connection string (AZURE_STORAGE_CONNECTION_STRING)" "$TMP/info2.out"
	no_secret "$TMP/info2.out"
}

@test "azure: torch DCP (torch 1.13 on the host): views of az:// mounts equal the local ones; ckptfs.load and dcp load_state_dict with ckptfs.StorageReader(\"az://...\") equal FileSystemReader's" {
	torch_gen "$TMP/t" --world 4 --seed 6 >"$TMP/gen.log" 2>&1 ||
		{ cat "$TMP/gen.log"; false; }
	azput ckpt/t1/per_rank "$TMP/t/per_rank"
	azput ckpt/t1/per_item "$TMP/t/per_item"
	same_views "$TMP/t/per_item" "az://$AZ/ckpt/t1/per_item" "3 2"
	start_mount "$TMP/t/per_rank" "$MNT" --world 5 --rank 4
	run $(direct_env) $DIRECT same "az://$AZ/ckpt/t1/per_rank" "$MNT" 5 4
	echo "$output"
	stop_mount
	[[ "$output" == *", 0 problems"* ]]
	run $(direct_env) $DIRECT dcp-torch "$TMP/t/per_rank" 6 4 3 --from "az://$AZ/ckpt/t1/per_rank"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -o ' 0 differ' <<<"$output" | wc -l)" -eq 3 ]
}

@test "azure: SAS tokens (account SAS on the URL, container SAS in AZURE_STORAGE_SAS_TOKEN, read-only container SAS): views equal the local ones; info names the source; the signature shows in no output, log, /proc/mounts or xattr" {
	local tok url
	tok=$(sas account rl)
	SECRET=$(sas_sig "$tok")
	url="$AZURE_STORAGE_BLOB_ENDPOINT/ckpt/native?$tok"
	run env -u AZURE_STORAGE_KEY "$CKPTFS" info "$url"
	echo "$output" >"$TMP/info.out"
	[ "$status" -eq 0 ]
	grep -qx "credentials	a SAS token on the URL" "$TMP/info.out"
	grep -qx "checkpoint	$AZURE_STORAGE_BLOB_ENDPOINT/ckpt/native" "$TMP/info.out"
	no_secret "$TMP/info.out"
	# A mount with -d: its log, /proc/mounts and xattrs hold no secret.
	start_mount "$AZTMP/native" "$MNT" --world 3 --rank 0
	sums "$MNT" >"$TMP/local.sums"
	stop_mount
	AZURE_STORAGE_KEY= start_mount "$url" "$MNT" --world 3 --rank 0 -d
	sums "$MNT" >"$TMP/az.sums"
	mount_leaks "$MNT"
	stop_mount
	diff "$TMP/local.sums" "$TMP/az.sums"
	grep -q "credentials: a SAS token on the URL" "$TMP/leak.log"
	no_secret "$TMP/leak.mounts" "$TMP/leak.xattrs" "$TMP/leak.source" "$TMP/leak.log"
	# Python: the handle's repr, info().path and a load's warnings.
	run env -u AZURE_STORAGE_KEY $(direct_env) PYTHONPATH="$ROOT/scripts" $PY -c '
import sys, warnings, ckptfs
warnings.simplefilter("always")
with ckptfs.open(sys.argv[1]) as ck:
    print(repr(ck))
    print(ck.info().path)
    print(len(ck.load(3, 0, backend="numpy")), "keys")' "$url"
	echo "$output" >"$TMP/py.out"
	cat "$TMP/py.out"
	[ "$status" -eq 0 ]
	grep -qx "$AZURE_STORAGE_BLOB_ENDPOINT/ckpt/native" "$TMP/py.out"
	grep -q "^[0-9]* keys$" "$TMP/py.out"
	no_secret "$TMP/py.out"

	# A container SAS (read, list) from the environment.
	tok=$(sas container:ckpt rl)
	SECRET=$(sas_sig "$tok")
	run env -u AZURE_STORAGE_KEY AZURE_STORAGE_SAS_TOKEN="$tok" \
		"$CKPTFS" info "az://$AZ/ckpt/native"
	echo "$output" >"$TMP/info.out"
	[ "$status" -eq 0 ]
	grep -qx "credentials	a SAS token from the environment (AZURE_STORAGE_SAS_TOKEN)" "$TMP/info.out"
	no_secret "$TMP/info.out"
	run env -u AZURE_STORAGE_KEY AZURE_STORAGE_SAS_TOKEN="$tok" \
		"$CKPTFS" cat "az://$AZ/ckpt/native" --world 1 --rank 0 "$(cut -f1 <<<"$(
		"$CKPTFS" ls "$AZTMP/native" --world 1 --rank 0 | sed -n 2p)")"
	[ "$status" -eq 0 ]

	# Read permission alone (no list): each file is opened by a HEAD.
	tok=$(sas container:ckpt r)
	SECRET=$(sas_sig "$tok")
	run env -u AZURE_STORAGE_KEY "$CKPTFS" extract \
		"$AZURE_STORAGE_BLOB_ENDPOINT/ckpt/native?$tok" "$TMP/ro" --world 3 --rank 0
	echo "$output" >"$TMP/ro.out"
	[ "$status" -eq 0 ]
	no_secret "$TMP/ro.out"
	"$CKPTFS" extract "$AZTMP/native" "$TMP/ro-local" --world 3 --rank 0 >/dev/null
	diff -r "$TMP/ro-local" "$TMP/ro"

	# A container SAS for another container is refused, in one line
	# naming the source and not the signature.
	tok=$(sas container:other rl)
	SECRET=$(sas_sig "$tok")
	run env -u AZURE_STORAGE_KEY AZURE_STORAGE_SAS_TOKEN="$tok" \
		"$CKPTFS" info "az://$AZ/ckpt/native"
	echo "$output" >"$TMP/info.out"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: $AZURE_STORAGE_BLOB_ENDPOINT refused the credentials (a SAS token from the environment (AZURE_STORAGE_SAS_TOKEN)) (HTTP 403 "* ]]
	no_secret "$TMP/info.out"
}

@test "azure: a wrong key, another account's key, no credentials at all, a missing container: one line each naming what is wrong, never the key; anonymous only when asked" {
	local bad
	bad=$(head -c 64 /dev/zero | tr '\0' 'k' | base64 -w0)
	run env AZURE_STORAGE_KEY="$bad" "$CKPTFS" info "az://$AZ/ckpt/native"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: $AZURE_STORAGE_BLOB_ENDPOINT refused the credentials (Shared Key of account $AZ from the environment (AZURE_STORAGE_KEY, AZURE_STORAGE_ACCOUNT)) (HTTP 403 "* ]]
	[[ "$output" != *"$bad"* ]]
	AZURE_STORAGE_KEY="$bad" refuse_mount "az://$AZ/ckpt/native" "refused the credentials" -o az_endpoint="$AZURE_STORAGE_BLOB_ENDPOINT"
	run env AZURE_STORAGE_ACCOUNT=someoneelse "$CKPTFS" info "az://$AZ/ckpt/native"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: AZURE_STORAGE_KEY is the key of account 'someoneelse' (AZURE_STORAGE_ACCOUNT), not of '$AZ'" ]]
	# (managed identity, tried last, at a port nothing listens on: no
	# request leaves the machine)
	run env -u AZURE_STORAGE_KEY -u AZURE_STORAGE_ACCOUNT \
		AZURE_POD_IDENTITY_AUTHORITY_HOST=http://127.0.0.1:1 \
		"$CKPTFS" info "az://$AZ/ckpt/native"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: no Azure credentials: tried a SAS token on the URL, AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_KEY, AZURE_STORAGE_CONNECTION_STRING, AZURE_CLIENT_SECRET, AZURE_FEDERATED_TOKEN_FILE, IDENTITY_ENDPOINT, an Entra ID token from the instance metadata endpoint (managed identity at http://127.0.0.1:1): no answer from http://127.0.0.1:1/metadata/identity/oauth2/token: "*"; -o az_anonymous reads a public container" ]]
	# Anonymous, asked for, on a private container: Azurite refuses it.
	run env -u AZURE_STORAGE_KEY "$CKPTFS" info "az://$AZ/ckpt/native" --az-anonymous
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"(anonymous (az_anonymous))"* || "$output" == *"has no such account or container"* ]]
	run "$CKPTFS" info "az://$AZ/nosuch/native"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/nosuch/native: container 'nosuch' does not exist at $AZURE_STORAGE_BLOB_ENDPOINT (HTTP 404 ContainerNotFound)" ]]
	# Azure options on a local checkpoint are refused, as S3's are.
	run "$CKPTFS" info "$AZTMP/native" --az-endpoint http://127.0.0.1:9
	[ "$status" -ne 0 ]
	[[ "$output" == *"az_endpoint is only for s3:// checkpoints"* ]]
}

@test "azure: a blob replaced after it was opened gives EIO naming it (If-Match), never bytes of two versions" {
	local f blob
	$GEN --seed 42 --keys 6 --files 2 "$TMP/ck" >/dev/null
	azput ckpt/repl "$TMP/ck"
	start_mount "az://$AZ/ckpt/repl" "$MNT" --world 1 --rank 0
	# Same size, other bytes: only the ETag tells the versions apart.
	for blob in "$TMP"/ck/*.distcp; do
		head -c "$(stat -c %s "$blob")" /dev/urandom >"$TMP/new"
		$PY "$ROOT/tests/azure/azblob.py" put "ckpt/repl/$(basename "$blob")" "$TMP/new"
	done
	run bash -c "find '$MNT' -path '$MNT/.ckptfs' -prune -o -type f -size +0 -print | head -1 | xargs cat >/dev/null"
	echo "$output"
	[ "$status" -ne 0 ]
	stop_mount
	grep -q "az://$AZ/ckpt/repl/__[0-9]_0.distcp: bytes .*replaced since it was opened" "$TMP/daemon.log" ||
		{ cat "$TMP/daemon.log"; false; }
}

@test "azure: through the fault proxy: 503s, resets and cut bodies on ranged GETs are retried and ckptfs extract still equals the local view; a listing whose markers cycle is refused in one line" {
	local mode
	"$CKPTFS" extract "$AZTMP/native" "$TMP/local" --world 3 --rank 1 >/dev/null
	for mode in 503 reset truncate; do
		proxy config "{\"mode\":\"$mode\",\"rate\":0.3,\"first\":4,\"only\":\"ranged\",\"seed\":3}"
		run env AZURE_STORAGE_BLOB_ENDPOINT="$AZPROXY" "$CKPTFS" extract "az://$AZ/ckpt/native" "$TMP/$mode" --world 3 --rank 1
		echo "$mode: $output; $(proxy_stat faults) faults"
		[ "$status" -eq 0 ]
		[ "$(proxy_stat faults)" -gt 0 ]
		diff -r "$TMP/local" "$TMP/$mode"
	done
	proxy config '{"mode":"azmarkercycle","only":"all"}'
	run timeout "$(secs 20)" env AZURE_STORAGE_BLOB_ENDPOINT="$AZPROXY" "$CKPTFS" info "az://$AZ/ckpt/loop"
	echo "$output"
	proxy config '{"mode":"none"}'
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/loop: listing (page 3): the server gave a marker it gave before (a loop)" ]]
}

@test "azure: io_stats() counts the requests and body bytes the proxy saw (an open that lists and HEADs, a load with ranged GETs)" {
	proxy config '{"mode":"none"}'
	curl -sf -X POST "$S3CHECK_PROXY/__faultproxy/reset"
	run env AZURE_STORAGE_BLOB_ENDPOINT="$AZPROXY" $(direct_env) PYTHONPATH="$ROOT/scripts" $PY -W ignore -c '
import sys, ckptfs
with ckptfs.open(sys.argv[1]) as ck:
    ck.load(3, 1, backend="numpy")
    s = ck.io_stats()
print(s["requests"], s["bytes_fetched"], s["gets"] if "gets" in s else "")' "az://$AZ/ckpt/native"
	echo "$output"
	[ "$status" -eq 0 ]
	read -r req fetched _ <<<"$output"
	echo "proxy: $(proxy_stat requests) requests, $(proxy_stat bytes) bytes"
	[ "$req" -gt 4 ]
	[ "$req" -eq "$(proxy_stat requests)" ]
	[ "$fetched" -gt 0 ]
	# the proxy counts listing pages' bytes too; ckptfs counts blob bytes
	[ "$fetched" -le "$(proxy_stat bytes)" ]
	[ "$fetched" -eq "$(curl -sf "$S3CHECK_PROXY/__faultproxy/stats" | $PY -c '
import json, sys
d = json.load(sys.stdin)
print(sum(e[4] for e in d["log"] if e[0] == "GET" and e[2]))')" ]
}

@test "azure: https with a CA made here (Azurite --cert): s3_ca_bundle trusts it and the view equals the local one; without it, or with another CA, one line naming TLS and the host" {
	AZURITE_TLS=1 "$ROOT/tests/azure/azurite.sh" start "$TMP/az2"
	local ep
	ep=$(sed -n 's/^export AZURE_STORAGE_BLOB_ENDPOINT=//p' "$TMP/az2/env")
	[[ "$ep" == https://127.0.0.1:*/$AZ ]]
	export AZBLOB_CAFILE="$TMP/az2/tls/ca.pem"
	AZURE_STORAGE_BLOB_ENDPOINT=$ep "$ROOT/tests/azure/azurite.sh" mkcontainer "$TMP/az2" ckpt
	AZURE_STORAGE_BLOB_ENDPOINT=$ep azput ckpt/native "$AZTMP/native"
	"$CKPTFS" extract "$AZTMP/native" "$TMP/local" --world 3 --rank 2 >/dev/null
	run "$CKPTFS" extract "az://$AZ/ckpt/native" "$TMP/tls" --world 3 --rank 2 \
		--az-endpoint "$ep" --s3-ca-bundle "$TMP/az2/tls/ca.pem"
	echo "$output"
	[ "$status" -eq 0 ]
	diff -r "$TMP/local" "$TMP/tls"
	run "$CKPTFS" info "az://$AZ/ckpt/native" --az-endpoint "$ep"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: TLS to 127.0.0.1:"*"certificate"* ]]
	run "$CKPTFS" info "az://$AZ/ckpt/native" --az-endpoint "$ep" --s3-ca-bundle "$TMP/az2/tls/other-ca.pem"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "ckptfs: az://$AZ/ckpt/native: TLS to 127.0.0.1:"*"certificate"* ]]
	"$ROOT/tests/azure/azurite.sh" stop "$TMP/az2"
}
