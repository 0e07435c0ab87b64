#!/usr/bin/env bash
# Run one of the Python client scripts here with the official Python SDK, in the venv the
# shared smoke script uses.
#   py.sh py_roots.py --mode legacy|auto --root DIR --outside DIR [--read-only] URL
#   py.sh py_updates.py --root DIR URL
#   py.sh py_stdio_close.py COMMAND [ARG...]  (MCP_PY_VERSION picks another SDK version)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${MCP_PY_SMOKE_CACHE:-/tmp/mcp-smoke-py}"
want="${MCP_PY_VERSION:-2.3.0}"
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv" >&2
have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "mcp==$want" >&2
fi
script="$1"
shift
exec "$venv/bin/python" "$here/$script" "$@"
