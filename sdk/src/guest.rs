//! The WIT exports, implemented once here on top of the registry, so plugin authors never
//! touch generated bindings.

use std::marker::PhantomData;
use std::sync::OnceLock;

use serde_json::Value;

use crate::content::{Content, Error};
use crate::context::{Ask, AskItem, ClientCapabilities, Context, ElicitAction, InputResponse, LogLevel, Root};
use crate::registry::{CompletionTarget, Outcome, Plugin, PromptMessage, Role};
use capsule_uri_template::UriVariables;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "plugin",
        path: "../wit",
        pub_export_macro: true,
        default_bindings_module: "capsule_sdk::__private::bindings",
    });
}

use bindings::capsule::plugin::{host, types as wit};
use bindings::exports::capsule::plugin::{completion, prompts, resources, tools};

/// Implemented by the type [`crate::plugin!`] declares.
pub trait Register {
    /// Fill in the plugin's registry.
    fn register(plugin: &mut Plugin);
}

/// The component's exports for plugin `P`.
pub struct Exports<P>(PhantomData<P>);

fn registry<P: Register>() -> &'static Plugin {
    // One plugin per component, so one static suffices even though this function is generic.
    static PLUGIN: OnceLock<Plugin> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        let mut plugin = Plugin::default();
        P::register(&mut plugin);
        plugin
    })
}

impl From<LogLevel> for host::LogLevel {
    fn from(level: LogLevel) -> Self {
        match level {
            LogLevel::Debug => host::LogLevel::Debug,
            LogLevel::Info => host::LogLevel::Info,
            LogLevel::Notice => host::LogLevel::Notice,
            LogLevel::Warning => host::LogLevel::Warning,
            LogLevel::Error => host::LogLevel::Error,
            LogLevel::Critical => host::LogLevel::Critical,
            LogLevel::Alert => host::LogLevel::Alert,
            LogLevel::Emergency => host::LogLevel::Emergency,
        }
    }
}

fn role_to_wit(role: Role) -> wit::Role {
    match role {
        Role::User => wit::Role::User,
        Role::Assistant => wit::Role::Assistant,
    }
}

fn role_from_wit(role: wit::Role) -> Role {
    match role {
        wit::Role::User => Role::User,
        wit::Role::Assistant => Role::Assistant,
    }
}

fn content_to_wit(content: Content) -> wit::Content {
    match content {
        Content::Text(text) => wit::Content::Text(text),
        Content::Image { data, mime_type } => wit::Content::Image(wit::Binary { data, mime_type }),
        Content::Audio { data, mime_type } => wit::Content::Audio(wit::Binary { data, mime_type }),
        Content::ResourceText { .. } | Content::ResourceBlob { .. } => {
            wit::Content::Resource(contents_to_wit(content).expect("a resource content"))
        }
        Content::ResourceLink { uri, name, description, mime_type } => {
            wit::Content::ResourceLink(wit::ResourceLink { uri, name, description, mime_type })
        }
    }
}

fn contents_to_wit(content: Content) -> Option<wit::ResourceContents> {
    match content {
        Content::ResourceText { uri, mime_type, text } => {
            Some(wit::ResourceContents { uri, mime_type, body: wit::ResourceBody::Text(text) })
        }
        Content::ResourceBlob { uri, mime_type, blob } => {
            Some(wit::ResourceContents { uri, mime_type, body: wit::ResourceBody::Blob(blob) })
        }
        _ => None,
    }
}

fn content_from_wit(content: wit::Content) -> Content {
    match content {
        wit::Content::Text(text) => Content::Text(text),
        wit::Content::Image(b) => Content::Image { data: b.data, mime_type: b.mime_type },
        wit::Content::Audio(b) => Content::Audio { data: b.data, mime_type: b.mime_type },
        wit::Content::Resource(r) => match r.body {
            wit::ResourceBody::Text(text) => Content::ResourceText { uri: r.uri, mime_type: r.mime_type, text },
            wit::ResourceBody::Blob(blob) => Content::ResourceBlob { uri: r.uri, mime_type: r.mime_type, blob },
        },
        wit::Content::ResourceLink(l) => {
            Content::ResourceLink { uri: l.uri, name: l.name, description: l.description, mime_type: l.mime_type }
        }
    }
}

