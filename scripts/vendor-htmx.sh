#!/usr/bin/env bash
# Maintainer script: fetches htmx and its SSE extension from the npm
# registry with `npm pack` and copies the minified files into
# internal/web/static. Neither the build nor CI runs it: the files are
# committed, and internal/web/static/VENDOR records their versions and
# SHA-256 sums (a Go test checks the files against it).
#
#   scripts/vendor-htmx.sh            re-fetch the pinned versions, check the sums
#   scripts/vendor-htmx.sh --update   fetch HTMX_VERSION/SSE_VERSION and rewrite VENDOR
set -euo pipefail
cd "$(dirname "$0")/.."

HTMX_VERSION=${HTMX_VERSION:-2.0.11}
SSE_VERSION=${SSE_VERSION:-2.2.4}
static=internal/web/static
vendor=$static/VENDOR

update=false
if [ "${1:-}" = "--update" ]; then update=true; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fetch PACKAGE VERSION PATH-IN-TARBALL DEST
fetch() {
  (cd "$work" && npm pack --silent "$1@$2" >/dev/null)
  tarball=$(ls "$work"/*.tgz)
  tar -xzf "$tarball" -C "$work" "package/$3"
  cp "$work/package/$3" "$static/$4"
  rm -rf "$tarball" "$work/package"
}

fetch htmx.org "$HTMX_VERSION" dist/htmx.min.js htmx.min.js
fetch htmx-ext-sse "$SSE_VERSION" dist/sse.min.js htmx-ext-sse.min.js

if $update; then
  {
    echo "# Vendored by scripts/vendor-htmx.sh from the npm registry; do not edit by hand."
    echo "# file package version sha256"
    echo "htmx.min.js htmx.org $HTMX_VERSION $(sha256sum "$static/htmx.min.js" | cut -d' ' -f1)"
    echo "htmx-ext-sse.min.js htmx-ext-sse $SSE_VERSION $(sha256sum "$static/htmx-ext-sse.min.js" | cut -d' ' -f1)"
  } >"$vendor"
  echo "wrote $vendor"
fi

# Check every file against VENDOR.
status=0
while read -r file pkg version sum; do
  case "$file" in ''|'#'*) continue ;; esac
  got=$(sha256sum "$static/$file" | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    echo "$file ($pkg $version): sha256 $got, VENDOR says $sum" >&2
    status=1
  fi
done <"$vendor"
exit $status
