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
