//! Builds every plugin in `plugins/` for `wasm32-wasip2` and leaves each component at
//! `target/plugins/<name>.wasm` (an interface tests and the benchmark rely on); test-only
//! plugins from `plugins/testing/` land in `target/plugins/testing/`. The bundled
//! example plugins are then embedded in the `capsule` binary.
//!
//! The nested cargo uses its own target directory (`target/wasm`) so it never waits on the
//! lock of the build that runs this script.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Plugins compiled into the binary and served when no plugin flag is given.
const BUNDLED: &[&str] = &["calc", "fetch", "files", "textkit"];

/// The other languages' SDKs and examples, built by plugins/build-examples.sh, not here.
const OTHER_LANGUAGES: &[&str] = &[
    "plugins/c",
    "plugins/go",
    "plugins/js",
    "plugins/python",
    "plugins/zig",
    "sdk/c",
    "sdk/go",
    "sdk/js",
    "sdk/python",
    "sdk/zig",
    "sdk/toolchain.sh",
];

/// The target plugins are built for.
const WASM_TARGET: &str = "wasm32-wasip2";

fn main() -> Result<()> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest_dir.parent().context("host/ has a parent")?.to_path_buf();
    let target = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let target = if target.is_absolute() { target } else { root.join(target) };

    let other_languages: Vec<PathBuf> = OTHER_LANGUAGES.iter().map(|dir| root.join(dir)).collect();
    for dir in ["plugins", "sdk", "wit"] {
        watch(&root.join(dir), &other_languages)?;
    }

    ensure_wasm_target()?;
    let wasm_target = target.join("wasm");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root.join("plugins"))
        .args(["build", "--release", "--target", WASM_TARGET, "--target-dir"])
        .arg(&wasm_target);
    // Settings meant for the host build must not leak into the plugin build.
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().context("running cargo for the plugins")?;
    if !status.success() {
        bail!("building the plugins for {WASM_TARGET} failed ({status})");
    }

    // Test-only plugins (plugins/testing/*) go to a subdirectory, so serving
    // target/plugins never picks them up.
    let testing: Vec<String> = fs::read_dir(root.join("plugins").join("testing"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().replace('-', "_"))
        .collect();
    let built = wasm_target.join(WASM_TARGET).join("release");
    let out = target.join("plugins");
    fs::create_dir_all(out.join("testing"))?;
    for entry in fs::read_dir(&built)? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else { continue };
        if path.extension().is_some_and(|e| e == "wasm") {
            let dir = if testing.contains(&stem) { out.join("testing") } else { out.clone() };
            copy_if_changed(&path, &dir.join(format!("{}.wasm", stem.replace('_', "-"))))?;
        }
    }

    let mut bundled = String::from("/// Example plugins compiled into the binary: (name, component bytes).\n");
    bundled.push_str("pub const BUNDLED: &[(&str, &[u8])] = &[\n");
    for name in BUNDLED {
        let file = out.join(format!("{name}.wasm"));
        if !file.exists() {
            bail!("bundled plugin {name} was not built: {} is missing", file.display());
        }
        bundled.push_str(&format!("    ({name:?}, include_bytes!({:?})),\n", file.display().to_string()));
    }
    bundled.push_str("];\n");
    fs::write(PathBuf::from(env::var("OUT_DIR")?).join("bundled.rs"), bundled)?;
    Ok(())
}

/// The plugins need the `wasm32-wasip2` standard library. rustup installs the targets listed in
/// `rust-toolchain.toml` only when it installs the toolchain itself, so a machine that already
/// had this toolchain lacks it: add it here, through rustup, rather than fail with "can't find
/// crate for `std`".
fn ensure_wasm_target() -> Result<()> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot =
        Command::new(&rustc).args(["--print", "sysroot"]).output().context("running rustc --print sysroot")?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib").join("rustlib").join(WASM_TARGET).is_dir() {
        return Ok(());
    }
    println!("cargo:warning=adding the {WASM_TARGET} target to this toolchain (rustup target add {WASM_TARGET})");
    // RUSTUP_TOOLCHAIN, set by the rustup proxy that started this build, picks the same toolchain.
    match Command::new("rustup").args(["target", "add", WASM_TARGET]).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => {
            bail!("`rustup target add {WASM_TARGET}` failed ({status}); the plugins cannot be built without it")
        }
        Err(e) => bail!(
            "the {WASM_TARGET} target is not installed in {} and rustup is not available ({e}); install the target for this toolchain",
            sysroot.display()
        ),
    }
}

/// Re-run when any source file under `dir` changes (but not for build output inside it, nor
/// under `skip`).
fn watch(dir: &Path, skip: &[PathBuf]) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default();
        // Build output, and the other languages' SDKs and examples (plugins/build-examples.sh
        // builds those): nothing here is an input of the Rust plugins.
        if name == "target" || name == "node_modules" || name == "__pycache__" || skip.contains(&path) {
            continue;
        }
        if path.is_dir() {
            watch(&path, skip)?;
        } else {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-changed={}", dir.display());
    Ok(())
}

/// Copy only when the bytes differ, so unchanged plugins keep their timestamps.
fn copy_if_changed(from: &Path, to: &Path) -> Result<()> {
    let bytes = fs::read(from)?;
    if fs::read(to).ok().as_deref() != Some(bytes.as_slice()) {
        fs::write(to, bytes)?;
    }
    Ok(())
}
