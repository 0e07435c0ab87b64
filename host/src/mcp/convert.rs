//! Conversions between the plugin runtime's WIT types and MCP's wire shapes.
//!
//! rmcp's model types are mostly `#[non_exhaustive]`; where building them field by field is
//! awkward we write the MCP wire JSON and let rmcp deserialize it, which also keeps these
//! conversions honest against the schema rmcp enforces.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rmcp::model::{
    ContentBlock, GetPromptResult, Prompt, PromptArgument, PromptMessage, Resource, ResourceContents, ResourceTemplate,
    Role, Tool, ToolAnnotations,
};
use serde_json::{Map, Value, json};

use super::reply::{Block, Known, audio_as_text, link_as_text};
use crate::catalog::ToolEntry;
use crate::runtime::types as wit;

/// A tool as `known`'s revision describes one: annotations arrived in 2025-03-26, titles and
/// output schemas in 2025-06-18 (clients and the conformance suite check the wire against
/// their revision's schema).
pub fn tool(entry: &ToolEntry, known: Known) -> Tool {
    let t = &entry.tool;
    let mut tool = Tool::new(t.name.clone(), t.description.clone(), entry.input_schema.clone());
    tool.title = title(&t.title, known);
    tool.output_schema = entry.output_schema.clone().filter(|_| known >= Known::Links);
    tool.annotations = t.annotations.as_ref().filter(|_| known >= Known::Audio).map(|a| {
        let mut annotations = ToolAnnotations::new();
        annotations.title = a.title.clone();
        annotations.read_only_hint = a.read_only_hint;
        annotations.destructive_hint = a.destructive_hint;
        annotations.idempotent_hint = a.idempotent_hint;
        annotations.open_world_hint = a.open_world_hint;
        annotations
    });
    tool
}

/// Titles (of resources, templates, prompts and their arguments) arrived in 2025-06-18.
fn title(title: &Option<String>, known: Known) -> Option<String> {
    title.clone().filter(|_| known >= Known::Links)
}

pub fn resource(r: &wit::Resource, known: Known) -> Resource {
    let mut out = Resource::new(r.uri.clone(), r.name.clone());
    out.title = title(&r.title, known);
    out.description = r.description.clone();
    out.mime_type = r.mime_type.clone();
    out.size = r.size;
    out
}

pub fn template(t: &wit::ResourceTemplate, known: Known) -> ResourceTemplate {
    let mut out = ResourceTemplate::new(t.uri_template.clone(), t.name.clone());
    out.title = title(&t.title, known);
    out.description = t.description.clone();
    out.mime_type = t.mime_type.clone();
    out
}

pub fn prompt(p: &wit::Prompt, known: Known) -> Prompt {
    let arguments = p
        .arguments
        .iter()
        .map(|a| {
            let mut arg = PromptArgument::new(a.name.clone()).with_required(a.required);
            arg.title = title(&a.title, known);
            arg.description = a.description.clone();
            arg
        })
        .collect::<Vec<_>>();
    let mut prompt =
        Prompt::new(p.name.clone(), Some(p.description.clone()), (!arguments.is_empty()).then_some(arguments));
    prompt.title = title(&p.title, known);
    prompt
}

pub fn resource_contents(c: &wit::ResourceContents) -> ResourceContents {
    let contents = match &c.body {
        wit::ResourceBody::Text(text) => ResourceContents::text(text.clone(), c.uri.clone()),
        wit::ResourceBody::Blob(bytes) => ResourceContents::blob(B64.encode(bytes), c.uri.clone()),
    };
    match &c.mime_type {
        Some(mime) => contents.with_mime_type(mime.clone()),
        None => match contents {
            ResourceContents::TextResourceContents { uri, text, meta, .. } => {
                ResourceContents::TextResourceContents { uri, mime_type: None, text, meta }
            }
            other => other,
        },
    }
}

/// A content block, as text where the client's revision does not know its kind (see
/// [`Known`]).
pub fn content(c: &wit::Content, known: Known) -> ContentBlock {
    match c {
        wit::Content::Text(text) => ContentBlock::text(text.clone()),
        wit::Content::Image(b) => ContentBlock::image(B64.encode(&b.data), b.mime_type.clone()),
        wit::Content::Audio(b) if known < Known::Audio => ContentBlock::text(audio_as_text(&b.mime_type, b.data.len())),
        wit::Content::Audio(b) => ContentBlock::audio(B64.encode(&b.data), b.mime_type.clone()),
        wit::Content::Resource(r) => ContentBlock::resource(resource_contents(r)),
        wit::Content::ResourceLink(l) if known >= Known::Links => {
            let mut link = Resource::new(l.uri.clone(), l.name.clone());
            link.description = l.description.clone();
            link.mime_type = l.mime_type.clone();
            ContentBlock::resource_link(link)
        }
        wit::Content::ResourceLink(l) => ContentBlock::text(link_as_text(&l.name, &l.uri)),
    }
}

fn role(r: wit::Role) -> Role {
    match r {
        wit::Role::User => Role::User,
        wit::Role::Assistant => Role::Assistant,
    }
}

