//! Content blocks and the conversions that turn handler return values into MCP results.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::registry::{Outcome, PromptMessage, Role};

/// One piece of content in a tool result or prompt message.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// An image: raw bytes and media type.
    Image { data: Vec<u8>, mime_type: String },
    /// An audio clip: raw bytes and media type.
    Audio { data: Vec<u8>, mime_type: String },
    /// An embedded text resource.
    ResourceText { uri: String, mime_type: Option<String>, text: String },
    /// An embedded binary resource.
    ResourceBlob { uri: String, mime_type: Option<String>, blob: Vec<u8> },
    /// A link to a resource the client can read later.
    ResourceLink { uri: String, name: String, description: Option<String>, mime_type: Option<String> },
}

impl Content {
    /// Plain text content.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text(text.into())
    }

    /// Image content, e.g. `Content::image(png_bytes, "image/png")`.
    pub fn image(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        Content::Image { data: data.into(), mime_type: mime_type.into() }
    }

    /// Audio content, e.g. `Content::audio(wav_bytes, "audio/wav")`.
    pub fn audio(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        Content::Audio { data: data.into(), mime_type: mime_type.into() }
    }

    /// An embedded text resource.
    pub fn resource_text(uri: impl Into<String>, mime_type: impl Into<String>, text: impl Into<String>) -> Self {
        Content::ResourceText { uri: uri.into(), mime_type: Some(mime_type.into()), text: text.into() }
    }

    /// An embedded binary resource.
    pub fn resource_blob(uri: impl Into<String>, mime_type: impl Into<String>, blob: impl Into<Vec<u8>>) -> Self {
        Content::ResourceBlob { uri: uri.into(), mime_type: Some(mime_type.into()), blob: blob.into() }
    }

    /// A link to a resource.
    pub fn link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Content::ResourceLink { uri: uri.into(), name: name.into(), description: None, mime_type: None }
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::Text(text)
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::Text(text.to_owned())
    }
}

/// A complete tool result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolResult {
    /// Content for the model.
    pub content: Vec<Content>,
    /// Structured output (must match the tool's output schema, if it has one).
    pub structured: Option<Value>,
    /// The tool ran but failed; `content` explains why.
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result with the given content.
    pub fn new(content: impl IntoIterator<Item = Content>) -> Self {
        ToolResult { content: content.into_iter().collect(), structured: None, is_error: false }
    }

    /// A failed result: the model sees `message` and knows the call did not succeed.
    pub fn error(message: impl Into<String>) -> Self {
        ToolResult { content: vec![Content::Text(message.into())], structured: None, is_error: true }
    }
}

/// Structured output: serialized as `structuredContent` (and as JSON text for older clients),
/// with the tool's output schema derived from `T`.
#[derive(Debug, Clone)]
pub struct Json<T>(pub T);

/// Anything a tool handler may return.
pub trait IntoToolResult {
    /// Convert into a result, or a request for client input.
    fn into_tool_outcome(self) -> Outcome<ToolResult>;

    /// The output schema this return type implies, if any.
    fn output_schema() -> Option<Value> {
        None
    }
}

impl IntoToolResult for ToolResult {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        Outcome::Done(self)
    }
}

impl IntoToolResult for String {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        Outcome::Done(ToolResult::new([Content::Text(self)]))
    }
}

impl IntoToolResult for &'static str {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        self.to_owned().into_tool_outcome()
    }
}

impl IntoToolResult for Content {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        Outcome::Done(ToolResult::new([self]))
    }
}

impl IntoToolResult for Vec<Content> {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        Outcome::Done(ToolResult::new(self))
    }
}

impl<T: Serialize + JsonSchema> IntoToolResult for Json<T> {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        match serde_json::to_value(&self.0) {
            Ok(value) => Outcome::Done(ToolResult {
                content: vec![Content::Text(value.to_string())],
                structured: Some(value),
                is_error: false,
            }),
            Err(e) => Outcome::Done(ToolResult::error(format!("could not serialize the tool output: {e}"))),
        }
    }

    fn output_schema() -> Option<Value> {
        Some(crate::registry::schema_value::<T>())
    }
}

impl<T: IntoToolResult, E: std::fmt::Display> IntoToolResult for Result<T, E> {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        match self {
            Ok(value) => value.into_tool_outcome(),
            Err(e) => Outcome::Done(ToolResult::error(e.to_string())),
        }
    }

    fn output_schema() -> Option<Value> {
        T::output_schema()
    }
}

impl<T: IntoToolResult> IntoToolResult for Outcome<T> {
    fn into_tool_outcome(self) -> Outcome<ToolResult> {
        match self {
            Outcome::Done(value) => value.into_tool_outcome(),
            Outcome::InputRequired(ask) => Outcome::InputRequired(ask),
        }
    }

    fn output_schema() -> Option<Value> {
        T::output_schema()
    }
}

