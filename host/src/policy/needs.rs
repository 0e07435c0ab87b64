//! A plugin's own declaration of what it needs, and how it compares with its grants.
//!
//! The declaration is TOML, in a custom section named [`NEEDS_SECTION`] anywhere in the
//! component (the Rust SDK's `needs!` macro puts it in the main module; `capsule-py build`
//! at the top level), or in a sidecar file beside it ([`sidecar_path`]: `NAME.capsule.toml`
//! beside `NAME.wasm`) for toolchains that cannot embed one. It is read without running the
//! plugin. It grants nothing: it only lets the operator see, at load, that a
//! plugin will not work as granted.

use serde::Deserialize;
use thiserror::Error;

use super::{Grants, HostRule};

/// The custom section that holds a plugin's needs.
pub const NEEDS_SECTION: &str = "capsule:needs";

/// Where a plugin file's sidecar declaration lives: `NAME.capsule.toml` beside `NAME.wasm`.
pub fn sidecar_path(wasm: &std::path::Path) -> std::path::PathBuf {
    wasm.with_extension("capsule.toml")
}

/// What to do when a plugin declares needs its grants do not cover.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NeedsMode {
    /// Load it anyway and log a warning: the grants still bound what it can do.
    #[default]
    Warn,
    /// Do not load it.
    Refuse,
}

/// Filesystem access a plugin needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirAccess {
    Read,
    Write,
}

/// A plugin's declared needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Needs {
    /// Some directory, read-only or writable.
    pub dirs: Option<DirAccess>,
    /// The client's roots (directories narrowed to them).
    #[serde(default)]
    pub roots: bool,
    /// Hosts it sends HTTP requests to.
    #[serde(default)]
    pub network: Vec<String>,
    /// Addresses it opens raw TCP connections to.
    #[serde(default)]
    pub tcp: Vec<std::net::SocketAddr>,
    /// Environment values it reads.
    #[serde(default)]
    pub env: Vec<String>,
    /// Secrets it reads (from its environment).
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// A needs declaration that cannot be read.
#[derive(Debug, Error)]
pub enum NeedsError {
    #[error("not a WebAssembly binary: {0}")]
    Binary(String),
    #[error("its {NEEDS_SECTION} section is not valid: {0}")]
    Invalid(String),
    #[error("its sidecar declaration is not valid: {0}")]
    InvalidSidecar(String),
    #[error("it declares its needs twice, in its {NEEDS_SECTION} section and in a sidecar file; keep one")]
    Twice,
    #[error("it has more than one {NEEDS_SECTION} section; keep one")]
    Sections,
}

impl std::fmt::Display for Needs {
    /// One need per line, as the operator would grant it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lines = Vec::new();
        match self.dirs {
            Some(DirAccess::Read) => lines.push("a directory (read)".to_owned()),
            Some(DirAccess::Write) => lines.push("a directory (write)".to_owned()),
            None => {}
        }
        if self.roots {
            lines.push("the client's roots".into());
        }
        lines.extend(self.network.iter().map(|h| format!("HTTP to {h}")));
        lines.extend(self.tcp.iter().map(|a| format!("TCP to {a}")));
        lines.extend(self.env.iter().map(|n| format!("env {n}")));
        lines.extend(self.secrets.iter().map(|n| format!("secret {n}")));
        if lines.is_empty() {
            lines.push("nothing".into());
        }
        f.write_str(&lines.join("\n"))
    }
}

impl Needs {
    /// Read the declaration from a component's bytes; `None` if it declares nothing.
    /// Two sections are refused: a reviewer reading one could miss what the other asks.
    pub fn read(wasm: &[u8]) -> Result<Option<Needs>, NeedsError> {
        let mut found = None;
        for payload in wasmparser::Parser::new(0).parse_all(wasm) {
            let payload = payload.map_err(|e| NeedsError::Binary(e.to_string()))?;
            if let wasmparser::Payload::CustomSection(section) = payload
                && section.name() == NEEDS_SECTION
            {
                if found.is_some() {
                    return Err(NeedsError::Sections);
                }
                let text = std::str::from_utf8(section.data()).map_err(|e| NeedsError::Invalid(e.to_string()))?;
                found = Some(Needs::parse(text)?);
            }
        }
        Ok(found)
    }

    /// A plugin's declaration: its custom section or its sidecar's text, never both (which
    /// would win is not obvious, so neither does). Bytes that are not WebAssembly declare
    /// nothing here: compiling them reports the better error.
    pub fn declared(wasm: &[u8], sidecar: Option<&str>) -> Result<Option<Needs>, NeedsError> {
        let embedded = match Needs::read(wasm) {
            Err(NeedsError::Binary(_)) => None,
            other => other?,
        };
        match (embedded, sidecar) {
            (Some(_), Some(_)) => Err(NeedsError::Twice),
            (embedded, None) => Ok(embedded),
            (None, Some(text)) => match Needs::parse(text) {
                Err(NeedsError::Invalid(reason)) => Err(NeedsError::InvalidSidecar(reason)),
                other => other.map(Some),
            },
        }
    }

