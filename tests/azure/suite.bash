# SPDX-License-Identifier: MIT
# Shared by the Azure suites (tests/bats/azure*.bats): an Azurite of the
# suite's own (tests/azure/azurite.sh: 127.0.0.1, a port the kernel picks,
# data in memory, state in $AZTMP/azurite) with the Shared Key variables
# of its well-known account exported and container ckpt made.

AZ=devstoreaccount1

# az_setup_file: $AZTMP and the Azurite in it.
az_setup_file() {
	AZTMP=$(mktemp -d "${BATS_TMPDIR:-/tmp}/ckptfs-az.XXXXXX")
	export AZTMP
	"$ROOT/tests/azure/azurite.sh" start "$AZTMP/azurite" || return 1
	# shellcheck disable=SC1091
	. "$AZTMP/azurite/env"
	export AZURE_STORAGE_ACCOUNT AZURE_STORAGE_KEY AZURE_STORAGE_BLOB_ENDPOINT
	unset AZURE_STORAGE_SAS_TOKEN AZURE_STORAGE_CONNECTION_STRING
	"$ROOT/tests/azure/azurite.sh" mkcontainer "$AZTMP/azurite" ckpt
}

# az_teardown_file: stops Azurite, removes $AZTMP.
az_teardown_file() {
	"$ROOT/tests/azure/azurite.sh" stop "$AZTMP/azurite"
	rm -rf "$AZTMP"
}

# azput CONTAINER/PREFIX DIR: every file under DIR, as blobs (Shared Key,
# tests/azure/azblob.py).
azput() {
	$PY "$ROOT/tests/azure/azblob.py" putdir "$1" "$2"
}
