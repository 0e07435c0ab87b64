//! `capsule plugin new`: a plugin project in one of the SDKs' languages that builds with the
//! one command its README gives and passes `capsule check` as generated.
//!
//! Rendering is pure (names checked, placeholders filled); writing comes after and never
//! touches a directory that already has something in it.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// The languages a project can be made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    Js,
    Ts,
    C,
    /// C++20, over the C SDK's header.
    Cpp,
    /// Go, over the `wit-bindgen go` bindings.
    Go,
    /// Zig, over the C SDK's header.
    Zig,
}

/// Why a project cannot be made.
#[derive(Debug, Error)]
pub enum ScaffoldError {
    #[error("{0:?} is not a plugin name: use 1-64 lowercase letters, digits, '-' and '_', starting with a letter")]
    Name(String),
    #[error("{0} exists and is not empty")]
    Exists(PathBuf),
    #[error("{0} is not a Capsule checkout (no sdk/Cargo.toml): pass --capsule DIR")]
    NotACheckout(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

macro_rules! templates {
    ($lang:literal: $($file:literal),+) => {
        &[$(($file, include_str!(concat!("../templates/", $lang, "/", $file)))),+]
    };
}

const RUST: &[(&str, &str)] = templates!("rust": "Cargo.toml", ".cargo/config.toml", "src/lib.rs", "README.md");
const PYTHON: &[(&str, &str)] = templates!("python": "app.py", "README.md");
const JS: &[(&str, &str)] = templates!("js": "app.js", "package.json", "README.md");
const TS: &[(&str, &str)] = templates!("ts": "app.ts", "package.json", "tsconfig.json", "README.md");
const C: &[(&str, &str)] = templates!("c": "plugin.c", "README.md");
const CPP: &[(&str, &str)] = templates!("cpp": "plugin.cpp", "README.md");
const GO: &[(&str, &str)] = templates!("go": "export_capsule_plugin_tools/tools.go", "README.md");
const ZIG: &[(&str, &str)] = templates!("zig": "plugin.zig", "README.md");

/// A checked plugin name: the component's file stem, the package's name.
fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if first_ok && rest_ok && name.len() <= 64 { Ok(()) } else { Err(ScaffoldError::Name(name.to_owned())) }
}

/// The files of a new project named `name`, building against the SDKs of the Capsule
/// checkout at `capsule`.
pub fn render(language: Language, name: &str, capsule: &Path) -> Result<Vec<(PathBuf, String)>, ScaffoldError> {
    check_name(name)?;
    let (files, entry, label) = match language {
        Language::Rust => (RUST, "", "Rust"),
        Language::Python => (PYTHON, "app.py", "Python"),
        Language::Js => (JS, "app.js", "JavaScript"),
        Language::Ts => (TS, "app.ts", "TypeScript"),
        Language::C => (C, "plugin.c", "C"),
        Language::Cpp => (CPP, "plugin.cpp", "C++"),
        Language::Go => (GO, "", "Go"),
        Language::Zig => (ZIG, "plugin.zig", "Zig"),
    };
    let capsule = capsule.display().to_string();
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{capsule}}", &capsule)
            .replace("{{entry}}", entry)
            .replace("{{language}}", label)
    };
    Ok(files.iter().map(|(path, text)| (PathBuf::from(path), fill(text))).collect())
}

/// The Capsule checkout this binary was built from, if it is still there.
pub fn own_checkout() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_path_buf();
    root.join("sdk/Cargo.toml").is_file().then_some(root)
}

/// Check that `capsule` is a Capsule checkout (its SDKs are what the project builds with).
pub fn check_checkout(capsule: &Path) -> Result<PathBuf, ScaffoldError> {
    let absolute = std::path::absolute(capsule).unwrap_or_else(|_| capsule.to_path_buf());
    if absolute.join("sdk/Cargo.toml").is_file() { Ok(absolute) } else { Err(ScaffoldError::NotACheckout(absolute)) }
}

/// Write `files` into `dir`, which must not exist or be empty.
pub fn write(dir: &Path, files: &[(PathBuf, String)]) -> Result<(), ScaffoldError> {
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        return Err(ScaffoldError::Exists(dir.to_path_buf()));
    }
    for (path, text) in files {
        let path = dir.join(path);
        let written = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&path, text));
        written.map_err(|source| ScaffoldError::Write { path, source })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_placeholders_filled() {
        for bad in ["", "Upper", "1st", "has space", "dots.no", &"x".repeat(65)] {
            assert!(matches!(render(Language::Rust, bad, Path::new("/c")), Err(ScaffoldError::Name(_))), "{bad}");
        }
        let all = [Language::Rust, Language::Python, Language::Js, Language::Ts, Language::C, Language::Cpp];
        for language in all.into_iter().chain([Language::Go, Language::Zig]) {
            let files = render(language, "word-count", Path::new("/opt/capsule")).unwrap();
            for (path, text) in &files {
                // `{{word}}` is a placeholder; C's `{{` (nested initialisers) is not.
                let placeholder = text.split("{{").skip(1).find(|rest| {
                    let word = rest.split("}}").next().unwrap_or_default();
                    rest.contains("}}") && !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase())
                });
                assert!(placeholder.is_none(), "{path:?} keeps a placeholder:\n{text}");
            }
            let readme = &files.iter().find(|(p, _)| p == Path::new("README.md")).unwrap().1;
            assert!(readme.starts_with("# word-count"), "{readme}");
        }
        let rust = render(Language::Rust, "word-count", Path::new("/opt/capsule")).unwrap();
        let manifest = &rust[0].1;
        assert!(manifest.contains("name = \"word-count\"") && manifest.contains("path = \"/opt/capsule/sdk\""));
        assert!(rust[3].1.contains("release/word_count.wasm"), "the crate's component is named with '_'");
    }

    #[test]
    fn a_directory_with_something_in_it_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
        let files = render(Language::Python, "p", Path::new("/c")).unwrap();
        assert!(matches!(write(dir.path(), &files), Err(ScaffoldError::Exists(_))));
        assert_eq!(std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(), "mine");
        let fresh = dir.path().join("fresh");
        write(&fresh, &files).unwrap();
        assert!(fresh.join("app.py").is_file());
    }
}