/// Why a resource read or prompt failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The resource or prompt does not exist.
    NotFound(String),
    /// The arguments are unusable.
    InvalidParams(String),
    /// Anything else.
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotFound(m) | Error::InvalidParams(m) | Error::Failed(m) => f.write_str(m),
        }
    }
}

/// Anything a resource handler may return. Text becomes a text resource and bytes a blob,
/// both with the resource's declared media type; `Option::None` means "no such resource".
pub trait IntoReadResult {
    #[doc(hidden)]
    fn into_read(self, uri: &str, mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error>;
}

fn resource_content(uri: &str, mime_type: Option<&str>, text: Option<String>, blob: Option<Vec<u8>>) -> Content {
    let mime_type = mime_type.map(str::to_owned);
    match (text, blob) {
        (_, Some(blob)) => Content::ResourceBlob { uri: uri.to_owned(), mime_type, blob },
        (text, None) => Content::ResourceText { uri: uri.to_owned(), mime_type, text: text.unwrap_or_default() },
    }
}

impl IntoReadResult for String {
    fn into_read(self, uri: &str, mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error> {
        Ok(Outcome::Done(vec![resource_content(uri, mime_type.or(Some("text/plain")), Some(self), None)]))
    }
}

impl IntoReadResult for Vec<u8> {
    fn into_read(self, uri: &str, mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error> {
        Ok(Outcome::Done(vec![resource_content(uri, mime_type.or(Some("application/octet-stream")), None, Some(self))]))
    }
}

impl<T: Serialize> IntoReadResult for Json<T> {
    fn into_read(self, uri: &str, _mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error> {
        let text =
            serde_json::to_string(&self.0).map_err(|e| Error::Failed(format!("could not serialize {uri}: {e}")))?;
        Ok(Outcome::Done(vec![resource_content(uri, Some("application/json"), Some(text), None)]))
    }
}

/// Several contents for one read; each must be a `Content::ResourceText` or `ResourceBlob`.
impl IntoReadResult for Vec<Content> {
    fn into_read(self, uri: &str, _mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error> {
        if self.iter().any(|c| !matches!(c, Content::ResourceText { .. } | Content::ResourceBlob { .. })) {
            return Err(Error::Failed(format!("{uri}: a resource read may only return embedded resource contents")));
        }
        Ok(Outcome::Done(self))
    }
}

impl<T: IntoReadResult> IntoReadResult for Option<T> {
    fn into_read(self, uri: &str, mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error> {
        match self {
            Some(value) => value.into_read(uri, mime_type),
            None => Err(Error::NotFound(format!("no resource {uri}"))),
        }
    }
}

/// `Err` fails the read; return [`Error::NotFound`] for a resource that does not exist.
impl<T: IntoReadResult, E: Into<Error>> IntoReadResult for Result<T, E> {
    fn into_read(self, uri: &str, mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error> {
        self.map_err(Into::into)?.into_read(uri, mime_type)
    }
}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error::Failed(message)
    }
}

impl<T: IntoReadResult> IntoReadResult for Outcome<T> {
    fn into_read(self, uri: &str, mime_type: Option<&str>) -> Result<Outcome<Vec<Content>>, Error> {
        match self {
            Outcome::Done(value) => value.into_read(uri, mime_type),
            Outcome::InputRequired(ask) => Ok(Outcome::InputRequired(ask)),
        }
    }
}

/// Anything a prompt handler may return. A string becomes one user message.
pub trait IntoPromptResult {
    #[doc(hidden)]
    fn into_prompt(self) -> Result<Outcome<Vec<PromptMessage>>, String>;
}

impl IntoPromptResult for String {
    fn into_prompt(self) -> Result<Outcome<Vec<PromptMessage>>, String> {
        Ok(Outcome::Done(vec![PromptMessage { role: Role::User, content: Content::Text(self) }]))
    }
}

impl IntoPromptResult for PromptMessage {
    fn into_prompt(self) -> Result<Outcome<Vec<PromptMessage>>, String> {
        Ok(Outcome::Done(vec![self]))
    }
}

impl IntoPromptResult for Vec<PromptMessage> {
    fn into_prompt(self) -> Result<Outcome<Vec<PromptMessage>>, String> {
        Ok(Outcome::Done(self))
    }
}

impl<T: IntoPromptResult, E: std::fmt::Display> IntoPromptResult for Result<T, E> {
    fn into_prompt(self) -> Result<Outcome<Vec<PromptMessage>>, String> {
        self.map_err(|e| e.to_string())?.into_prompt()
    }
}

impl<T: IntoPromptResult> IntoPromptResult for Outcome<T> {
    fn into_prompt(self) -> Result<Outcome<Vec<PromptMessage>>, String> {
        match self {
            Outcome::Done(value) => value.into_prompt(),
            Outcome::InputRequired(ask) => Ok(Outcome::InputRequired(ask)),
        }
    }
}
