#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# S3 credentials the way clusters provide them (issue 28, part 1), against
# a radosgw this suite starts (tests/s3/suite.bash) with its STS on: a
# profile's role_arn through radosgw's own AssumeRole; web identity
# through radosgw's own AssumeRoleWithWebIdentity, with tokens of an OpenID
# Connect provider on 127.0.0.1 (tests/s3/oidcserver.py, registered with
# radosgw's IAM by rgw.sh oidc; radosgw fetches its keys over plain http),
# and again through tests/s3/credserver.py standing in for STS, for a
# refresh within seconds (radosgw's sessions last 900 s at least); EC2
# instance metadata (IMDSv2) and the container endpoint through
# credserver.py on 127.0.0.1, which hands out fresh temporary credentials
# from radosgw's STS and counts requests; credential_process with a
# script; refresh with short expiry times; and each source's failure as
# one line that holds no secret.

load helpers
load ../s3/suite

setup_file() {
	export RGW_STS=1	# radosgw's STS on, with a role (rgw.sh)
	s3_setup_file || return 1
	$PY "$ROOT/scripts/gen_ckpt.py" --seed 31 --keys 10 --files 2 \
		"$S3TMP/ck" >/dev/null
	upload "$S3TMP/ck" ck-creds/run
}
teardown_file() { s3_teardown_file; }

# flat(d): a nested state dict as {"a.b.c": value}, for the Python the
# tests below run (prepended to their -c program).
PY_FLAT='def flat(d, pre=""):
    out = {}
    for k, v in d.items():
        out.update(flat(v, pre + str(k) + ".") if isinstance(v, dict)
                   else {pre + str(k): v})
    return out
'

setup() {
	common_setup
	# The credentials' clock (core/io/s3_creds.c, credserver.py, the
	# scripts below): the tests move it past half-lives and expiries
	# instead of sleeping through them.
	export CKPTFS_TEST_CLOCK_FILE=$TMP/clock
	echo 0 >"$CKPTFS_TEST_CLOCK_FILE"
	SECRET=$AWS_SECRET_ACCESS_KEY
	ARN=$(cat "$S3TMP/rgw/role_arn")
	mkdir -p "$TMP/home"
	export HOME=$TMP/home
}

