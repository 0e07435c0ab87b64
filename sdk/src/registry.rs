//! The plugin's registry: what it provides and the handlers that serve it.

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::content::{Content, Error, IntoPromptResult, IntoReadResult, IntoToolResult, ToolResult};
use crate::context::{Ask, Context};
use capsule_uri_template::{UriTemplate, UriVariables};

/// A finished value, or a request for client input after which the handler runs again.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    /// The handler is done.
    Done(T),
    /// The handler needs input from the client first.
    InputRequired(Ask),
}

impl<T> From<Ask> for Outcome<T> {
    fn from(ask: Ask) -> Self {
        Outcome::InputRequired(ask)
    }
}

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One message of a rendered prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMessage {
    /// Who says it.
    pub role: Role,
    /// What is said.
    pub content: Content,
}

impl PromptMessage {
    /// A message from the user.
    pub fn user(content: impl Into<Content>) -> Self {
        PromptMessage { role: Role::User, content: content.into() }
    }

    /// A message from the assistant.
    pub fn assistant(content: impl Into<Content>) -> Self {
        PromptMessage { role: Role::Assistant, content: content.into() }
    }
}

/// Which list changed, for [`Context::list_changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Resources,
    Prompts,
}

/// Arguments of a tool or prompt that takes none.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
pub struct NoArgs {}

/// Formats defined by JSON Schema 2020-12. schemars also emits Rust-specific ones (`uint`,
/// `int32`, `double`...) that validators reject or warn about, so those are dropped.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

fn drop_nonstandard_formats(schema: &mut schemars::Schema) {
    if let Some(map) = schema.as_object_mut()
        && map.get("format").and_then(Value::as_str).is_some_and(|f| !STANDARD_FORMATS.contains(&f))
    {
        map.remove("format");
    }
    schemars::transform::transform_subschemas(&mut drop_nonstandard_formats, schema);
}

/// The JSON Schema of `T` as a value, with the draft marker kept (MCP defaults to 2020-12).
pub(crate) fn schema_value<T: JsonSchema>() -> Value {
    let mut schema = schemars::generate::SchemaSettings::draft2020_12()
        .with_transform(drop_nonstandard_formats)
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(map) = schema.as_object_mut() {
        // The root title is the Rust type's name: noise to a model reading the schema.
        map.remove("title");
        map.entry("type").or_insert_with(|| Value::String("object".into()));
    }
    schema
}

/// A tool's input schema. Derived schemas are generated only when the tools are listed:
/// every call runs in a fresh instance, and generating schemas there would be wasted work.
pub(crate) enum Schema {
    Derived(fn() -> Value),
    Given(Value),
}

impl Schema {
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Schema::Derived(generate) => generate(),
            Schema::Given(value) => value.clone(),
        }
    }
}

/// Marker: the handler takes only its arguments.
#[doc(hidden)]
pub struct ArgsOnly;
/// Marker: the handler takes its arguments and the [`Context`].
#[doc(hidden)]
pub struct ArgsAndContext;

/// A function usable as a handler: `fn(Args) -> R` or `fn(Args, &Context) -> R`.
pub trait Handler<A, M>: Send + Sync + 'static {
    /// What the handler returns.
    type Output;
    #[doc(hidden)]
    fn invoke(&self, args: A, cx: &Context) -> Self::Output;
}

impl<F, A, R> Handler<A, ArgsOnly> for F
where
    F: Fn(A) -> R + Send + Sync + 'static,
{
    type Output = R;
    fn invoke(&self, args: A, _cx: &Context) -> R {
        self(args)
    }
}

impl<F, A, R> Handler<A, ArgsAndContext> for F
where
    F: Fn(A, &Context) -> R + Send + Sync + 'static,
{
    type Output = R;
    fn invoke(&self, args: A, cx: &Context) -> R {
        self(args, cx)
    }
}

/// Takes the arguments as the client's JSON text: they are decoded straight into the tool's
/// argument type, with no `Value` tree built first. `Err` when the text is not JSON at all.
type ToolFn = Box<dyn Fn(&str, &Context) -> Result<Outcome<ToolResult>, Error> + Send + Sync>;
type ReadFn = Box<dyn Fn(&str, UriVariables, &Context) -> Result<Outcome<Vec<Content>>, Error> + Send + Sync>;
type PromptFn = Box<dyn Fn(Value, &Context) -> Result<Outcome<Vec<PromptMessage>>, Error> + Send + Sync>;
type CompleteFn = Box<dyn Fn(&str) -> Vec<String> + Send + Sync>;

