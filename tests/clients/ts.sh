#!/usr/bin/env bash
# Run one of the TypeScript SDK client scripts here with the official SDK, installed where the
# shared smoke script keeps it.
#   ts.sh ts_updates.mjs ROOT_DIR URL
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${MCP_TS_SMOKE_CACHE:-/tmp/mcp-smoke-ts}"
want="${MCP_TS_SDK_VERSION:-1.32.2}"
mkdir -p "$cache"
have="$(node -p "try{require('$cache/node_modules/@modelcontextprotocol/sdk/package.json').version}catch{''}" 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  [ -f "$cache/package.json" ] || echo '{"private":true,"type":"module"}' >"$cache/package.json"
  (cd "$cache" && npm install --no-audit --no-fund --loglevel=error "@modelcontextprotocol/sdk@$want" >&2)
fi
# ESM resolves bare imports relative to the script file, so run a copy beside node_modules.
script="$1"
shift
cp "$here/$script" "$cache/$script"
exec node "$cache/$script" "$@"
