//! A plugin written against `wit/` directly, as a non-Rust toolchain would see it: the
//! `tools-plugin` world, one tool, no SDK. Proves the host accepts components that export
//! only some of the Capsule interfaces.

wit_bindgen::generate!({ world: "tools-plugin", path: "../../../wit" });

use capsule::plugin::types::{Content, Error, RequestContext};
use exports::capsule::plugin::tools::{CallOutcome, Guest, Tool, ToolResult};

struct ToolsOnly;

impl Guest for ToolsOnly {
    fn list() -> Vec<Tool> {
        vec![Tool {
            name: "shout".into(),
            title: None,
            description: "Upper-case a text".into(),
            input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#.into(),
            output_schema: None,
            annotations: None,
        }]
    }

    fn call(name: String, arguments: String, _context: RequestContext) -> Result<CallOutcome, Error> {
        if name != "shout" {
            return Err(Error::NotFound(format!("no tool {name}")));
        }
        let arguments: serde_json::Value =
            serde_json::from_str(&arguments).map_err(|e| Error::InvalidParams(e.to_string()))?;
        let text = arguments["text"].as_str().unwrap_or_default().to_uppercase();
        Ok(CallOutcome::Complete(ToolResult {
            content: vec![Content::Text(text)],
            structured_content: None,
            is_error: false,
        }))
    }
}

export!(ToolsOnly);
