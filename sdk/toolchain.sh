# Sourced by sdk/c/capsule-c, sdk/go/capsule-go and sdk/zig/capsule-zig: the WebAssembly
# tools they share, installed once into this checkout's target/tools from the package
# registries.
#   capsule_tools         wit-bindgen-cli (C and Go generators only) and wasm-tools (component
#                         commands only), cargo-installed on first use; sets $wit_bindgen and
#                         $wasm_tools
#   capsule_adapter       the WASI preview1 reactor adapter of the host's wasmtime version;
#                         sets $adapter
#   capsule_crate_dir C V prints where crate C, version V, is unpacked (downloading it)
#   capsule_c_bindings    `wit-bindgen c` of the `plugin` world in target/c-gen, made again
#                         when wit/ changes; sets $gen
#   capsule_quiet CMD...  runs CMD, showing its output only if it fails
# Callers set $root (the checkout) first.

capsule_tools() {
  local tools="$root/target/tools"
  wit_bindgen="$tools/bin/wit-bindgen"
  wasm_tools="$tools/bin/wasm-tools"
  # An older checkout may hold a wit-bindgen built with the C generator alone.
  if [ ! -x "$wit_bindgen" ] || ! "$wit_bindgen" go --help >/dev/null 2>&1; then
    cargo install -q --locked --force wit-bindgen-cli@0.63.0 --no-default-features --features c,go \
      --root "$tools" >&2
  fi
  [ -x "$wasm_tools" ] ||
    cargo install -q --locked wasm-tools@1.263.0 --no-default-features --features component --root "$tools" >&2
}

capsule_crate_dir() {
  local name="$1" version="$2"
  local fetch="$root/target/tools/fetch-$name"
  mkdir -p "$fetch/src"
  # Resolving a manifest that depends on the crate downloads and unpacks it.
  printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s = "=%s"\n\n[workspace]\n' \
    "$name" "$version" >"$fetch/Cargo.toml"
  : >"$fetch/src/lib.rs"
  cargo metadata -q --format-version 1 --manifest-path "$fetch/Cargo.toml" |
    python3 -c 'import json, os, sys
name = sys.argv[1]
print(os.path.dirname(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == name)))' "$name"
}

capsule_adapter() {
  adapter="$root/target/tools/wasi_snapshot_preview1.reactor.wasm"
  if [ ! -s "$adapter" ]; then
    cp "$(capsule_crate_dir wasi-preview1-component-adapter-provider 48.0.8)/artefacts/wasi_snapshot_preview1.reactor.wasm" \
      "$adapter"
  fi
}

capsule_c_bindings() {
  gen="$root/target/c-gen"
  if [ ! -e "$gen/plugin_component_type.o" ] ||
    [ -n "$(find "$root/wit" -newer "$gen/plugin_component_type.o" -print -quit)" ]; then
    capsule_quiet "$wit_bindgen" c "$root/wit" --world plugin --out-dir "$gen"
    touch "$gen/plugin_component_type.o"
  fi
}

capsule_quiet() {
  local output
  output="$("$@" 2>&1)" || { printf '%s\n' "$output" >&2; return 1; }
}