teardown() {
	local p d
	for d in "$TMP"/cp-*; do
		[ -d "$d" ] && touch "$d/release"	# blocked_creds below
	done
	for p in "$TMP"/*.pid; do
		[ -s "$p" ] && kill "$(cat "$p")" 2>/dev/null
	done
	common_teardown
}

# blocked_creds NAME LIFE: a credential_process command in $CP_CMD that
# counts its calls in $TMP/cp-NAME/runs (and finished ones in served):
# call 1 hands out the suite's keys expiring in LIFE s; call 2, the
# refresh, first touches blocked (its pid in pid) and waits until release
# appears (300 s at most), then hands them out for an hour, as later
# calls do.
blocked_creds() {
	local d=$TMP/cp-$1
	mkdir -p "$d"
	cat >"$d/creds.sh" <<'EOF'
#!/bin/sh
d=$(dirname "$0")
echo call >>"$d/runs"
n=$(wc -l <"$d/runs")
life=3600
[ "$n" -eq 1 ] && life=$1
if [ "$n" -eq 2 ]; then
	echo $$ >"$d/pid"
	touch "$d/blocked"
	i=0
	while [ ! -e "$d/release" ] && [ $i -lt 6000 ]; do
		sleep 0.05
		i=$((i + 1))
	done
fi
exp=$(date -u -d "@$(($(date +%s) + $(cat "$CKPTFS_TEST_CLOCK_FILE") + life))" +%Y-%m-%dT%H:%M:%SZ)
printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "Expiration": "%s"}\n' "$K" "$S" "$exp"
echo done >>"$d/served"
EOF
	chmod +x "$d/creds.sh"
	CP_CMD="$d/creds.sh $2"
}

# now: the credentials' clock, in seconds since the epoch.
now() {
	echo $(($(date +%s) + $(cat "$CKPTFS_TEST_CLOCK_FILE")))
}

# advance_to T: move the credentials' clock to T (never back).
advance_to() {
	local off
	off=$(($1 - $(date +%s)))
	[ "$off" -gt "$(cat "$CKPTFS_TEST_CLOCK_FILE")" ] &&
		echo "$off" >"$CKPTFS_TEST_CLOCK_FILE.new" &&
		mv "$CKPTFS_TEST_CLOCK_FILE.new" "$CKPTFS_TEST_CLOCK_FILE"
	return 0
}

# lines FILE: its number of lines (0 when absent).
lines() {
	if [ -e "$1" ]; then wc -l <"$1"; else echo 0; fi
}

# credserver NAME EXPIRE [ARGS...]: start tests/s3/credserver.py; its URL
# in $CS.
credserver() {
	local name=$1 exp=$2 i
	shift 2
	CRED_AK=$AWS_ACCESS_KEY_ID CRED_SK=$AWS_SECRET_ACCESS_KEY setsid $PY \
		"$ROOT/tests/s3/credserver.py" --port-file "$TMP/$name.port" \
		--sts "$AWS_ENDPOINT_URL" --role-arn "$ARN" --expire "$exp" "$@" \
		</dev/null >"$TMP/$name.log" 2>&1 &
	echo $! >"$TMP/$name.pid"
	for i in $(seq "$(polls 10)"); do
		[ -s "$TMP/$name.port" ] && break
		sleep 0.05
	done
	CS="http://127.0.0.1:$(cat "$TMP/$name.port")"
}

# oidcserver: start tests/s3/oidcserver.py (its key, issuer and thumbprint
# in $TMP/oidc) and register it with radosgw for client id ckptfs-app;
# the role its tokens may assume in $WEBROLE.
oidcserver() {
	local i
	mkdir -p "$TMP/oidc"
	setsid $PY "$ROOT/tests/s3/oidcserver.py" serve --dir "$TMP/oidc" \
		--port-file "$TMP/oidc.port" </dev/null >"$TMP/oidc.log" 2>&1 &
	echo $! >"$TMP/oidc.pid"
	for i in $(seq "$(polls 10)"); do
		[ -s "$TMP/oidc.port" ] && break
		sleep 0.05
	done
	WEBROLE=$("$S3CHECK_RGW" oidc "$S3CHECK_DIR" "$(cat "$TMP/oidc/issuer")" \
		"$(cat "$TMP/oidc/thumbprint")" ckptfs-app)
}

# oidc_token FILE ARGS...: a token of the provider (oidcserver.py token).
oidc_token() {
	local f=$1
	shift
	$PY "$ROOT/tests/s3/oidcserver.py" token --dir "$TMP/oidc" "$@" >"$f"
}

# oidc_stat FIELD: a count of the OIDC provider's (config, jwks).
oidc_stat() {
	curl -sf "$(cat "$TMP/oidc/issuer")/__stats" |
		$PY -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# cs_stat FIELD: a count of the credential server's.
cs_stat() {
	curl -sf "$CS/__stats" |
		$PY -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# no_keys: the suite's static keys out of the environment.
no_keys() {
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
}

# fresh_reads: drop the page cache, so that the mount's next reads are
# new GETs.
fresh_reads() {
	sync
	echo 1 >/proc/sys/vm/drop_caches
}

# check_mount W R: the mount's files against the numpy reference.
check_mount() {
	run $REF check "$S3TMP/ck" "$MNT" --world "$1" --rank "$2"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "s3 credentials: a profile's role_arn with source_profile -> radosgw's STS AssumeRole; its temporary credentials read a mount; info and -d name the role; keys any case, ':' or '=', comments, nested sections" {
	cat >"$TMP/config" <<EOF
# the source profile
[profile base]
AWS_Access_Key_ID = $AWS_ACCESS_KEY_ID
aws_secret_access_key : $AWS_SECRET_ACCESS_KEY
s3 =
  addressing_style = path
[profile dev]
; the role
Role_Arn = $ARN
source_profile = base
role_session_name = ckptfs-test
EOF
	no_keys
	export AWS_CONFIG_FILE=$TMP/config AWS_PROFILE=dev
	run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"credentials	profile 'dev': assume role $ARN (with profile 'base' in $TMP/config)"* ]]
	[[ "$output" != *"$SECRET"* ]]
	# STS falls back to AWS_ENDPOINT_URL, plain http: the credentials it
	# returns come back readable, said in the one warning line.
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	[[ "$output" == *"; the credentials STS returns (for profile 'dev': assume role $ARN (with profile 'base' in $TMP/config)) come over plain http from STS at $AWS_ENDPOINT_URL, readable on the way; use an https:// STS endpoint (AWS_ENDPOINT_URL_STS)"* ]]
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 1 -d
	check_mount 2 1
	stop_mount
	grep -q "s3://ck-creds/run: credentials: profile 'dev': assume role $ARN" "$TMP/daemon.log"
	! grep -qF "$SECRET" "$TMP/daemon.log" || false
	# The same profile through -o keys and the Python package.
	PYTHONPATH=$ROOT/scripts run $(direct_env) $PY -c 'import sys, ckptfs
print(sorted(ckptfs.load(sys.argv[1], 2, 0, backend="numpy")))' s3://ck-creds/run
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "s3 credentials: web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, STS at AWS_ENDPOINT_URL_STS) in a mount, refreshed at half-life while reads go on" {
	echo "eyJ.web-identity-token.sig" >"$TMP/token"
	credserver sts "$(secs 4)" --web-token-file "$TMP/token"
	no_keys
	export AWS_WEB_IDENTITY_TOKEN_FILE=$TMP/token AWS_ROLE_ARN=arn:aws:iam::123456789012:role/trainer
	export AWS_ENDPOINT_URL_STS=$CS AWS_ROLE_SESSION_NAME=job-7
	run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"credentials	web identity (AWS_WEB_IDENTITY_TOKEN_FILE), role arn:aws:iam::123456789012:role/trainer"* ]]
	# The token crosses plain http to STS: one warning line, no token.
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	[[ "$output" == *"a web identity token (from web identity (AWS_WEB_IDENTITY_TOKEN_FILE), role arn:aws:iam::123456789012:role/trainer) goes over plain http to STS at $CS, and the credentials STS returns come back the same way, readable on the way; use an https:// STS endpoint (AWS_ENDPOINT_URL_STS)"* ]]
	[[ "$output" != *"eyJ"* ]]
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 0
	[ "$(grep -c "a web identity token .* goes over plain http to STS at $CS" "$TMP/daemon.log")" -eq 1 ]
	check_mount 2 0
	[ "$(cs_stat webid)" -eq 2 ]	# info's, the mount's
	advance_to $(($(now) + $(secs 3)))	# past half of the 4 s life
	fresh_reads
	check_mount 2 0
	stop_mount
	echo "webid requests: $(cs_stat webid), refused: $(cs_stat refused)"
	[ "$(cs_stat webid)" -ge 3 ]
	[ "$(cs_stat refused)" -eq 0 ]
	# A token STS does not take: one line naming the source, no token.
	echo "eyJ.other.sig" >"$TMP/token2"
	AWS_WEB_IDENTITY_TOKEN_FILE=$TMP/token2 run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -ne 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"web identity"*"InvalidIdentityToken"* ]]
	[[ "$output" != *"eyJ"* ]]
	# Half the configuration is an error, not another source.
	AWS_ROLE_ARN= run "$CKPTFS" info s3://ck-creds/run
	[[ "$output" == *"AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not"* ]]
}

@test "s3 credentials: web identity against radosgw's own STS: AssumeRoleWithWebIdentity of a token from an OIDC provider on 127.0.0.1, checked by radosgw with the provider's keys; its credentials read info, a mount and ckptfs.load; a token of another key or audience is one line without the token" {
	oidcserver
	echo "role $WEBROLE, provider $(cat "$TMP/oidc/issuer")"
	oidc_token "$TMP/token" --aud ckptfs-app --sub trainer-3
	no_keys
	export AWS_WEB_IDENTITY_TOKEN_FILE=$TMP/token AWS_ROLE_ARN=$WEBROLE
	export AWS_ENDPOINT_URL_STS=$AWS_ENDPOINT_URL AWS_ROLE_SESSION_NAME=job-8
	run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"credentials	web identity (AWS_WEB_IDENTITY_TOKEN_FILE), role $WEBROLE"* ]]
	[[ "$output" == *"keys	10 "* ]]
	[[ "$output" != *"eyJ"* ]]
	# radosgw checked the token with the provider's published key
	echo "provider: configuration $(oidc_stat config), keys $(oidc_stat jwks)"
	[ "$(oidc_stat jwks)" -ge 1 ]
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 1 -d
	check_mount 2 1
	stop_mount
	grep -q "s3://ck-creds/run: credentials: web identity (AWS_WEB_IDENTITY_TOKEN_FILE), role $WEBROLE" "$TMP/daemon.log"
	! grep -q "eyJ" "$TMP/daemon.log" || false
	# The library: the same values as a load of the local copy.
	PYTHONPATH=$ROOT/scripts run $(direct_env) $PY -c "$PY_FLAT"'
import sys, warnings, numpy as np, ckptfs
warnings.simplefilter("ignore")
ref = flat(ckptfs.load(sys.argv[2], 2, 0, backend="numpy"))
sd = flat(ckptfs.load(sys.argv[1], 2, 0, backend="numpy"))
assert sorted(sd) == sorted(ref) and ref, (sorted(sd), sorted(ref))
for k in ref:
    assert np.array_equal(np.asarray(sd[k]), np.asarray(ref[k])), k
print(len(ref), "entries equal")
' s3://ck-creds/run "$S3TMP/ck"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"entries equal"* ]]
	# A token signed by another key, and one for another audience: radosgw
	# refuses them; one line naming the source, no token.
	local bad
	for bad in "--aud ckptfs-app --foreign" "--aud other-app"; do
		oidc_token "$TMP/token2" $bad --sub trainer-3
		AWS_WEB_IDENTITY_TOKEN_FILE=$TMP/token2 run "$CKPTFS" info s3://ck-creds/run
		echo "$bad: $output"
		[ "$status" -ne 0 ]
		[ "${#lines[@]}" -eq 1 ]
		[[ "$output" == *"web identity (AWS_WEB_IDENTITY_TOKEN_FILE), role $WEBROLE: STS AssumeRoleWithWebIdentity of role $WEBROLE at $AWS_ENDPOINT_URL: HTTP 403 AccessDenied"* ]]
		[[ "$output" != *"eyJ"* ]]
	done
}

@test "s3 credentials: EC2 instance metadata (IMDSv2: token, role, credentials) at AWS_EC2_METADATA_SERVICE_ENDPOINT; refreshed in the daemon; a refusal is one line" {
	credserver imds "$(secs 4)"
	no_keys
	unset AWS_EC2_METADATA_DISABLED
	export AWS_EC2_METADATA_SERVICE_ENDPOINT=$CS
	run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"credentials	EC2 instance metadata ($CS), role 'ckptfs-role'"* ]]
	[ "$(cs_stat token)" -eq 1 ]
	[ "$(cs_stat creds)" -eq 1 ]
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 1
	check_mount 2 1
	advance_to $(($(now) + $(secs 3)))
	fresh_reads
	check_mount 2 1
	stop_mount
	echo "tokens $(cs_stat token), credentials $(cs_stat creds)"
	[ "$(cs_stat creds)" -ge 3 ]
	[ "$(cs_stat token)" -ge 3 ]
	curl -sf -X POST -d deny "$CS/__mode"
	run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -ne 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"EC2 instance metadata at $CS: the credentials of role 'ckptfs-role': HTTP 403"* ]]
	# Disabled: not asked at all.
	local before
	before=$(cs_stat token)
	AWS_EC2_METADATA_DISABLED=true run "$CKPTFS" info s3://ck-creds/run
	[[ "$output" == *"no S3 credentials: tried"*"AWS_EC2_METADATA_DISABLED"* ]]
	[ "$(cs_stat token)" -eq "$before" ]
}

@test "s3 credentials: the container endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN); a wrong token or a remote http URI is one line without the token" {
	credserver ecs 3600 --auth "tok-Zx81-auth"
	no_keys
	echo "tok-Zx81-auth" >"$TMP/auth"
	export AWS_CONTAINER_CREDENTIALS_FULL_URI=$CS/creds
	AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=$TMP/auth run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"credentials	container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI)"* ]]
	export AWS_CONTAINER_AUTHORIZATION_TOKEN=tok-Zx81-auth
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 0
	check_mount 2 0
	stop_mount
	[ "$(cs_stat container)" -eq 2 ]
	AWS_CONTAINER_AUTHORIZATION_TOKEN=tok-wrong-Q7 run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -ne 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"container credentials at $CS/creds: HTTP 401"* ]]
	[[ "$output" != *"tok-"* ]]
	AWS_CONTAINER_CREDENTIALS_FULL_URI=http://192.0.2.1/creds run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[[ "$output" == *"only https, or http on a loopback address"* ]]
}

@test "s3 credentials: credential_process runs the profile's command (quoted arguments), each fetch once; its failure is one line without the secret" {
	cat >"$TMP/creds.sh" <<'EOF'
#!/bin/sh
echo run >>"$1"
[ "$2" = "two words" ] || exit 9
printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s"}\n' "$K" "$S"
EOF
	chmod +x "$TMP/creds.sh"
	cat >"$TMP/config" <<EOF
[default]
credential_process = $TMP/creds.sh $TMP/runs "two words"
[profile broken]
credential_process = sh -c 'echo "$S" >&2; exit 3'
[profile noversion]
credential_process = sh -c 'echo "{\\"AccessKeyId\\": \\"a\\", \\"SecretAccessKey\\": \\"b\\"}"'
EOF
	export K=$AWS_ACCESS_KEY_ID S=$AWS_SECRET_ACCESS_KEY
	export AWS_CONFIG_FILE=$TMP/config
	no_keys
	run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"credentials	credential_process of profile 'default'"* ]]
	[ "$(wc -l <"$TMP/runs")" -eq 1 ]
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 1
	check_mount 2 1
	stop_mount
	[ "$(wc -l <"$TMP/runs")" -eq 2 ]	# static keys: never again
	AWS_PROFILE=broken run "$CKPTFS" info s3://ck-creds/run 2>/dev/null
	echo "$output"
	[ "$status" -ne 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"credential_process of profile 'broken': 'sh' exited with status 3"* ]]
	[[ "$output" != *"$S"* ]]
	AWS_PROFILE=noversion run "$CKPTFS" info s3://ck-creds/run
	[[ "$output" == *"no \"Version\": 1"* ]]
}

@test "s3 credentials: never silently anonymous: no credentials is an error naming the sources; a named profile without credentials names what it lacks; a role without a source; a role STS refuses; --s3-no-sign-request reads a public bucket" {
	K0=$AWS_ACCESS_KEY_ID
	no_keys
	run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -ne 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"no S3 credentials: tried AWS_ACCESS_KEY_ID; AWS_WEB_IDENTITY_TOKEN_FILE; profile 'default'"*"AWS_CONTAINER_CREDENTIALS"*"EC2 instance metadata"*"--s3-no-sign-request"* ]]
	refuse_mount s3://ck-creds/run "no S3 credentials"
	printf '[profile dev]\nregion = us-east-1\n[profile norole]\nrole_arn = %s\n[profile bad]\nrole_arn = arn:aws:iam:::role/nosuchrole\nsource_profile = keys\n[profile keys]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
		"$ARN" "$K0" "$SECRET" >"$TMP/config"
	export AWS_CONFIG_FILE=$TMP/config
	AWS_PROFILE=dev run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[[ "$output" == *"S3 profile 'dev' (from AWS_PROFILE) in"*"yields no credentials: it has no aws_access_key_id, role_arn, web_identity_token_file or credential_process"* ]]
	run "$CKPTFS" info s3://ck-creds/run --s3-profile norole
	echo "$output"
	[[ "$output" == *"S3 profile 'norole' in $TMP/config has role_arn but neither source_profile nor credential_source"* ]]
	AWS_PROFILE=bad run "$CKPTFS" info s3://ck-creds/run
	echo "$output"
	[ "$status" -ne 0 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"profile 'bad': assume role arn:aws:iam:::role/nosuchrole"*"STS AssumeRole of role arn:aws:iam:::role/nosuchrole at $AWS_ENDPOINT_URL: HTTP"* ]]
	[[ "$output" != *"$SECRET"* ]]
	# A public bucket: unsigned only when asked.
	curl -sS --fail -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
		--user "$K0:$SECRET" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
		-H "x-amz-acl: public-read" "$AWS_ENDPOINT_URL/ck-public"
	for f in "$S3TMP"/ck/* "$S3TMP"/ck/.metadata; do
		curl -sS --fail -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
			--user "$K0:$SECRET" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
			-H "x-amz-acl: public-read" -T "$f" \
			"$AWS_ENDPOINT_URL/ck-public/run/$(basename "$f")"
	done
	unset AWS_CONFIG_FILE
	run "$CKPTFS" info s3://ck-public/run
	[ "$status" -ne 0 ]
	run "$CKPTFS" info s3://ck-public/run --s3-no-sign-request
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"credentials	none: unsigned requests (no_sign_request)"* ]]
	start_mount s3://ck-public/run "$MNT" --world 2 --rank 1 -o s3_no_sign_request
	check_mount 2 1
}

@test "s3 credentials: the library refreshes temporary credentials that expire while a ckptfs.open handle lives (EC2 metadata, 3 s expiry): loads after the expiry keep reading the local copy's values, with fresh sets from the server" {
	credserver imds "$(secs 3)"
	no_keys
	unset AWS_EC2_METADATA_DISABLED
	export AWS_EC2_METADATA_SERVICE_ENDPOINT=$CS
	PYTHONPATH=$ROOT/scripts run $(direct_env) $PY -c "$PY_FLAT"'
import os, sys, time, warnings, numpy as np, ckptfs
warnings.simplefilter("ignore")
ref = flat(ckptfs.load(sys.argv[2], 2, 1, backend="numpy"))
import json, urllib.request
def advance(s):
    """the clock of the credentials moves on by s seconds"""
    clock = os.environ["CKPTFS_TEST_CLOCK_FILE"]
    with open(clock) as f:
        off = int(f.read()) + s
    with open(clock + ".new", "w") as f:
        f.write(str(off))
    os.replace(clock + ".new", clock)
def served():
    with urllib.request.urlopen(sys.argv[4] + "/__stats") as r:
        return json.load(r)["creds"]
with ckptfs.open(sys.argv[1]) as ck:
    for i in range(3):
        if i:
            advance(int(sys.argv[3]))	# past the half-life of the set
        sd = flat(ck.load(2, 1, backend="numpy"))
        assert sorted(sd) == sorted(ref), (sorted(sd), sorted(ref))
        for k in ref:
            assert np.array_equal(np.asarray(sd[k]), np.asarray(ref[k])), k
        print("load", i, "ok", ck.io_stats()["requests"], "requests",
              flush=True)
        # the refresh this load started, in the background, is served
        for _ in range(int(sys.argv[5]) * 20):
            if served() >= i + 1:
                break
            time.sleep(0.05)
        print("sets served", served(), flush=True)
' s3://ck-creds/run "$S3TMP/ck" "$(secs 2)" "$CS" "$(secs 10)"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"load 2 ok"* ]]
	echo "credentials $(cs_stat creds)"
	[ "$(cs_stat creds)" -ge 3 ]
}

@test "s3 credentials: a refresh runs in the background: while credential_process is stuck in the refresh, reads through a mount and ckptfs.open's loads complete with the right bytes; released, its set is used after the first one's expiry; an unmount while it is stuck ends it at once" {
	local L t1 i cp_pid
	L=$(secs 16)	# refreshed after L/2; reads must not wait before L
	export K=$AWS_ACCESS_KEY_ID S=$AWS_SECRET_ACCESS_KEY
	export AWS_CONFIG_FILE=$TMP/config
	no_keys
	# Through a mount.
	blocked_creds mount "$L"
	printf '[default]\ncredential_process = %s\n' "$CP_CMD" >"$TMP/config"
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 1
	t1=$(now)
	check_mount 2 1
	[ "$(lines "$TMP/cp-mount/runs")" -eq 1 ]
	advance_to $((t1 + L / 2 + 1))	# the refresh is due
	fresh_reads
	# The read that notices starts the refresh and does not wait for it
	# (it would wait until release: the liveness bound catches that).
	run timeout "$(secs 6)" $REF check "$S3TMP/ck" "$MNT" --world 2 --rank 1
	echo "$output"
	[ "$status" -eq 0 ]
	for i in $(seq "$(polls 5)"); do
		[ -e "$TMP/cp-mount/blocked" ] && break
		sleep 0.05
	done
	[ -e "$TMP/cp-mount/blocked" ]			# the refresh runs...
	[ "$(lines "$TMP/cp-mount/served")" -eq 1 ]	# ...and is stuck
	touch "$TMP/cp-mount/release"
	for i in $(seq "$(polls 10)"); do
		[ "$(lines "$TMP/cp-mount/served")" -eq 2 ] && break
		sleep 0.05
	done
	[ "$(lines "$TMP/cp-mount/served")" -eq 2 ]
	advance_to $((t1 + L + 1))	# the first set has expired
	fresh_reads
	check_mount 2 1
	# The refreshed set (an hour's) signs: no third fetch.
	[ "$(lines "$TMP/cp-mount/runs")" -eq 2 ]
	stop_mount

	# Through the library: a load while the refresh is stuck.
	blocked_creds lib "$L"
	printf '[default]\ncredential_process = %s\n' "$CP_CMD" >"$TMP/config"
	PYTHONPATH=$ROOT/scripts run timeout "$(secs 60)" $(direct_env) $PY -c "$PY_FLAT"'
import os, sys, threading, time, warnings, numpy as np, ckptfs
warnings.simplefilter("ignore")
url, local, d, life, bound = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
clock = os.environ["CKPTFS_TEST_CLOCK_FILE"]
def now():
    with open(clock) as f:
        return time.time() + int(f.read())
def advance_to(t):
    off = int(t - time.time()) + 1
    with open(clock) as f:
        if off <= int(f.read()):
            return
    with open(clock + ".new", "w") as f:
        f.write(str(off))
    os.replace(clock + ".new", clock)
ref = flat(ckptfs.load(local, 2, 1, backend="numpy"))
def lines(name):
    try:
        with open(os.path.join(d, name)) as f:
            return len(f.readlines())
    except FileNotFoundError:
        return 0
def check(ck, what):
    got = {}
    t = threading.Thread(target=lambda: got.update(flat(ck.load(2, 1, backend="numpy"))), daemon=True)
    t.start()
    t.join(bound)
    if t.is_alive():
        print(what, "still loading after", bound, "s", flush=True)
        os._exit(1)
    assert sorted(got) == sorted(ref), (sorted(got), sorted(ref))
    for k in ref:
        assert np.array_equal(np.asarray(got[k]), np.asarray(ref[k])), k
    print(what, "ok", flush=True)
with ckptfs.open(url) as ck:
    t1 = now()
    check(ck, "load 1")
    advance_to(t1 + life / 2 + 1)
    check(ck, "load while the refresh is due")
    for i in range(int(bound * 40)):	# the refresh has started...
        if os.path.exists(os.path.join(d, "blocked")):
            break
        time.sleep(0.05)
    assert os.path.exists(os.path.join(d, "blocked"))
    assert lines("served") == 1		# ...and is held
    open(os.path.join(d, "release"), "w").close()
    for i in range(int(bound * 40)):
        if lines("served") == 2:
            break
        time.sleep(0.05)
    assert lines("served") == 2
    advance_to(t1 + life + 1)
    check(ck, "load after the first set expired")
    assert lines("runs") == 2, lines("runs")
print("fetches", lines("runs"))
' s3://ck-creds/run "$S3TMP/ck" "$TMP/cp-lib" "$L" "$(secs 6)"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"load while the refresh is due ok"* ]]
	[[ "$output" == *"fetches 2"* ]]

	# An unmount while the refresh is stuck: the daemon kills the
	# command and exits 0 at once (stop_mount's bound), not after the
	# command's 60 s.
	blocked_creds stuck "$L"
	printf '[default]\ncredential_process = %s\n' "$CP_CMD" >"$TMP/config"
	start_mount s3://ck-creds/run "$MNT" --world 2 --rank 1
	t1=$(now)
	advance_to $((t1 + L / 2 + 1))	# the refresh is due
	fresh_reads
	run timeout "$(secs 6)" $REF check "$S3TMP/ck" "$MNT" --world 2 --rank 1
	[ "$status" -eq 0 ]
	for i in $(seq "$(polls 5)"); do
		[ -s "$TMP/cp-stuck/pid" ] && break
		sleep 0.05
	done
	cp_pid=$(cat "$TMP/cp-stuck/pid")
	kill -0 "$cp_pid"
	stop_mount
	for i in $(seq "$(polls 2)"); do
		kill -0 "$cp_pid" 2>/dev/null || break
		sleep 0.05
	done
	! kill -0 "$cp_pid" 2>/dev/null || false
	[ ! -e "$TMP/cp-stuck/release" ]
	[ "$(lines "$TMP/cp-stuck/served")" -eq 1 ]
}
