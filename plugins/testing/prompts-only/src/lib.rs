//! A plugin written against `wit/` directly: the `prompts-plugin` world, one prompt, no SDK
//! and no completion export. Proves the host serves a component that exports only prompts.

wit_bindgen::generate!({ world: "prompts-plugin", path: "../../../wit" });

use capsule::plugin::types::{Content, Error, RequestContext, Role};
use exports::capsule::plugin::prompts::{GetOutcome, Guest, Prompt, PromptArgument, PromptMessage, PromptResult};

struct PromptsOnly;

impl Guest for PromptsOnly {
    fn list() -> Vec<Prompt> {
        vec![Prompt {
            name: "greet".into(),
            title: None,
            description: "Greet someone by name".into(),
            arguments: vec![PromptArgument {
                name: "name".into(),
                title: None,
                description: Some("Who to greet".into()),
                required: true,
            }],
        }]
    }

    fn get(name: String, arguments: Vec<(String, String)>, _context: RequestContext) -> Result<GetOutcome, Error> {
        if name != "greet" {
            return Err(Error::NotFound(format!("no prompt {name}")));
        }
        let who = arguments.iter().find(|(k, _)| k == "name").map_or("", |(_, v)| v.as_str());
        Ok(GetOutcome::Complete(PromptResult {
            description: None,
            messages: vec![PromptMessage { role: Role::User, content: Content::Text(format!("Say hello to {who}.")) }],
        }))
    }
}

export!(PromptsOnly);
