#!/usr/bin/env bash
# Run Capsule's whole test suite: unit tests of every crate, and the integration tests that
# drive the real binary with the official conformance suite, the Python and TypeScript SDK
# clients and raw HTTP (they need ../shared/tools beside the repository, Node and Python;
# the shared scripts install the npm and PyPI packages they need on first use).
set -euo pipefail
cd "$(dirname "$0")/.."


# The examples written with the non-Rust SDKs (the integration tests load them), and the
# Python, JavaScript and C SDKs' own unit tests, natively (the JS ones include type-level
# tests; the C JSON reader runs under AddressSanitizer and UBSan).
plugins/build-examples.sh
(cd sdk/python && ../../target/sdk-venv/python/bin/python -m unittest discover -s tests)
(cd sdk/js && node --test test/ && ../../plugins/js/node_modules/.bin/tsc -p test)
mkdir -p target/c-build
cc -std=c99 -Wall -Wextra -Werror -fsanitize=address,undefined -o target/c-build/json_test sdk/c/test/json_test.c -lm
target/c-build/json_test

# Host, catalog, runtime and the integration tests (building the host builds every plugin).
cargo test --release --workspace

# Crates outside the host workspace: the shared URI-template matcher, the SDK, and the
# plugins' own unit tests (run natively; their WebAssembly builds are exercised above).
# Their native builds share target/native rather than littering their source folders.
cargo test --release --target-dir target/native --manifest-path sdk/template/Cargo.toml
cargo test --release --target-dir target/native --manifest-path sdk/Cargo.toml
(cd plugins && cargo test --release --target-dir ../target/native --workspace)