pub fn prompt_result(result: &wit::PromptResult, known: Known) -> GetPromptResult {
    let messages =
        result.messages.iter().map(|m| PromptMessage::new(role(m.role), content(&m.content, known))).collect();
    let mut out = GetPromptResult::new(messages);
    out.description = result.description.clone();
    out
}

/// The MCP wire form of a plugin's input request (the params of `elicitation/create`,
/// `sampling/createMessage` or `roots/list`).
pub fn input_request_json(request: &wit::InputRequest) -> Value {
    match request {
        wit::InputRequest::ElicitForm(form) => json!({
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": form.message,
                "requestedSchema": serde_json::from_str::<Value>(&form.requested_schema).unwrap_or_else(|_| json!({"type": "object", "properties": {}})),
            }
        }),
        wit::InputRequest::ElicitUrl(url) => json!({
            "method": "elicitation/create",
            "params": {"mode": "url", "message": url.message, "url": url.url, "elicitationId": url.elicitation_id}
        }),
        wit::InputRequest::Sample(s) => {
            let mut params = Map::new();
            params.insert(
                "messages".into(),
                Value::Array(
                    s.messages
                        .iter()
                        .map(|m| json!({"role": role_name(m.role), "content": content_json(&m.content)}))
                        .collect(),
                ),
            );
            params.insert("maxTokens".into(), json!(s.max_tokens));
            if let Some(system) = &s.system_prompt {
                params.insert("systemPrompt".into(), json!(system));
            }
            if let Some(t) = s.temperature {
                params.insert("temperature".into(), json!(t));
            }
            if !s.stop_sequences.is_empty() {
                params.insert("stopSequences".into(), json!(s.stop_sequences));
            }
            json!({"method": "sampling/createMessage", "params": params})
        }
        wit::InputRequest::ListRoots => json!({"method": "roots/list", "params": {}}),
    }
}

fn role_name(r: wit::Role) -> &'static str {
    match r {
        wit::Role::User => "user",
        wit::Role::Assistant => "assistant",
    }
}

fn content_json(content: &wit::Content) -> Value {
    serde_json::to_value(Block { content, known: Known::Links }).unwrap_or(Value::Null)
}

/// Read a client's answer to an input request. The shape tells the kind: `action` for an
/// elicitation, `roots` for roots, `model`/`role` for sampling. Anything else is passed to
/// the plugin as `invalid` so it can ask again.
pub fn input_response(value: &Value) -> wit::InputResponse {
    let Some(object) = value.as_object() else {
        return wit::InputResponse::Invalid(format!("expected a JSON object, got {value}"));
    };
    if let Some(action) = object.get("action").and_then(Value::as_str) {
        let action = match action {
            "accept" => wit::ElicitAction::Accept,
            "decline" => wit::ElicitAction::Decline,
            "cancel" => wit::ElicitAction::Cancel,
            other => return wit::InputResponse::Invalid(format!("unknown elicitation action {other:?}")),
        };
        let content = object.get("content").filter(|c| c.is_object()).map(Value::to_string);
        return wit::InputResponse::Elicitation(wit::ElicitResponse { action, content });
    }
    if let Some(roots) = object.get("roots").and_then(Value::as_array) {
        return wit::InputResponse::Roots(
            roots
                .iter()
                .filter_map(|r| {
                    Some(wit::Root {
                        uri: r.get("uri")?.as_str()?.to_owned(),
                        name: r.get("name").and_then(Value::as_str).map(str::to_owned),
                    })
                })
                .collect(),
        );
    }
    if let (Some(role_value), Some(content_value)) = (object.get("role").and_then(Value::as_str), object.get("content"))
    {
        // Sampling content may be a single block or (2025-11-25) an array of blocks.
        let block = match content_value {
            Value::Array(items) => items.first().cloned().unwrap_or(Value::Null),
            other => other.clone(),
        };
        let Some(content) = content_from_json(&block) else {
            return wit::InputResponse::Invalid(format!("unsupported sampling content {block}"));
        };
        return wit::InputResponse::Sampling(wit::SamplingResponse {
            role: if role_value == "user" { wit::Role::User } else { wit::Role::Assistant },
            content,
            model: object.get("model").and_then(Value::as_str).unwrap_or_default().to_owned(),
            stop_reason: object.get("stopReason").and_then(Value::as_str).map(str::to_owned),
        });
    }
    wit::InputResponse::Invalid(format!("not an elicitation, sampling or roots result: {value}"))
}

fn content_from_json(block: &Value) -> Option<wit::Content> {
    let binary = || {
        Some(wit::Binary {
            data: B64.decode(block.get("data")?.as_str()?).ok()?,
            mime_type: block.get("mimeType")?.as_str()?.to_owned(),
        })
    };
    match block.get("type")?.as_str()? {
        "text" => Some(wit::Content::Text(block.get("text")?.as_str()?.to_owned())),
        "image" => binary().map(wit::Content::Image),
        "audio" => binary().map(wit::Content::Audio),
        _ => None,
    }
}