fn context_from_wit(context: wit::RequestContext) -> Context {
    let caps = context.client;
    Context {
        client: ClientCapabilities {
            elicitation_form: caps.elicitation_form,
            elicitation_url: caps.elicitation_url,
            sampling: caps.sampling,
            roots: caps.roots,
        },
        responses: context.responses.into_iter().map(|r| (r.key, response_from_wit(r.response))).collect(),
        state: context.state,
    }
}

fn response_from_wit(response: wit::InputResponse) -> InputResponse {
    match response {
        wit::InputResponse::Elicitation(e) => InputResponse::Elicitation {
            action: match e.action {
                wit::ElicitAction::Accept => ElicitAction::Accept,
                wit::ElicitAction::Decline => ElicitAction::Decline,
                wit::ElicitAction::Cancel => ElicitAction::Cancel,
            },
            content: e.content.and_then(|c| serde_json::from_str(&c).ok()),
        },
        wit::InputResponse::Sampling(s) => InputResponse::Sampling {
            role: role_from_wit(s.role),
            content: content_from_wit(s.content),
            model: s.model,
            stop_reason: s.stop_reason,
        },
        wit::InputResponse::Roots(roots) => {
            InputResponse::Roots(roots.into_iter().map(|r| Root { uri: r.uri, name: r.name }).collect())
        }
        wit::InputResponse::Invalid(message) => InputResponse::Invalid(message),
    }
}

fn ask_to_wit(ask: Ask) -> wit::InputRequired {
    wit::InputRequired {
        requests: ask
            .requests
            .into_iter()
            .map(|(key, item)| wit::KeyedInputRequest {
                key,
                request: match item {
                    AskItem::Form { message, schema } => {
                        wit::InputRequest::ElicitForm(wit::ElicitForm { message, requested_schema: schema.to_string() })
                    }
                    AskItem::Url { message, url, id } => {
                        wit::InputRequest::ElicitUrl(wit::ElicitUrl { message, url, elicitation_id: id })
                    }
                    AskItem::Sample { messages, system, max_tokens } => {
                        wit::InputRequest::Sample(wit::SamplingRequest {
                            messages: messages
                                .into_iter()
                                .map(|(role, content)| wit::SamplingMessage {
                                    role: role_to_wit(role),
                                    content: content_to_wit(content),
                                })
                                .collect(),
                            system_prompt: system,
                            max_tokens,
                            temperature: None,
                            stop_sequences: Vec::new(),
                        })
                    }
                    AskItem::Roots => wit::InputRequest::ListRoots,
                },
            })
            .collect(),
        state: ask.state,
    }
}

fn error_to_wit(error: Error) -> wit::Error {
    match error {
        Error::NotFound(m) => wit::Error::NotFound(m),
        Error::InvalidParams(m) => wit::Error::InvalidParams(m),
        Error::Failed(m) => wit::Error::Failed(m),
    }
}

impl<P: Register> tools::Guest for Exports<P> {
    fn list() -> Vec<tools::Tool> {
        registry::<P>()
            .tools
            .iter()
            .map(|t| {
                let has_hints = t.read_only.is_some()
                    || t.destructive.is_some()
                    || t.idempotent.is_some()
                    || t.open_world.is_some();
                tools::Tool {
                    name: t.name.clone(),
                    title: t.title.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.to_value().to_string(),
                    output_schema: (t.output_schema)().as_ref().map(Value::to_string),
                    annotations: has_hints.then_some(tools::ToolAnnotations {
                        title: None,
                        read_only_hint: t.read_only,
                        destructive_hint: t.destructive,
                        idempotent_hint: t.idempotent,
                        open_world_hint: t.open_world,
                    }),
                }
            })
            .collect()
    }

    fn call(name: String, arguments: String, context: wit::RequestContext) -> Result<tools::CallOutcome, wit::Error> {
        let tool = registry::<P>()
            .tools
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| wit::Error::NotFound(format!("no tool named {name}")))?;
        let cx = context_from_wit(context);
        Ok(match (tool.handler)(&arguments, &cx).map_err(error_to_wit)? {
            Outcome::Done(result) => tools::CallOutcome::Complete(tools::ToolResult {
                content: result.content.into_iter().map(content_to_wit).collect(),
                structured_content: result.structured.as_ref().map(Value::to_string),
                is_error: result.is_error,
            }),
            Outcome::InputRequired(ask) => tools::CallOutcome::InputRequired(ask_to_wit(ask)),
        })
    }
}

