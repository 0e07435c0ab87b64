//! What a handler can do while it runs: log, report progress, notice cancellation, read the
//! client's answers to earlier input requests, and ask for more.

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::content::Content;
use crate::guest::bindings::capsule::plugin::host;
use crate::registry::{ListKind, Role};

/// Log severity, as MCP defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// What the client can do for the current request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientCapabilities {
    /// Form-mode elicitation.
    pub elicitation_form: bool,
    /// URL-mode elicitation.
    pub elicitation_url: bool,
    /// Sampling.
    pub sampling: bool,
    /// Listing roots.
    pub roots: bool,
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitAction {
    Accept,
    Decline,
    Cancel,
}

/// A root the client exposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// Display name.
    pub name: Option<String>,
}

/// The client's answer to one input request.
#[derive(Debug, Clone, PartialEq)]
pub enum InputResponse {
    /// Answer to an elicitation: the action and, when accepted, the form values.
    Elicitation { action: ElicitAction, content: Option<Value> },
    /// Answer to a sampling request.
    Sampling { role: Role, content: Content, model: String, stop_reason: Option<String> },
    /// The client's roots.
    Roots(Vec<Root>),
    /// An answer the host could not interpret.
    Invalid(String),
}

/// The client's answer to one form elicitation, as [`Context::form`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Form<'a, T> {
    /// No answer to it came with this call: ask for it.
    Missing,
    /// Accepted, with values that fit `T`.
    Accepted(T),
    /// Declined, cancelled, answered with another kind of response, or with values that do
    /// not fit `T`: end the call (asking again would ask a client that already said no).
    Unusable(&'a InputResponse),
}

/// A directory the current call may use, as the host opened it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Its absolute path, for `std::fs`. For a client's root this is the root's own path.
    pub path: String,
    /// The client's name for the root, if it gave one.
    pub name: Option<String>,
    /// Whether files in it may be created, changed and deleted.
    pub writable: bool,
}

/// Who the current request comes from, as the host authenticated it. The token itself never
/// reaches a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Identity {
    /// The tenant whose catalog serves the call (`default` without tenants).
    pub tenant: String,
    /// The authenticated caller; `None` when the tenant does not authenticate its clients.
    pub principal: Option<Principal>,
}

/// Someone the host authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Principal {
    /// The access token's `sub`, or the subject the operator gave an API key.
    pub subject: String,
    /// The OAuth client the token was issued to, when it says.
    pub client: Option<String>,
    /// The scopes the credential grants. The host has already refused anything outside them.
    pub scopes: Vec<String>,
}

/// The request a handler is serving.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub(crate) client: ClientCapabilities,
    pub(crate) responses: Vec<(String, InputResponse)>,
    pub(crate) state: Option<Vec<u8>>,
}

impl Context {
    /// The directories this call may use: what the operator granted, narrowed to the client's
    /// roots where the operator asked for that. Nothing else on the host exists for `std::fs`.
    pub fn mounts(&self) -> Vec<Mount> {
        host::mounts().into_iter().map(|m| Mount { path: m.path, name: m.name, writable: m.writable }).collect()
    }

    /// Who this request comes from: the tenant, and the authenticated principal if any. Use
    /// it to attribute work or to narrow what a tool does for a caller; access to the tool
    /// itself is the host's to enforce.
    pub fn caller(&self) -> Identity {
        let id = host::caller();
        Identity {
            tenant: id.tenant,
            principal: id.principal.map(|p| Principal { subject: p.subject, client: p.client, scopes: p.scopes }),
        }
    }

    /// What the client can do for this request.
    pub fn client(&self) -> ClientCapabilities {
        self.client
    }

    /// Send a log message to the client (if it asked for this level) and the host's log.
    pub fn log(&self, level: LogLevel, message: impl AsRef<str>) {
        host::log(level.into(), None, message.as_ref());
    }

    /// Log at `info` level.
    pub fn info(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Info, message);
    }

    /// Log at `debug` level.
    pub fn debug(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Debug, message);
    }

    /// Log at `warning` level.
    pub fn warn(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Warning, message);
    }

    /// Report progress (sent only if the client asked for progress on this request).
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        host::progress(progress, total, message);
    }

    /// Whether the client has cancelled this request.
    pub fn is_cancelled(&self) -> bool {
        host::cancelled()
    }

    /// Tell subscribed clients that this plugin's tools, resources or prompts changed.
    pub fn list_changed(&self, kind: ListKind) {
        host::list_changed(match kind {
            ListKind::Tools => host::ListKind::Tools,
            ListKind::Resources => host::ListKind::Resources,
            ListKind::Prompts => host::ListKind::Prompts,
        });
    }

    /// Tell clients subscribed to a resource this plugin serves that its contents changed
    /// (sent once per URI when the call ends; see `resource-updated` in the WIT).
    pub fn resource_updated(&self, uri: &str) {
        host::resource_updated(uri);
    }

    /// The client's answer to the input request with this key, if this is a retry that has it.
    pub fn response(&self, key: &str) -> Option<&InputResponse> {
        self.responses.iter().find(|(k, _)| k == key).map(|(_, r)| r)
    }

    /// All answers received with this call.
    pub fn responses(&self) -> impl Iterator<Item = (&str, &InputResponse)> {
        self.responses.iter().map(|(k, r)| (k.as_str(), r))
    }

    /// The accepted form values of the elicitation with this key, deserialized; `None` when
    /// there is no such answer, it was declined or cancelled, or the values do not fit `T`.
    /// To tell "not asked yet" from "answered, but not with values", use [`Context::form`].
    pub fn accepted<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        match self.form(key) {
            Form::Accepted(values) => Some(values),
            Form::Missing | Form::Unusable(_) => None,
        }
    }

    /// Where the call stands with the form elicitation with this key: not answered in this
    /// call (ask for it), accepted with values that fit `T`, or answered some other way.
    /// A handler that asks again on any answer but the wanted one keeps a declining client
    /// going round until the host's limit on input rounds ends the call with an error.
    pub fn form<T: DeserializeOwned>(&self, key: &str) -> Form<'_, T> {
        let Some(answer) = self.response(key) else { return Form::Missing };
        match answer {
            InputResponse::Elicitation { action: ElicitAction::Accept, content: Some(content) } => {
                serde_json::from_value(content.clone()).map_or(Form::Unusable(answer), Form::Accepted)
            }
            _ => Form::Unusable(answer),
        }
    }

    /// The opaque state returned with the previous `InputRequired`, if any.
    pub fn state(&self) -> Option<&[u8]> {
        self.state.as_deref()
    }

    /// The previous state, deserialized from JSON.
    pub fn state_json<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(self.state()?).ok()
    }
}

