//! # capsule-sdk: Capsule plugins in Rust
//!
//! A Capsule plugin is a WebAssembly component that provides MCP tools, resources, prompts
//! and completions. The host owns the protocol; a plugin only answers calls. With this crate a
//! tool is a plain function over a typed argument struct whose JSON Schema is derived:
//!
//! ```ignore
//! use capsule_sdk::prelude::*;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct AddArgs {
//!     /// The first addend.
//!     a: f64,
//!     /// The second addend.
//!     b: f64,
//! }
//!
//! fn add(args: AddArgs) -> String {
//!     (args.a + args.b).to_string()
//! }
//!
//! capsule_sdk::plugin!(|p| {
//!     p.tool("add", "Add two numbers", add);
//! });
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` (crate type `cdylib`) and
//! point `capsule serve --plugin` at the `.wasm` file.
//!
//! Handlers may take a second parameter, [`Context`], to log, report progress, check for
//! cancellation or ask the client for input (elicitation, sampling, roots) through
//! [`Outcome::InputRequired`]. Plugins granted network hosts send HTTP requests with [`http`].
//! Generated bindings stay inside this crate.

mod content;
mod context;
mod guest;
pub mod http;
mod registry;

pub use capsule_uri_template::UriVariables;
pub use content::{Content, Error, IntoPromptResult, IntoReadResult, IntoToolResult, Json, ToolResult};
pub use context::{
    Ask, ClientCapabilities, Context, ElicitAction, Form, Identity, InputResponse, LogLevel, Mount, Principal, Root,
};
pub use registry::{
    Handler, ListKind, NoArgs, Outcome, Plugin, PromptMessage, ResourceOptions, Role, TemplateOptions, ToolOptions,
};

pub use schemars::{self, JsonSchema};
pub use serde::{self, Deserialize, Serialize};
pub use serde_json::{self, Value, json};

/// Everything a plugin usually needs.
pub mod prelude {
    pub use crate::{
        Ask, Content, Context, Deserialize, ElicitAction, Form, InputResponse, Json, JsonSchema, LogLevel, Mount,
        NoArgs, Outcome, Plugin, PromptMessage, Role, Serialize, ToolOptions, ToolResult, UriVariables, Value, json,
    };
}

/// Declare the plugin: a closure (or function) that registers its tools, resources, prompts
/// and completions on a [`Plugin`]. Use it once, at the crate root.
#[macro_export]
macro_rules! plugin {
    ($register:expr) => {
        #[doc(hidden)]
        struct __CapsulePlugin;
        impl $crate::__private::Register for __CapsulePlugin {
            fn register(plugin: &mut $crate::Plugin) {
                let register: fn(&mut $crate::Plugin) = $register;
                register(plugin)
            }
        }
        #[doc(hidden)]
        type __CapsuleExports = $crate::__private::Exports<__CapsulePlugin>;
        $crate::__private::export!(__CapsuleExports with_types_in $crate::__private::bindings);
    };
}

/// Declare what the plugin needs from the operator, as TOML (see the README's policy
/// section): `dirs = "read" | "write"`, `roots = true`, `network = ["host[:port]"]`,
/// `tcp = ["ip:port"]`, `env = ["NAME"]`, `secrets = ["NAME"]`. It grants nothing; the host compares it with the
/// operator's grants when it loads the plugin, and `capsule check` prints it. Use it once.
///
/// ```ignore
/// capsule_sdk::needs!(r#"
/// dirs = "read"
/// roots = true
/// "#);
/// ```
#[macro_export]
macro_rules! needs {
    ($toml:expr) => {
        const __CAPSULE_NEEDS_TEXT: &str = $toml;
        // A custom section in the component, read by the host without running the plugin.
        #[doc(hidden)]
        #[used]
        #[unsafe(link_section = "capsule:needs")]
        static __CAPSULE_NEEDS: [u8; __CAPSULE_NEEDS_TEXT.len()] = {
            let text = __CAPSULE_NEEDS_TEXT.as_bytes();
            let mut bytes = [0u8; __CAPSULE_NEEDS_TEXT.len()];
            let mut i = 0;
            while i < text.len() {
                bytes[i] = text[i];
                i += 1;
            }
            bytes
        };
    };
}

#[doc(hidden)]
pub mod __private {
    pub use crate::guest::bindings;
    pub use crate::guest::bindings::export;
    pub use crate::guest::{Exports, Register};
}