/// Optional details of a tool, set after registering it.
pub struct ToolOptions {
    pub(crate) name: String,
    pub(crate) title: Option<String>,
    pub(crate) description: String,
    pub(crate) input_schema: Schema,
    pub(crate) output_schema: fn() -> Option<Value>,
    pub(crate) read_only: Option<bool>,
    pub(crate) destructive: Option<bool>,
    pub(crate) idempotent: Option<bool>,
    pub(crate) open_world: Option<bool>,
    pub(crate) handler: ToolFn,
}

impl ToolOptions {
    /// A human-readable title.
    pub fn title(&mut self, title: impl Into<String>) -> &mut Self {
        self.title = Some(title.into());
        self
    }

    /// Replace the derived input schema (it must still be an object schema).
    pub fn input_schema(&mut self, schema: Value) -> &mut Self {
        self.input_schema = Schema::Given(schema);
        self
    }

    /// Hint that the tool does not modify anything.
    pub fn read_only(&mut self) -> &mut Self {
        self.read_only = Some(true);
        self.destructive = Some(false);
        self
    }

    /// Hint that the tool may destroy data.
    pub fn destructive(&mut self) -> &mut Self {
        self.destructive = Some(true);
        self.read_only = Some(false);
        self
    }

    /// Hint that repeating a call with the same arguments has no further effect.
    pub fn idempotent(&mut self) -> &mut Self {
        self.idempotent = Some(true);
        self
    }

    /// Hint whether the tool reaches outside systems.
    pub fn open_world(&mut self, open: bool) -> &mut Self {
        self.open_world = Some(open);
        self
    }
}

/// Optional details of a resource, set after registering it.
pub struct ResourceOptions {
    pub(crate) uri: String,
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) mime_type: Option<String>,
    pub(crate) handler: ReadFn,
}

/// Optional details of a resource template, set after registering it.
pub struct TemplateOptions {
    pub(crate) uri_template: String,
    /// Parsed on first use: every call runs in a fresh instance, and most never match a URI.
    /// `None` for a template the matcher refuses: it is listed as written, and the host
    /// refuses to load the plugin, saying why.
    matcher: OnceLock<Option<UriTemplate>>,
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) mime_type: Option<String>,
    pub(crate) handler: ReadFn,
}

impl ResourceOptions {
    /// What the resource contains.
    pub fn description(&mut self, description: &str) -> &mut Self {
        self.description = Some(description.to_owned());
        self
    }
}

impl TemplateOptions {
    /// The parsed template, if the matcher accepts it.
    pub(crate) fn matcher(&self) -> Option<&UriTemplate> {
        self.matcher.get_or_init(|| UriTemplate::parse(&self.uri_template).ok()).as_ref()
    }

    /// What the resources contain.
    pub fn description(&mut self, description: &str) -> &mut Self {
        self.description = Some(description.to_owned());
        self
    }
}

pub(crate) struct PromptArgument {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

pub(crate) struct PromptEntry {
    pub name: String,
    pub description: String,
    /// Derived on demand: only listing needs them.
    pub arguments: fn() -> Vec<PromptArgument>,
    pub handler: PromptFn,
}

pub(crate) enum CompletionTarget {
    Prompt(String),
    Template(String),
}

pub(crate) struct CompletionEntry {
    pub target: CompletionTarget,
    pub argument: String,
    pub handler: CompleteFn,
}

/// Everything the plugin provides. Filled in by the closure given to [`crate::plugin!`].
#[derive(Default)]
pub struct Plugin {
    pub(crate) tools: Vec<ToolOptions>,
    pub(crate) resources: Vec<ResourceOptions>,
    pub(crate) templates: Vec<TemplateOptions>,
    pub(crate) prompts: Vec<PromptEntry>,
    pub(crate) completions: Vec<CompletionEntry>,
}

impl Plugin {
    /// Register a tool. `A` is its argument struct (its JSON Schema becomes the tool's input
    /// schema, doc comments included); the handler's return type decides the result shape
    /// (text, [`Content`], [`crate::Json`] for structured output, `Result` for failures,
    /// [`Outcome`] to ask the client for input).
    pub fn tool<A, M, H>(&mut self, name: &str, description: &str, handler: H) -> &mut ToolOptions
    where
        A: DeserializeOwned + JsonSchema + 'static,
        H: Handler<A, M>,
        H::Output: IntoToolResult,
    {
        let tool_name = name.to_owned();
        self.tools.push(ToolOptions {
            name: name.to_owned(),
            title: None,
            description: description.to_owned(),
            input_schema: Schema::Derived(schema_value::<A>),
            output_schema: <H::Output as IntoToolResult>::output_schema,
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
            handler: Box::new(move |arguments, cx| match serde_json::from_str::<A>(arguments) {
                Ok(args) => Ok(handler.invoke(args, cx).into_tool_outcome()),
                Err(e) if e.is_syntax() || e.is_eof() => {
                    Err(Error::InvalidParams(format!("arguments are not JSON: {e}")))
                }
                Err(e) => Ok(Outcome::Done(ToolResult::error(format!("invalid arguments for {tool_name}: {e}")))),
            }),
        });
        self.tools.last_mut().expect("just pushed")
    }

