#!/usr/bin/env bash
# An OTLP/HTTP trace receiver built on the OpenTelemetry project's own protobuf messages
# (PyPI opentelemetry-proto), in a venv of its own under target/. Prints its port, then one
# JSON line per span received.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/../../target/otlp-venv"
want="1.45.2"
# Tests start several receivers at once: one makes the venv while the others wait.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv" >&2
have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))' 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "opentelemetry-proto==$want" >&2
fi
exec 9>&-
exec "$venv/bin/python" -u "$here/otlp_receiver.py" "$@"
