//! Host-side bindings generated from `wit/`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "capsule:plugin/plugin",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::capsule::plugin::host::{ListKind, LogLevel};
pub use self::exports::capsule::plugin::{completion, prompts, resources, tools};

/// Every WIT type a caller of the runtime needs, in one place.
pub mod types {
    pub use super::capsule::plugin::types::*;
    pub use super::exports::capsule::plugin::completion::{Reference, Suggestions};
    pub use super::exports::capsule::plugin::prompts::{
        GetOutcome, Prompt, PromptArgument, PromptMessage, PromptResult,
    };
    pub use super::exports::capsule::plugin::resources::{ReadOutcome, Resource, ResourceTemplate};
    pub use super::exports::capsule::plugin::tools::{CallOutcome, Tool, ToolAnnotations, ToolResult};
}

impl types::ClientCapabilities {
    /// A client that offers nothing a plugin could ask of it.
    pub const NONE: Self = Self { elicitation_form: false, elicitation_url: false, sampling: false, roots: false };
}

impl types::RequestContext {
    /// A request's first round: what its client offers, and no input responses or state yet.
    pub fn first(client: types::ClientCapabilities) -> Self {
        Self { client, responses: Vec::new(), state: None }
    }
}

/// Fully qualified export names, as `Component::get_export_index` expects them.
pub const TOOLS: &str = "capsule:plugin/tools@0.1.0";
pub const RESOURCES: &str = "capsule:plugin/resources@0.1.0";
pub const PROMPTS: &str = "capsule:plugin/prompts@0.1.0";
pub const COMPLETION: &str = "capsule:plugin/completion@0.1.0";
/// The tools export's `call`, named on its own where its types do not match.
pub const TOOLS_CALL: &str = "capsule:plugin/tools@0.1.0 (its function `call`)";

/// The version of the Capsule WIT package this host implements.
pub const PACKAGE_VERSION: (u64, u64, u64) = (0, 1, 0);

/// What a component's names of Capsule interfaces (`imports` and `exports`) say of the
/// package version it was built against, when that may be why it cannot load: another
/// release series than this host's (0.1.x plugins load on any 0.1 host, for semver), or a
/// later release of it, whose new functions this host lacks (said only when the error
/// `blames_ours`, a Capsule interface).
pub fn version_note<'a>(names: impl IntoIterator<Item = &'a str>, blames_ours: bool) -> Option<String> {
    let (major, minor, patch) = PACKAGE_VERSION;
    let ours = format!("{major}.{minor}.{patch}");
    names.into_iter().find_map(|name| {
        let version = name.strip_prefix("capsule:plugin/")?.split_once('@')?.1;
        // Build metadata does not make another version (semver).
        let version = version.split_once('+').map_or(version, |(version, _)| version);
        let release = |text: &str| -> Option<(u64, u64, u64)> {
            let mut parts = text.splitn(3, '.').map(str::parse::<u64>);
            Some((parts.next()?.ok()?, parts.next()?.ok()?, parts.next()?.ok()?))
        };
        match release(version) {
            Some((ma, mi, _)) if (ma, mi) != (major, minor) => Some(format!(
                "it was built against capsule:plugin@{version}, and this host implements capsule:plugin@{ours}: \
                 build it against a {major}.{minor}.x release of the WIT package, or run a Capsule that implements \
                 {version}"
            )),
            // A later release links unless it needs what is new: say so only when the
            // error is about one of its Capsule imports.
            Some(theirs) if theirs > PACKAGE_VERSION && blames_ours => Some(format!(
                "it was built against capsule:plugin@{version}, later than this host's {ours}: a Capsule that \
                 implements {version} may be needed"
            )),
            Some(_) => None,
            None => Some(format!(
                "it was built against capsule:plugin@{version}, a pre-release or a version this host does not \
                 know: this host implements capsule:plugin@{ours}"
            )),
        }
    })
}

/// `reason` (an error linking or looking into a component whose imports and exports are
/// `names`), led by what its package version says of it, if anything.
pub fn with_version_note<'a>(names: impl IntoIterator<Item = &'a str>, reason: String) -> String {
    // wasmtime's link error names the import it could not satisfy.
    let blames_ours = reason.contains("`capsule:plugin/");
    match version_note(names, blames_ours) {
        Some(note) => format!("{note} ({reason})"),
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_built_against_another_release_is_told_so() {
        let note = |names: &[&str]| version_note(names.iter().copied(), true);
        assert_eq!(note(&["wasi:cli/stdin@0.2.0", "capsule:plugin/tools@0.1.0"]), None);
        let other = note(&["capsule:plugin/host@0.2.0"]).unwrap();
        assert!(other.contains("capsule:plugin@0.2.0") && other.contains("implements capsule:plugin@0.1.0"), "{other}");
        assert!(note(&["capsule:plugin/tools@1.0.0"]).unwrap().contains("1.0.0"));
        let later = note(&["wasi:io/streams@0.2.12", "capsule:plugin/host@0.1.1"]).unwrap();
        assert!(later.contains("later than this host's 0.1.0"), "{later}");
        assert!(note(&["capsule:plugin/tools@0.1.0-rc.1"]).unwrap().contains("a pre-release"));
        assert_eq!(note(&["capsule:plugin/tools"]), None, "no version: nothing to say");
        assert_eq!(note(&["capsule:plugin/tools@0.1.0+build7"]), None, "build metadata");
        let elsewhere = version_note(["capsule:plugin/host@0.1.5", "wasi:keyvalue/store@0.2.0-draft"], false);
        assert_eq!(elsewhere, None, "a later release failing for another import is not blamed");
        assert!(version_note(["capsule:plugin/host@0.2.0"], false).is_some(), "another series always is");
    }
}
