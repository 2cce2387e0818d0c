#!/usr/bin/env bats
# SPDX-License-Identifier: MIT
# S3 over HTTPS (issue 28, part 2): one radosgw (tests/s3/suite.bash) that
# serves http and, through beast's ssl_endpoint, https with a server
# certificate of a CA made at test time (tests/s3/rgw.sh RGW_TLS=1).  The
# core cases over https (info, cat, a mount, ckptfs.load, STS AssumeRole)
# against the numpy reference or the local copy; the CA settings in the AWS
# tools' precedence; a certificate not trusted as one line naming the host
# and curl's reason, never retried, never tried over http.

load helpers
load ../s3/suite

setup_file() {
	export RGW_TLS=1 RGW_STS=1
	s3_setup_file || return 1
	$PY "$ROOT/scripts/gen_ckpt.py" --seed 41 --keys 12 --files 3 \
		"$S3TMP/ck" >/dev/null
	upload "$S3TMP/ck" ck-tls/run
}
teardown_file() { s3_teardown_file; }

setup() {
	common_setup
	HTTPS=$(cat "$S3TMP/rgw/https_url")
	CA=$S3TMP/rgw/tls/ca.pem
	OTHER=$S3TMP/rgw/tls/other-ca.pem
	HOSTPORT=${HTTPS#https://}
	export AWS_ENDPOINT_URL=$HTTPS
	mkdir -p "$TMP/home"
	export HOME=$TMP/home
	unset AWS_CA_BUNDLE AWS_CONFIG_FILE AWS_PROFILE
}
teardown() { common_teardown; }

# untrusted OUTPUT: one line naming the root, the host and curl's reason,
# tried once.
untrusted() {
	[ "$status" -eq 1 ]
	[ "$(wc -l <<<"$1")" -eq 1 ]
	[[ "$1" == "ckptfs: s3://ck-tls/run: TLS to $HOSTPORT: SSL certificate problem: "* ]]
	[[ "$1" != *"gave up after"* ]]
}

@test "s3 tls: info, cat, a mount and ckptfs.load over https (--s3-ca-bundle, -o s3_ca_bundle, AWS_CA_BUNDLE, s3_ca_bundle=) equal the local copy and the numpy reference" {
	run "$CKPTFS" info s3://ck-tls/run --s3-ca-bundle "$CA"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"data files	3"* ]]
	"$CKPTFS" ls "$S3TMP/ck" --world 3 --rank 1 | awk 'NR > 1 {print $1}' >"$TMP/keys"
	[ -s "$TMP/keys" ]
	while read -r k; do
		"$CKPTFS" cat "$S3TMP/ck" "$k" --world 3 --rank 1 >"$TMP/a"
		"$CKPTFS" cat s3://ck-tls/run "$k" --world 3 --rank 1 --s3-ca-bundle "$CA" >"$TMP/b"
		cmp "$TMP/a" "$TMP/b"
	done <"$TMP/keys"
	start_mount s3://ck-tls/run "$MNT" --world 3 --rank 1 -o s3_ca_bundle="$CA"
	run $REF check "$S3TMP/ck" "$MNT" --world 3 --rank 1
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	AWS_CA_BUNDLE=$CA run $(direct_env) $PY "$ROOT/tests/direct_checks.py" ref s3://ck-tls/run 4 2 "$S3TMP/ck"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *", 0 problems"* ]]
	PYTHONPATH=$ROOT/scripts run $(direct_env) $PY -c 'import sys, ckptfs
with ckptfs.open(sys.argv[1], s3_ca_bundle=sys.argv[2]) as c:
    st = c.io_stats()
    print(c.info().nfiles, "connects" in st, st["requests"] > 0)' s3://ck-tls/run "$CA"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == "3 True True" ]]
}

@test "s3 tls: no CA given (the system's store), a wrong CA bundle: one line naming the host and curl's reason, tried once; never over http" {
	run "$CKPTFS" info s3://ck-tls/run
	echo "$output"
	untrusted "$output"
	run "$CKPTFS" info s3://ck-tls/run --s3-ca-bundle "$OTHER"
	echo "$output"
	untrusted "$output"
	AWS_CA_BUNDLE=$OTHER run "$CKPTFS" info s3://ck-tls/run
	untrusted "$output"
	refuse_mount s3://ck-tls/run "TLS to $HOSTPORT: SSL certificate problem"
	PYTHONPATH=$ROOT/scripts run $(direct_env) $PY -c 'import sys, ckptfs
try:
    ckptfs.open(sys.argv[1], s3_ca_bundle=sys.argv[2])
except ckptfs.CheckpointError as e:
    print(e)' s3://ck-tls/run "$OTHER"
	echo "$output"
	[[ "$output" == *"s3://ck-tls/run: TLS to $HOSTPORT: SSL certificate problem: "* ]]
	# A bundle that is not there is named with where it came from.
	run "$CKPTFS" info s3://ck-tls/run --s3-ca-bundle "$TMP/none.pem"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"S3 CA bundle from the ca_bundle option: $TMP/none.pem: No such file or directory" ]]
	AWS_CA_BUNDLE=$TMP/none.pem run "$CKPTFS" info s3://ck-tls/run
	[[ "$output" == *"S3 CA bundle from AWS_CA_BUNDLE: $TMP/none.pem: No such file or directory" ]]
}

@test "s3 tls: the certificate's names are checked: a host it names (localhost) passes TLS, one it does not is one line naming the host and curl's reason, with the right CA, tried once" {
	local port=${HOSTPORT##*:}
	# The same radosgw, reached by two names through libcurl's CONNECT_TO
	# (no system file touched): the test CA trusts its certificate, which
	# names 127.0.0.1 and localhost only.
	# radosgw serves the Host 127.0.0.1 (rgw_dns_name) and takes another
	# Host for a bucket's name: through localhost, the TLS handshake
	# passes and radosgw itself answers.
	CKPT_S3_CONNECT_TO="localhost:$port:127.0.0.1:$port" \
		run "$CKPTFS" info s3://ck-tls/run --s3-ca-bundle "$CA" --s3-endpoint "https://localhost:$port" --s3-retries 0
	echo "$output"
	[[ "$output" != *"TLS to"* ]]
	[[ "$output" == *"at https://localhost:$port (HTTP 404 NoSuchBucket)"* ]]
	CKPT_S3_CONNECT_TO="wrong.ckptfs.test:$port:127.0.0.1:$port" \
		run "$CKPTFS" info s3://ck-tls/run --s3-ca-bundle "$CA" --s3-endpoint "https://wrong.ckptfs.test:$port"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$(wc -l <<<"$output")" -eq 1 ]
	[[ "$output" == "ckptfs: s3://ck-tls/run: TLS to wrong.ckptfs.test:$port: "*"wrong.ckptfs.test"* ]]
	[[ "$output" != *"gave up after"* ]]
	export CKPT_S3_CONNECT_TO="wrong.ckptfs.test:$port:127.0.0.1:$port"
	refuse_mount s3://ck-tls/run "TLS to wrong.ckptfs.test:$port: " -o s3_ca_bundle="$CA" -o s3_endpoint="https://wrong.ckptfs.test:$port"
}

@test "s3 tls: the CA bundle in the AWS tools' precedence: the option over AWS_CA_BUNDLE over the profile's ca_bundle" {
	printf '[default]\nca_bundle = %s\n' "$CA" >"$TMP/config"
	export AWS_CONFIG_FILE=$TMP/config
	run "$CKPTFS" info s3://ck-tls/run
	echo "$output"
	[ "$status" -eq 0 ]
	AWS_CA_BUNDLE=$OTHER run "$CKPTFS" info s3://ck-tls/run
	untrusted "$output"
	AWS_CA_BUNDLE=$OTHER run "$CKPTFS" info s3://ck-tls/run --s3-ca-bundle "$CA"
	[ "$status" -eq 0 ]
	printf '[profile p]\nca_bundle = %s\n' "$OTHER" >"$TMP/config"
	AWS_PROFILE=p run "$CKPTFS" info s3://ck-tls/run
	untrusted "$output"
	AWS_PROFILE=p AWS_CA_BUNDLE=$CA run "$CKPTFS" info s3://ck-tls/run
	[ "$status" -eq 0 ]
}

# role_profiles ARN [LINE]: a config file's profile 'base' (the user's
# static keys) and profile 'dev' assuming role ARN with it, LINE added to
# 'dev'.
role_profiles() {
	printf '[profile base]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
		"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY"
	printf '[profile dev]\nrole_arn = %s\nsource_profile = base\n' "$1"
	[ -z "${2:-}" ] || printf '%s\n' "$2"
}

@test "s3 tls: STS AssumeRole over https with the CA bundle; without it, one line naming STS and the host" {
	local arn
	arn=$(cat "$S3TMP/rgw/role_arn")
	role_profiles "$arn" >"$TMP/config"
	local secret=$AWS_SECRET_ACCESS_KEY
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
	export AWS_CONFIG_FILE=$TMP/config AWS_PROFILE=dev AWS_ENDPOINT_URL_STS=$HTTPS
	AWS_CA_BUNDLE=$CA run "$CKPTFS" info s3://ck-tls/run
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"assume role $arn"* ]]
	start_mount s3://ck-tls/run "$MNT" --world 2 --rank 0 -o s3_ca_bundle="$CA"
	run $REF check "$S3TMP/ck" "$MNT" --world 2 --rank 0
	echo "$output"
	stop_mount
	[ "$status" -eq 0 ]
	run "$CKPTFS" info s3://ck-tls/run
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"STS AssumeRole at $HTTPS: no answer: SSL certificate problem: "* ]]
	[[ "$output" != *"$secret"* ]]
}