    /// Register a concrete resource served by `handler` (`fn() -> R` or `fn(&Context) -> R`
    /// style closures take `()` as their argument: `|()| ...`).
    pub fn resource<M, H>(&mut self, uri: &str, name: &str, mime_type: Option<&str>, handler: H) -> &mut ResourceOptions
    where
        H: Handler<(), M>,
        H::Output: IntoReadResult,
    {
        let mime = mime_type.map(str::to_owned);
        self.resources.push(ResourceOptions {
            uri: uri.to_owned(),
            name: name.to_owned(),
            description: None,
            mime_type: mime.clone(),
            handler: Box::new(move |uri, _vars, cx| handler.invoke((), cx).into_read(uri, mime.as_deref())),
        });
        self.resources.last_mut().expect("just pushed")
    }

    /// Register a family of resources under an RFC 6570 URI template such as
    /// `notes://{id}`; the handler receives the template's variables.
    pub fn template<M, H>(
        &mut self,
        uri_template: &str,
        name: &str,
        mime_type: Option<&str>,
        handler: H,
    ) -> &mut TemplateOptions
    where
        H: Handler<UriVariables, M>,
        H::Output: IntoReadResult,
    {
        let mime = mime_type.map(str::to_owned);
        self.templates.push(TemplateOptions {
            uri_template: uri_template.to_owned(),
            matcher: OnceLock::new(),
            name: name.to_owned(),
            description: None,
            mime_type: mime.clone(),
            handler: Box::new(move |uri, vars, cx| handler.invoke(vars, cx).into_read(uri, mime.as_deref())),
        });
        self.templates.last_mut().expect("just pushed")
    }

    /// Register a prompt. `A` is its argument struct: every field becomes a prompt argument
    /// (string-valued; `Option` fields are optional), its doc comment the description.
    pub fn prompt<A, M, H>(&mut self, name: &str, description: &str, handler: H) -> &mut Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        H: Handler<A, M>,
        H::Output: IntoPromptResult,
    {
        let prompt_name = name.to_owned();
        self.prompts.push(PromptEntry {
            name: name.to_owned(),
            description: description.to_owned(),
            arguments: || prompt_arguments(&schema_value::<A>()),
            handler: Box::new(move |arguments, cx| {
                let args = serde_json::from_value::<A>(arguments)
                    .map_err(|e| Error::InvalidParams(format!("invalid arguments for prompt {prompt_name}: {e}")))?;
                handler.invoke(args, cx).into_prompt().map_err(Error::Failed)
            }),
        });
        self
    }

    /// Suggest values for argument `argument` of prompt `prompt`: `handler` gets the partial
    /// value and returns candidates, best first.
    pub fn complete_prompt<F>(&mut self, prompt: &str, argument: &str, handler: F) -> &mut Self
    where
        F: Fn(&str) -> Vec<String> + Send + Sync + 'static,
    {
        self.completions.push(CompletionEntry {
            target: CompletionTarget::Prompt(prompt.to_owned()),
            argument: argument.to_owned(),
            handler: Box::new(handler),
        });
        self
    }

    /// Suggest values for variable `variable` of the resource template `uri_template`.
    pub fn complete_template<F>(&mut self, uri_template: &str, variable: &str, handler: F) -> &mut Self
    where
        F: Fn(&str) -> Vec<String> + Send + Sync + 'static,
    {
        self.completions.push(CompletionEntry {
            target: CompletionTarget::Template(uri_template.to_owned()),
            argument: variable.to_owned(),
            handler: Box::new(handler),
        });
        self
    }
}

/// Prompt arguments from an object schema: its properties, their descriptions, and which are
/// required.
fn prompt_arguments(schema: &Value) -> Vec<PromptArgument> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(name, prop)| PromptArgument {
                    name: name.clone(),
                    description: prop.get("description").and_then(Value::as_str).map(str::to_owned),
                    required: required.contains(&name.as_str()),
                })
                .collect()
        })
        .unwrap_or_default()
}