    /// Parse a declaration's text.
    pub fn parse(text: &str) -> Result<Needs, NeedsError> {
        let needs: Needs = toml::from_str(text).map_err(|e| NeedsError::Invalid(e.to_string()))?;
        for rule in &needs.network {
            rule.parse::<HostRule>().map_err(|e| NeedsError::Invalid(e.to_string()))?;
        }
        // The plugin wrote these names, and `check` and the status show them to an operator:
        // none may be empty or carry control characters (a line of its own, an escape).
        for name in needs.env.iter().chain(&needs.secrets) {
            if name.is_empty() || name.contains(['=', '\0']) || name.chars().any(char::is_control) {
                return Err(NeedsError::Invalid(format!("{name:?} is not an environment variable name")));
            }
        }
        Ok(needs)
    }

    /// Every need the grants do not cover, as sentences an operator can act on.
    pub fn beyond(&self, grants: &Grants) -> Vec<String> {
        let mut missing = Vec::new();
        match self.dirs {
            Some(DirAccess::Read) if grants.dirs.is_empty() => {
                missing.push("needs a directory; none is granted".into())
            }
            Some(DirAccess::Write) if !grants.dirs.iter().any(|d| d.write) => {
                missing.push("needs a writable directory; none is granted with write = true".into())
            }
            _ => {}
        }
        if self.roots && !grants.roots {
            missing.push("works on the client's roots; roots = true is not granted".into());
        }
        for host in &self.network {
            let Ok(need) = host.parse::<HostRule>() else { continue };
            if !grants.network.iter().any(|rule| need.within(rule)) {
                missing.push(format!("sends HTTP requests to {need}; not granted in network"));
            }
        }
        for addr in &self.tcp {
            if !grants.tcp.contains(addr) {
                missing.push(format!("opens TCP connections to {addr}; not granted in tcp"));
            }
        }
        for name in &self.env {
            if !grants.env.iter().any(|(n, _)| n == name) {
                missing.push(format!("reads environment value {name}; not granted in env"));
            }
        }
        for name in &self.secrets {
            if !grants.secrets.iter().any(|(n, _)| n == name) {
                missing.push(format!("reads secret {name}; not granted in secrets"));
            }
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::super::DirGrant;
    use super::*;

    #[test]
    fn needs_beyond_grants_are_named() {
        let needs = Needs::parse(
            "dirs = \"write\"\nroots = true\nnetwork = [\"api.example.org\"]\nenv = [\"LANG\"]\nsecrets = [\"TOKEN\"]",
        )
        .unwrap();
        let nothing = needs.beyond(&Grants::default());
        assert_eq!(nothing.len(), 5, "{nothing:?}");
        let enough = Grants {
            dirs: vec![DirGrant { path: "/tmp".into(), guest: "/tmp".into(), write: true }],
            roots: true,
            network: vec!["*.example.org".parse().unwrap()].into(),
            env: vec![("LANG".into(), "C".into())],
            secrets: vec![("TOKEN".into(), super::super::Secret("x".into()))],
            ..Grants::default()
        };
        assert!(needs.beyond(&enough).is_empty());
        assert!(Needs::parse("disk = true").is_err());
        assert!(Needs::parse("env = [\"A\\u001b[31mRED\\nFAKE LOG LINE\"]").is_err());
        assert!(Needs::parse("secrets = [\"\"]").is_err());
        assert!(Needs::parse("network = [\"http://x\"]").is_err());
    }

    #[test]
    fn plain_modules_declare_nothing() {
        assert_eq!(Needs::read(b"\0asm\x01\0\0\0").unwrap(), None);
        assert!(Needs::read(b"not wasm").is_err());
    }

    #[test]
    fn a_sidecar_declares_what_the_component_does_not() {
        // A module with a capsule:needs custom section declaring `roots = true`.
        let mut embedded = b"\0asm\x01\0\0\0".to_vec();
        let payload = [&[NEEDS_SECTION.len() as u8][..], NEEDS_SECTION.as_bytes(), b"roots = true"].concat();
        embedded.extend([0, payload.len() as u8]);
        embedded.extend(payload);
        let plain = b"\0asm\x01\0\0\0";
        let roots = Needs { roots: true, ..Needs::default() };
        assert_eq!(Needs::declared(&embedded, None).unwrap(), Some(roots.clone()));
        assert_eq!(Needs::declared(plain, Some("roots = true")).unwrap(), Some(roots));
        assert_eq!(Needs::declared(plain, None).unwrap(), None);
        assert!(matches!(Needs::declared(&embedded, Some("roots = true")), Err(NeedsError::Twice)));
        // Two sections: refused, whichever a reviewer would read.
        let mut twice = embedded.clone();
        twice.extend_from_slice(&embedded[8..]);
        assert!(matches!(Needs::declared(&twice, None), Err(NeedsError::Sections)));
        assert!(matches!(Needs::declared(plain, Some("disk = 1")), Err(NeedsError::InvalidSidecar(_))));
        // Not WebAssembly: compiling it says so better.
        assert_eq!(Needs::declared(b"not wasm", Some("roots = true")).unwrap().map(|n| n.roots), Some(true));
        assert_eq!(sidecar_path("/p/calc.wasm".as_ref()), std::path::PathBuf::from("/p/calc.capsule.toml"));
    }
}
