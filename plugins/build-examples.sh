#!/usr/bin/env bash
# Build the example plugins written with the non-Rust SDKs into target/plugins/lang/, each
# with the toolchain its SDK uses, installed from the package registries on first use:
#   python.wasm  plugins/python/app.py with sdk/python (componentize-py, in target/sdk-venv)
#   js.wasm      plugins/js/app.ts with sdk/js (componentize-js and rolldown from npm),
#                type-checked with tsc first
#   c.wasm       plugins/c/plugin.c with sdk/c (clang-19, wit-bindgen, wasm-tools)
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

# C: clang-19 with Debian's wasi-libc (wasm32-wasi, so the component gets WASI 0.2 through the
# reactor adapter of the host's own wasmtime version), bindings from wit-bindgen-cli and the
# component from wasm-tools (both cargo-installed into target/tools with only the features
# needed: a few minutes, once).
tools="$PWD/target/tools"
if ! command -v clang-19 >/dev/null || [ ! -d /usr/lib/wasm32-wasi ]; then
  echo "build-examples: the C example needs clang-19, lld-19, libclang-rt-19-dev-wasm32 and wasi-libc (apt-get install)" >&2
  exit 1
fi
[ -x "$tools/bin/wit-bindgen" ] ||
  cargo install -q --locked wit-bindgen-cli@0.63.0 --no-default-features --features c --root "$tools"
[ -x "$tools/bin/wasm-tools" ] ||
  cargo install -q --locked wasm-tools@1.263.0 --no-default-features --features component --root "$tools"
adapter="$tools/wasi_snapshot_preview1.reactor.wasm"
if [ ! -s "$adapter" ]; then
  # The adapter ships as a file inside this crate; resolving a manifest that depends on it
  # downloads and unpacks it.
  fetch="$tools/adapter-fetch"
  mkdir -p "$fetch/src"
  printf '[package]\nname = "adapter-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nwasi-preview1-component-adapter-provider = "=48.0.8"\n\n[workspace]\n' >"$fetch/Cargo.toml"
  : >"$fetch/src/lib.rs"
  provider="$(cargo metadata -q --format-version 1 --manifest-path "$fetch/Cargo.toml" |
    python3 -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "wasi-preview1-component-adapter-provider"))')"
  cp "$(dirname "$provider")/artefacts/wasi_snapshot_preview1.reactor.wasm" "$adapter"
fi
gen=target/c-gen
if stale "$gen/plugin_component_type.o" wit; then
  "$tools/bin/wit-bindgen" c wit --world plugin --out-dir "$gen" >/dev/null
  touch "$gen/plugin_component_type.o"
fi
if stale "$out/c.wasm" plugins/c sdk/c/capsule.h sdk/c/capsule_json.h "$gen/plugin_component_type.o"; then
  mkdir -p target/c-build
  clang-19 --target=wasm32-wasi --sysroot=/usr -std=c11 -Wall -Wextra -Werror -Oz -s -mexec-model=reactor \
    -I "$gen" -I sdk/c -o target/c-build/c-core.wasm plugins/c/plugin.c "$gen/plugin.c" "$gen/plugin_component_type.o"
  "$tools/bin/wasm-tools" component new target/c-build/c-core.wasm \
    --adapt "wasi_snapshot_preview1=$adapter" -o "$out/c.wasm"
fi