/// A request for client input: build it, then return it as `Outcome::InputRequired(ask)`
/// (or `ask.into()`). The host asks the client and calls the handler again with the
/// answers available through [`Context::response`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ask {
    pub(crate) requests: Vec<(String, AskItem)>,
    pub(crate) state: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AskItem {
    Form { message: String, schema: Value },
    Url { message: String, url: String, id: String },
    Sample { messages: Vec<(Role, Content)>, system: Option<String>, max_tokens: u32 },
    Roots,
}

impl Ask {
    /// An empty request; add at least one item or some state.
    pub fn new() -> Self {
        Ask::default()
    }

    /// Ask the user to fill a form described by the flat JSON Schema `schema`.
    pub fn form(mut self, key: impl Into<String>, message: impl Into<String>, schema: Value) -> Self {
        self.requests.push((key.into(), AskItem::Form { message: message.into(), schema }));
        self
    }

    /// Ask the user to fill a form whose schema is derived from `T`.
    pub fn form_for<T: JsonSchema>(self, key: impl Into<String>, message: impl Into<String>) -> Self {
        self.form(key, message, crate::registry::schema_value::<T>())
    }

    /// Ask the user to complete an interaction at `url`.
    pub fn url(
        mut self,
        key: impl Into<String>,
        message: impl Into<String>,
        url: impl Into<String>,
        id: impl Into<String>,
    ) -> Self {
        self.requests.push((key.into(), AskItem::Url { message: message.into(), url: url.into(), id: id.into() }));
        self
    }

    /// Ask the client's model to answer `prompt` (one user message) in at most `max_tokens`.
    pub fn sample(self, key: impl Into<String>, prompt: impl Into<String>, max_tokens: u32) -> Self {
        self.sample_messages(key, vec![(Role::User, Content::text(prompt))], None, max_tokens)
    }

    /// Ask the client's model to continue a conversation.
    pub fn sample_messages(
        mut self,
        key: impl Into<String>,
        messages: Vec<(Role, Content)>,
        system: Option<String>,
        max_tokens: u32,
    ) -> Self {
        self.requests.push((key.into(), AskItem::Sample { messages, system, max_tokens }));
        self
    }

    /// Ask for the client's roots.
    pub fn roots(mut self, key: impl Into<String>) -> Self {
        self.requests.push((key.into(), AskItem::Roots));
        self
    }

    /// Attach opaque state, returned by [`Context::state`] on the next call.
    pub fn state(mut self, state: impl Into<Vec<u8>>) -> Self {
        self.state = Some(state.into());
        self
    }

    /// Attach state serialized as JSON, returned by [`Context::state_json`].
    pub fn state_json(self, state: &impl Serialize) -> Self {
        let bytes = serde_json::to_vec(state).expect("plugin state must serialize to JSON");
        self.state(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Name {
        name: String,
    }

    fn answered(action: ElicitAction, content: Option<Value>) -> Context {
        answered_with(InputResponse::Elicitation { action, content })
    }

    fn answered_with(answer: InputResponse) -> Context {
        Context { client: ClientCapabilities::default(), responses: vec![("who".into(), answer)], state: None }
    }

    #[test]
    fn a_form_answer_is_missing_accepted_or_unusable() {
        let accepted = answered(ElicitAction::Accept, Some(serde_json::json!({"name": "Ada"})));
        assert_eq!(accepted.form::<Name>("who"), Form::Accepted(Name { name: "Ada".into() }));
        assert_eq!(accepted.accepted::<Name>("who"), Some(Name { name: "Ada".into() }));
        assert_eq!(accepted.form::<Name>("other"), Form::Missing);

        let misfit = answered(ElicitAction::Accept, Some(serde_json::json!({"age": 3})));
        assert!(matches!(misfit.form::<Name>("who"), Form::Unusable(InputResponse::Elicitation { .. })));
        assert_eq!(misfit.accepted::<Name>("who"), None);
        for action in [ElicitAction::Decline, ElicitAction::Cancel] {
            let said_no = answered(action, None);
            assert!(matches!(said_no.form::<Name>("who"), Form::Unusable(_)), "{action:?}");
        }
        let roots = answered_with(InputResponse::Roots(Vec::new()));
        assert_eq!(roots.form::<Name>("who"), Form::Unusable(&InputResponse::Roots(Vec::new())));
    }
}
