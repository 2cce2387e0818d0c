# SPDX-License-Identifier: MIT
# Sourced by the test servers' scripts (tests/s3/rgw.sh,
# tests/azure/azurite.sh); needs their die().

# make_certs DIR LOG: a CA, a server certificate it signs (IP:127.0.0.1,
# DNS:localhost) and an unrelated CA, made anew in DIR (EC keys: quick);
# openssl's output goes to LOG.
make_certs() {
	local t=$1 log=$2 ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	mkdir -p "$t"
	openssl req -x509 "${ec[@]}" -keyout "$t/ca.key" -out "$t/ca.pem" \
		-days 2 -subj "/CN=ckptfs test CA" 2>>"$log" &&
	openssl req -x509 "${ec[@]}" -keyout "$t/other-ca.key" \
		-out "$t/other-ca.pem" -days 2 -subj "/CN=ckptfs other CA" \
		2>>"$log" &&
	openssl req "${ec[@]}" -keyout "$t/server.key" -out "$t/server.csr" \
		-subj "/CN=localhost" 2>>"$log" &&
	printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" \
		"basicConstraints=CA:FALSE" "extendedKeyUsage=serverAuth" \
		>"$t/server.ext" &&
	openssl x509 -req -in "$t/server.csr" -CA "$t/ca.pem" \
		-CAkey "$t/ca.key" -CAcreateserial -out "$t/server.pem" \
		-days 2 -extfile "$t/server.ext" >>"$log" 2>&1 ||
		die "openssl could not make the certificates; see $log"
}
