//! The MCP server: Capsule's catalog served over MCP, every revision at once.
//!
//! One [`CapsuleServer`] value per connection (stdio), legacy session or stateless request
//! (HTTP); they share the catalog and the session registry. A transport reads a message
//! and hands its method and raw params to [`CapsuleServer::request`] with a [`Front`]
//! (the request id, the [`ClientLink`] back to the client, its cancellation), and writes
//! the result it gets back; `dispatch` applies the revision rules in one place. Everything
//! a plugin call needs from the client (elicitation, sampling, roots) goes through `input`,
//! which picks the mechanism the client's revision allows.
//!
//! Request handling sees only a `RequestCx` and its `ClientLink`, never a transport; rmcp
//! provides the protocol's model types and nothing else.

mod calls;
mod convert;
mod dispatch;
mod events;
mod input;
mod lists;
mod meta;
pub mod mirror;
mod reply;
mod request;
mod roots;
mod session;
mod state;
mod unique;

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::PaginatedRequestParams;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use lists::self_described;
pub use request::{ClientLink, Front, LinkError, LinkFuture, Origin, TraceContext, Transport};
pub use session::{InFlight, Sessions};
pub use state::StateCodec;

use crate::auth::scope::{self, Kind};
use crate::catalog::{Catalog, Published, page};
use crate::policy::ClientRoots;
use crate::runtime::{CallError, Events, Plugin, types as wit};
use crate::telemetry::Metrics;
use events::Route;
use request::RequestCx;
use session::SessionState;
use state::Binding;

/// Items per page of `tools/list`, `resources/list` and the like.
const PAGE_SIZE: usize = 100;

/// The longest URI a request may carry (`resources/read`, `subscribe`, `unsubscribe`,
/// completion references). Far beyond any real resource URI; a bound on the work one request
/// can ask of the template matcher and of a plugin.
pub const MAX_URI_BYTES: usize = 16 << 10;

/// Refuse a URI longer than [`MAX_URI_BYTES`] with -32602.
fn check_uri(uri: &str) -> Result<(), ErrorData> {
    if uri.len() > MAX_URI_BYTES {
        return Err(ErrorData::invalid_params(
            format!("the URI is {} bytes long; the limit is {MAX_URI_BYTES} bytes", uri.len()),
            None,
        ));
    }
    Ok(())
}

/// The longest string a client may use as a request id or a progress token. Both are
/// echoed in every message about the request (and a waiting request holds its id), so a
/// megabyte id would cost a megabyte per notification; real clients send counters and UUIDs.
pub const MAX_ID_BYTES: usize = 1024;

/// How much of a client's string an error message repeats.
const EXCERPT_CHARS: usize = 100;

/// `text` as an error message quotes it: whole when short, else its first
/// [`EXCERPT_CHARS`] characters and an ellipsis, so that a long name or method sent back
/// does not make the answer (or a log line) as large as the request.
pub fn excerpt(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => text.into(),
        Some((end, _)) => format!("{}…", &text[..end]).into(),
    }
}

/// Run a validation inline when it is cheap, on the blocking pool otherwise (a large value, or
/// a heavy schema), so that validating never holds an async worker for long.
async fn off_reactor(inline: bool, check: impl FnOnce() -> Result<(), String> + Send + 'static) -> Result<(), String> {
    if inline {
        return check();
    }
    tokio::task::spawn_blocking(check).await.unwrap_or_else(|e| Err(format!("validation failed: {e}")))
}

/// What every connection shares: the published catalogs, the sessions, the state key.
pub struct Shared {
    published: Published,
    sessions: Arc<Sessions>,
    codec: StateCodec,
    metrics: Arc<Metrics>,
}