impl<P: Register> resources::Guest for Exports<P> {
    fn list() -> Vec<resources::Resource> {
        registry::<P>()
            .resources
            .iter()
            .map(|r| resources::Resource {
                uri: r.uri.clone(),
                name: r.name.clone(),
                title: None,
                description: r.description.clone(),
                mime_type: r.mime_type.clone(),
                size: None,
            })
            .collect()
    }

    fn templates() -> Vec<resources::ResourceTemplate> {
        registry::<P>()
            .templates
            .iter()
            .map(|t| resources::ResourceTemplate {
                uri_template: t.uri_template.clone(),
                name: t.name.clone(),
                title: None,
                description: t.description.clone(),
                mime_type: t.mime_type.clone(),
            })
            .collect()
    }

    fn read(uri: String, context: wit::RequestContext) -> Result<resources::ReadOutcome, wit::Error> {
        let plugin = registry::<P>();
        let cx = context_from_wit(context);
        let outcome = if let Some(r) = plugin.resources.iter().find(|r| r.uri == uri) {
            (r.handler)(&uri, UriVariables::default(), &cx)
        } else if let Some((t, vars)) = plugin.templates.iter().find_map(|t| t.matcher()?.matches(&uri).map(|v| (t, v)))
        {
            (t.handler)(&uri, vars, &cx)
        } else {
            Err(Error::NotFound(format!("no resource {uri}")))
        };
        match outcome.map_err(error_to_wit)? {
            Outcome::Done(contents) => {
                let contents: Vec<_> = contents.into_iter().filter_map(contents_to_wit).collect();
                if contents.is_empty() {
                    return Err(wit::Error::Failed(format!("{uri}: the handler returned no contents")));
                }
                Ok(resources::ReadOutcome::Complete(contents))
            }
            Outcome::InputRequired(ask) => Ok(resources::ReadOutcome::InputRequired(ask_to_wit(ask))),
        }
    }
}

impl<P: Register> prompts::Guest for Exports<P> {
    fn list() -> Vec<prompts::Prompt> {
        registry::<P>()
            .prompts
            .iter()
            .map(|p| prompts::Prompt {
                name: p.name.clone(),
                title: None,
                description: p.description.clone(),
                arguments: (p.arguments)()
                    .iter()
                    .map(|a| prompts::PromptArgument {
                        name: a.name.clone(),
                        title: None,
                        description: a.description.clone(),
                        required: a.required,
                    })
                    .collect(),
            })
            .collect()
    }

    fn get(
        name: String,
        arguments: Vec<(String, String)>,
        context: wit::RequestContext,
    ) -> Result<prompts::GetOutcome, wit::Error> {
        let prompt = registry::<P>()
            .prompts
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| wit::Error::NotFound(format!("no prompt named {name}")))?;
        let arguments = Value::Object(arguments.into_iter().map(|(k, v)| (k, Value::String(v))).collect());
        let cx = context_from_wit(context);
        match (prompt.handler)(arguments, &cx).map_err(error_to_wit)? {
            Outcome::Done(messages) => Ok(prompts::GetOutcome::Complete(prompts::PromptResult {
                description: None,
                messages: messages
                    .into_iter()
                    .map(|PromptMessage { role, content }| prompts::PromptMessage {
                        role: role_to_wit(role),
                        content: content_to_wit(content),
                    })
                    .collect(),
            })),
            Outcome::InputRequired(ask) => Ok(prompts::GetOutcome::InputRequired(ask_to_wit(ask))),
        }
    }
}

impl<P: Register> completion::Guest for Exports<P> {
    fn complete(
        reference: completion::Reference,
        argument: String,
        value: String,
        _context: Vec<(String, String)>,
    ) -> Result<completion::Suggestions, wit::Error> {
        let entry = registry::<P>().completions.iter().find(|c| {
            c.argument == argument
                && match (&c.target, &reference) {
                    (CompletionTarget::Prompt(p), completion::Reference::Prompt(r)) => p == r,
                    (CompletionTarget::Template(t), completion::Reference::ResourceTemplate(r)) => t == r,
                    _ => false,
                }
        });
        let mut values = entry.map(|c| (c.handler)(&value)).unwrap_or_default();
        let total = values.len();
        values.truncate(100);
        Ok(completion::Suggestions {
            has_more: total > values.len(),
            total: Some(u32::try_from(total).unwrap_or(u32::MAX)),
            values,
        })
    }
}