@test "s3 tls: connections and TLS sessions reused: 12 loads over https with 2 GETs in flight at most make 2 connections at most (io_stats()['connects'])" {
	AWS_CA_BUNDLE=$CA run $(direct_env) $PY "$ROOT/tests/direct_checks.py" reuse s3://ck-tls/run 10
	echo "$output"
	[ "$status" -eq 0 ]
	# and over http, the same
	AWS_ENDPOINT_URL=$S3CHECK_PROXY run $(direct_env) $PY "$ROOT/tests/direct_checks.py" reuse s3://ck-tls/run 10
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "s3 tls: a session token sent over plain http:// draws one warning line (ckptfs info, the daemon's log, Python warnings), none over https or without a token" {
	local arn secret=$AWS_SECRET_ACCESS_KEY http
	arn=$(cat "$S3TMP/rgw/role_arn")
	http=http://127.0.0.1:$(cat "$S3TMP/rgw/rgw.port")
	role_profiles "$arn" "ca_bundle = $CA" >"$TMP/config"
	# Static keys over http: no token, no warning.
	run "$CKPTFS" info s3://ck-tls/run --s3-endpoint "$http"
	[ "$status" -eq 0 ]
	[[ "$output" != *"warning"* ]]
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
	export AWS_CONFIG_FILE=$TMP/config AWS_PROFILE=dev AWS_ENDPOINT_URL_STS=$HTTPS
	run "$CKPTFS" info s3://ck-tls/run --s3-endpoint "$http"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c warning <<<"$output")" -eq 1 ]
	grep -qx "ckptfs: warning: s3://ck-tls/run: a session token (from profile 'dev': assume role $arn (with profile 'base' in $TMP/config)) goes over plain http to $http, readable on the way; use an https:// endpoint" <<<"$output"
	[[ "$output" != *"$secret"* ]]
	# Over https: none.
	run "$CKPTFS" info s3://ck-tls/run
	[ "$status" -eq 0 ]
	[[ "$output" != *"warning"* ]]
	start_mount s3://ck-tls/run "$MNT" --world 2 --rank 1 -o s3_endpoint="$http"
	stop_mount
	[ "$(grep -c "warning: s3://ck-tls/run: a session token" "$TMP/daemon.log")" -eq 1 ]
	PYTHONPATH=$ROOT/scripts run $(direct_env) $PY -c 'import sys, warnings, ckptfs
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with ckptfs.open(sys.argv[1], s3_endpoint=sys.argv[2]) as c:
        pass
    print(len(w), w[0].message if w else "")' s3://ck-tls/run "$http"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == "1 ckptfs: s3://ck-tls/run: a session token"*"goes over plain http to $http"* ]]
}