impl Shared {
    /// Serve the catalogs `published` carries, sealing request state with `codec`. Clients
    /// hear of every list that differs between one catalog and the next; while the first
    /// load runs (a catalog a plugin), once for the whole load when it ends (or after
    /// [`FIRST_LOAD_WAIT`]). Requests and calls are recorded in `metrics`.
    pub fn new(published: Published, codec: StateCodec, metrics: Arc<Metrics>) -> Arc<Self> {
        let sessions = Arc::<Sessions>::default();
        let mut follow = published.clone();
        let notify = sessions.clone();
        tokio::spawn(async move {
            let mut seen = follow.current();
            // The first change is the first load's, even when the load ended before this
            // task woke to it (a fast, cached load).
            let mut first = true;
            while let Some((mut new, mut changed)) = follow.next(&seen).await {
                let first_load = std::mem::take(&mut first) || !follow.is_loaded();
                if first_load {
                    follow.first_load(FIRST_LOAD_WAIT).await;
                    (new, changed) = follow.since(&seen);
                }
                for kind in changed {
                    notify.list_changed(kind, &new, first_load).await;
                }
                seen = new;
            }
        });
        Arc::new(Shared { published, sessions, codec, metrics })
    }

    /// The catalog in force. A request keeps the one it started with.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.published.current()
    }

    /// Look something up in the catalog in force, without holding on to it.
    pub fn with_catalog<R>(&self, look: impl FnOnce(&Catalog) -> R) -> R {
        self.published.with(look)
    }

    /// Where requests, calls and sessions are recorded.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

/// How long a request that depends on the plugins waits for them while the server's first
/// load is still under way. Past it, the request is answered with the plugins loaded so far
/// (the others join with a list-change notification), so a slow plugin cannot hold a client
/// past its own time-outs.
pub const FIRST_LOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// An MCP server over the shared catalog. Clone it per connection or session.
#[derive(Clone)]
pub struct CapsuleServer {
    shared: Arc<Shared>,
    session: Arc<SessionState>,
}

impl CapsuleServer {
    /// A server for a new connection or session.
    pub fn new(shared: Arc<Shared>) -> Self {
        CapsuleServer { shared, session: Arc::default() }
    }

    /// The revision `initialize` agreed on, once it has.
    pub fn version(&self) -> Option<&str> {
        self.session.peer.get().map(|peer| peer.version.as_str())
    }

    /// Wait (up to [`FIRST_LOAD_WAIT`]) for the first load of the plugins, if it is still
    /// under way: a client that starts with the server gets whole lists, and a call to a
    /// plugin that is still compiling is not refused as unknown.
    pub async fn plugins_loaded(&self) {
        self.shared.published.first_load(FIRST_LOAD_WAIT).await;
    }

    /// Whether a request of this session is running (see [`InFlight`]).
    pub fn is_answering(&self) -> bool {
        self.session.is_answering()
    }

    /// [`Self::begin`], unless `cap` requests of this session are running already.
    pub fn try_begin(
        &self,
        id: &rmcp::model::RequestId,
        within: Option<&CancellationToken>,
        cap: usize,
    ) -> Option<InFlight> {
        self.session.try_begin(id, within, cap)
    }

    /// Note a request of this session as running (see [`InFlight`]), cancelled with
    /// `within` too if given.
    pub fn begin(&self, id: &rmcp::model::RequestId, within: Option<&CancellationToken>) -> InFlight {
        self.session.begin(id, within)
    }

    /// Whether this session has been answered an `initialize`.
    pub fn is_initialized(&self) -> bool {
        self.session.peer.get().is_some()
    }

    /// The revision this session agreed on in `initialize`, if it has.
    pub fn negotiated(&self) -> Option<rmcp::model::ProtocolVersion> {
        self.session.peer.get().map(|peer| peer.version.clone())
    }
}

fn cursor(params: &Option<PaginatedRequestParams>) -> Option<&str> {
    params.as_ref().and_then(|p| p.cursor.as_deref())
}

fn paged<'a, T>(
    items: &'a [T],
    params: &Option<PaginatedRequestParams>,
) -> Result<(&'a [T], Option<String>), ErrorData> {
    page(items, cursor(params), PAGE_SIZE).map_err(|e| ErrorData::invalid_params(e, None))
}

// Capsule's own error codes sit outside JSON-RPC's reserved range (-32768..-32000): from
// 2026-07-28 MCP keeps -32020..-32099 for codes it defines, asks implementations not to use
// the legacy -32000..-32019 and to allocate new codes outside the reserved range. The
// numbers echo the HTTP status of the same refusal.

/// The code of a refusal for want of a scope; over HTTP it is also a 403 whose challenge
/// names the scope, so the client can step up.
pub const INSUFFICIENT_SCOPE: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-31403);

