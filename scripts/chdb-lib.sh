#!/usr/bin/env bash
# Fetches the current ClickHouse engine that `make test` runs every SQL
# statement and docs/sql.md recipe on: chDB (ClickHouse 26.7 in-process, a
# shared library) from the npm package @chdb/lib-linux-x64-gnu, pinned by
# version and SHA-256. Prints the path of libchdb.so on its last line; the
# chDB tests (build tag chdb) load it through CHDB_LIB_PATH:
#
#   CHDB_LIB_PATH=$(bash scripts/chdb-lib.sh) go test -tags chdb ./release/...
#
# The library (about 540 MB unpacked) is cached in
# ${CROWDLOG_CACHE:-$HOME/.cache/crowdlog}/chdb/<version>/ and fetched once.
# Needs npm (installed with apt-get when missing and running as root).
set -euo pipefail
VERSION=26.7.3-stable.1
SHA256=c0d32b129e988f2b9a9a31c9141aecf5e1e2453f9a079efc4d36ab8e3f92b2ad
dir="${CROWDLOG_CACHE:-$HOME/.cache/crowdlog}/chdb/$VERSION"
lib="$dir/libchdb.so"
if [ -s "$lib" ]; then echo "$lib"; exit 0; fi
if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "chdb-lib: npm is needed to fetch @chdb/lib-linux-x64-gnu@$VERSION: install npm (apt-get install npm)" >&2
    exit 1
  fi
  echo "chdb-lib: installing npm" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "chdb-lib: fetching @chdb/lib-linux-x64-gnu@$VERSION (about 180 MB)" >&2
(cd "$tmp" && npm pack --silent "@chdb/lib-linux-x64-gnu@$VERSION" >/dev/null)
tgz=$(ls "$tmp"/*.tgz)
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  echo "chdb-lib: $tgz has SHA-256 $got, want $SHA256: refusing it" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$tmp" package/libchdb.so
mkdir -p "$dir"
mv "$tmp/package/libchdb.so" "$lib.part"
mv "$lib.part" "$lib"
echo "$lib"