/// The code of a refusal for want of room: the session table is full, a session has its
/// most requests running, or a client has its most requests waiting on its own answers.
pub const NO_ROOM: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-31429);

/// Refuse a request for `plugin`'s item that the principal's token does not cover.
fn authorize(cx: &RequestCx, plugin: &Plugin, kind: Kind, name: &str) -> Result<(), ErrorData> {
    if cx.may(plugin.name(), kind, name) {
        return Ok(());
    }
    let needed = scope::of_item(plugin.name(), kind, name);
    Err(ErrorData::new(
        INSUFFICIENT_SCOPE,
        format!("Forbidden: this request needs the scope {needed}"),
        Some(serde_json::json!({ "scope": needed })),
    ))
}

/// A sandbox fault as the MCP error for a non-tool request.
fn call_error(plugin: &Plugin, error: CallError) -> ErrorData {
    ErrorData::internal_error(format!("plugin {} failed: {error}", plugin.name()), None)
}

/// A plugin's own error for a non-tool request.
fn plugin_error(error: wit::Error, not_found: impl FnOnce(String) -> ErrorData) -> ErrorData {
    match error {
        wit::Error::NotFound(message) => not_found(message),
        wit::Error::InvalidParams(message) => ErrorData::invalid_params(message, None),
        wit::Error::Failed(message) => ErrorData::internal_error(message, None),
    }
}

/// How one round of a plugin call ended: done, or asking the client for input (`A` is
/// uninhabited for calls that cannot ask).
enum Round<T, A = wit::InputRequired> {
    Done(T),
    Ask(A),
}

/// One kind of call into a plugin. Its `Output` is what a finished round produces (the
/// plugin's own error included), so each request handler matches only what it can get.
trait Operation: Sync {
    type Output: Send;
    type Ask: Send;

    fn round(
        &self,
        plugin: &Plugin,
        context: &wit::RequestContext,
        roots: &ClientRoots,
        events: Events,
    ) -> impl Future<Output = Result<Round<Self::Output, Self::Ask>, CallError>> + Send;
}

struct ToolCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

impl Operation for ToolCall<'_> {
    type Output = Result<wit::ToolResult, wit::Error>;
    type Ask = wit::InputRequired;

    async fn round(
        &self,
        plugin: &Plugin,
        context: &wit::RequestContext,
        roots: &ClientRoots,
        events: Events,
    ) -> Result<Round<Self::Output>, CallError> {
        Ok(match plugin.call_tool(self.name, self.arguments, context, roots, events).await? {
            Ok(wit::CallOutcome::Complete(result)) => Round::Done(Ok(result)),
            Ok(wit::CallOutcome::InputRequired(ir)) => Round::Ask(ir),
            Err(error) => Round::Done(Err(error)),
        })
    }
}

struct ResourceRead<'a> {
    uri: &'a str,
}

impl Operation for ResourceRead<'_> {
    type Output = Result<Vec<wit::ResourceContents>, wit::Error>;
    type Ask = wit::InputRequired;

    async fn round(
        &self,
        plugin: &Plugin,
        context: &wit::RequestContext,
        roots: &ClientRoots,
        events: Events,
    ) -> Result<Round<Self::Output>, CallError> {
        Ok(match plugin.read_resource(self.uri, context, roots, events).await? {
            Ok(wit::ReadOutcome::Complete(contents)) => Round::Done(Ok(contents)),
            Ok(wit::ReadOutcome::InputRequired(ir)) => Round::Ask(ir),
            Err(error) => Round::Done(Err(error)),
        })
    }
}

struct PromptGet<'a> {
    name: &'a str,
    arguments: &'a [(String, String)],
}

impl Operation for PromptGet<'_> {
    type Output = Result<wit::PromptResult, wit::Error>;
    type Ask = wit::InputRequired;

    async fn round(
        &self,
        plugin: &Plugin,
        context: &wit::RequestContext,
        roots: &ClientRoots,
        events: Events,
    ) -> Result<Round<Self::Output>, CallError> {
        Ok(match plugin.get_prompt(self.name, self.arguments, context, roots, events).await? {
            Ok(wit::GetOutcome::Complete(result)) => Round::Done(Ok(result)),
            Ok(wit::GetOutcome::InputRequired(ir)) => Round::Ask(ir),
            Err(error) => Round::Done(Err(error)),
        })
    }
}

struct Completion<'a> {
    reference: &'a wit::Reference,
    argument: &'a str,
    value: &'a str,
    context: &'a [(String, String)],
}

impl Operation for Completion<'_> {
    type Output = Result<wit::Suggestions, wit::Error>;
    /// The WIT gives `complete` no way to ask for input.
    type Ask = std::convert::Infallible;

    async fn round(
        &self,
        plugin: &Plugin,
        _: &wit::RequestContext,
        _: &ClientRoots,
        events: Events,
    ) -> Result<Round<Self::Output, Self::Ask>, CallError> {
        Ok(Round::Done(plugin.complete(self.reference, self.argument, self.value, self.context, events).await?))
    }
}

/// How a request with input rounds ended.
enum Rounds<T> {
    Done(T),
    InputRequired(rmcp::model::InputRequiredResult),
}

/// Why a request with input rounds failed.
enum Failure {
    /// A protocol-level problem: answered with a JSON-RPC error.
    Protocol(ErrorData),
    /// The plugin's sandbox failed: a tool error result for tools, an internal error otherwise.
    Call(CallError),
}

impl CapsuleServer {
    fn route(&self, cx: &RequestCx, plugin: &Plugin) -> Route {
        let log_level = if cx.is_modern() {
            cx.log_level
        } else {
            *self.session.log_level.lock().unwrap_or_else(|e| e.into_inner())
        };
        Route {
            link: cx.link.clone(),
            plugin: plugin.name().to_owned(),
            principal: cx.principal.clone(),
            progress_token: cx.progress_token.clone(),
            log_level,
            known: cx.known(),
        }
    }

    /// Run one round of a plugin call with its events forwarded, stopping it if the request
    /// is cancelled.
    async fn run<O: Operation>(
        &self,
        cx: &RequestCx,
        plugin: &Plugin,
        op: &O,
        context: &wit::RequestContext,
        roots: &ClientRoots,
    ) -> Result<Round<O::Output, O::Ask>, CallError> {
        let (events, changed, forward) = events::channel(cx.cancelled.clone(), self.route(cx, plugin));
        let work = async {
            tokio::select! {
                result = op.round(plugin, context, roots, events) => result,
                () = cx.cancelled.cancelled() => Err(CallError::Cancelled),
            }
        };
        // The forwarding runs on a task of its own: a long call blocks this one (see
        // `runtime::offload`). Awaited after the call, it puts every notification before the
        // response. A client that does not read its notifications cannot hold the call past
        // its wall-clock limit: what is not sent by then is dropped.
        let deadline = tokio::time::Instant::now() + plugin.grants().limits.timeout;
        let forward = forward.map(|forward| {
            let name = plugin.name().to_owned();
            tokio::spawn(async move {
                if tokio::time::timeout_at(deadline, forward).await.is_err() {
                    tracing::warn!(plugin = %name, "the client did not take the call's notifications in time; the rest are dropped");
                }
            })
        });
        let result = work.await;
        if let Some(forward) = forward {
            let _ = forward.await;
        }
        // The plugin's lists are read again off the call's path, once however often it asked;
        // clients hear of the lists that really changed.
        if !changed.lists().is_empty() {
            self.shared.published.relist(plugin.name());
        }
        // A plugin may speak only for the resources it serves.
        let updated = changed.take_resources();
        if !updated.is_empty() {
            let catalog = self.shared.catalog();
            let owned = |uri: &String| catalog.serves(plugin.name(), uri);
            self.shared.sessions.resources_updated(updated.into_iter().filter(owned).collect());
        }
        result
    }

    /// Drive a plugin call through its input rounds. 2026-07-28 requests get
    /// `input_required` back; older sessions are asked directly and the plugin is called again.
    async fn with_input<O: Operation<Ask = wit::InputRequired>>(
        &self,
        cx: &RequestCx,
        plugin: &Plugin,
        op: O,
        bound_to: &Binding<'_>,
        retry: (Option<&rmcp::model::InputResponses>, Option<&str>),
    ) -> Result<Rounds<O::Output>, Failure> {
        // The tenant's concurrent-call quota counts the whole request, its waits on the
        // client between rounds included.
        let _call = plugin.account().call().await.map_err(|e| Failure::Call(e.into()))?;
        let client = input::plugin_capabilities(cx.client.as_ref(), cx.has_elicitation());
        let modern = cx.is_modern();
        // The host asks for the client's roots itself when the plugin's directories are
        // narrowed to them; the plugin never sees that exchange.
        let wants_roots = plugin.grants().roots && client.roots;
        let (mut context, mut roots) = if modern {
            let mut context = input::retry_context(client, retry.0, retry.1, &self.shared.codec, bound_to)
                .map_err(Failure::Protocol)?;
            let roots = match roots::take_answer(&mut context.responses) {
                Some(answer) => roots::resolve(answer).await.unwrap_or_else(|reason| {
                    tracing::warn!("{reason}; no roots are visible");
                    ClientRoots::none()
                }),
                // A retry that leaves the roots unanswered (they were asked beside the
                // plugin's questions) gets none, as a legacy client that does not answer:
                // asking again would throw the answers it did give away.
                None if wants_roots && (retry.0.is_some() || retry.1.is_some()) => {
                    tracing::warn!("the client's retry does not answer the roots request; no roots are visible");
                    ClientRoots::none()
                }
                None if wants_roots => {
                    let ask = wit::InputRequired { requests: Vec::new(), state: context.state };
                    return input::input_required_result(&ask, true, &self.shared.codec, bound_to)
                        .map(Rounds::InputRequired)
                        .map_err(Failure::Protocol);
                }
                None => ClientRoots::NotOffered,
            };
            (context, roots)
        } else {
            // Cancelled while the client is asked: as in the rounds below.
            let roots = match wants_roots {
                true => tokio::select! {
                    roots = self.session.roots(&*cx.link) => roots,
                    () = cx.cancelled.cancelled() => return Err(Failure::Call(CallError::Cancelled)),
                },
                false => ClientRoots::NotOffered,
            };
            (wit::RequestContext::first(client), roots)
        };
        for round in 1..=input::MAX_ROUNDS {
            let ir = match self.run(cx, plugin, &op, &context, &roots).await.map_err(Failure::Call)? {
                Round::Done(done) => return Ok(Rounds::Done(done)),
                Round::Ask(ir) => ir,
            };
            if ir.requests.len() > input::MAX_REQUESTS {
                return Err(Failure::Call(CallError::Host(format!(
                    "the plugin asked for {} inputs in one round; at most {} are allowed",
                    ir.requests.len(),
                    input::MAX_REQUESTS
                ))));
            }
            // -32021 is 2026-07-28's; to older sessions it is a code of JSON-RPC's
            // implementation-defined range that means the same.
            if let Some(missing) = input::missing_capabilities(&ir.requests, &client) {
                return Err(Failure::Protocol(ErrorData::missing_required_client_capability(missing)));
            }
            if modern {
                return input::input_required_result(&ir, wants_roots, &self.shared.codec, bound_to)
                    .map(Rounds::InputRequired)
                    .map_err(Failure::Protocol);
            }
            let span = tracing::debug_span!(
                "input round",
                otel.name = "capsule.input.round",
                capsule.input.round = round,
                capsule.input.requests = ir.requests.len()
            );
            let asked = async {
                let responses = input::ask_legacy_client(&ir.requests, &*cx.link, cx.forms()).await?;
                if wants_roots {
                    roots = self.session.roots(&*cx.link).await;
                }
                Ok(responses)
            };
            // Cancelled while the client is asked: the asking stops (and cancels its request
            // with the client) rather than waiting on for an answer no one will use.
            let responses = tokio::select! {
                responses = asked.instrument(span) => responses.map_err(Failure::Protocol)?,
                () = cx.cancelled.cancelled() => return Err(Failure::Call(CallError::Cancelled)),
            };
            context = wit::RequestContext { client, responses, state: ir.state };
        }
        Err(Failure::Call(CallError::Host(format!(
            "the plugin kept asking for input after {} rounds",
            input::MAX_ROUNDS
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_keeps_short_text_and_cuts_long_text_at_a_character() {
        assert!(matches!(excerpt("add"), std::borrow::Cow::Borrowed("add")));
        let long = "é".repeat(5000);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with("é…"), "{cut}");
        assert_eq!(excerpt(&"x".repeat(EXCERPT_CHARS)).len(), EXCERPT_CHARS);
    }
}
