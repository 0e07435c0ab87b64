//! Capsule's own dispatcher: a request's `params` are parsed once, straight into the type its
//! method takes, and the request goes to a plain function. The revision rules live here, in
//! one place for every transport: which era a request belongs to (a session's `initialize`,
//! or a 2026-07-28 request's own `_meta`), which methods each era has, and how results and
//! errors are shaped for it.

#![allow(deprecated)] // Logging levels are deprecated by SEP-2577 but served to legacy clients.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;

use rmcp::ErrorData;
use rmcp::model::{
    CancelledNotificationParam, ErrorCode, GetMeta, GetPromptRequestParams, InitializeRequestParams, NumberOrString,
    PaginatedRequestParams, ProgressToken, ProtocolVersion, ReadResourceRequestParams, RequestMetaObject,
    ServerNotification, ServerResult, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
    SubscriptionsAcknowledgedNotification, SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams, SubscriptionsListenResult, UnsubscribeRequestParams,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::Instrument;

use crate::catalog::ToolEntry;
use crate::telemetry::Operation;

use super::CapsuleServer;
use super::calls::CallParams;
use super::lists::{self, VERSIONS, self_described};
use super::meta::{Meta, MetaView};
use super::mirror;
use super::reply::Reply;
use super::request::{ClientLink, Front, Note, RequestCx};
use super::session::{List, Peer};

/// The largest `subscriptions/listen` params taken: they live as long as the stream. Far
/// more than the 256 KiB of resource URIs a stream may follow.
const MAX_LISTEN_PARAMS_BYTES: usize = 1 << 20;

/// Which era may call a method.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Era {
    Any,
    /// Sessions that began with `initialize` (2024-11-05 .. 2025-11-25).
    Legacy,
    /// Self-describing 2026-07-28 requests.
    Modern,
}

/// The params of methods that take nothing but `_meta`.
#[derive(Deserialize, Default)]
struct MetaOnly {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
}

/// JSON-RPC lets params go by position, but every MCP method's params are an object: an array
/// is refused, as serde would read one into a struct field by field. It holds no `_meta`, so a
/// 2026-07-28 request lacks its required fields, which its transport answers with 400.
fn by_position(modern: bool) -> ErrorData {
    let missing = modern.then(|| serde_json::json!({ "missingMetadata": RequestMetaObject::DRAFT_REQUIRED_KEYS }));
    ErrorData::invalid_params("Invalid params: MCP params are an object, not an array", missing)
}

/// Whether params came by position.
fn is_array(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|raw| raw.get().starts_with('['))
}

/// Whether a list request's params name a cursor (a later page).
fn has_cursor(raw: Option<&RawValue>) -> bool {
    #[derive(Deserialize)]
    struct Paged<'a> {
        #[serde(borrow)]
        cursor: Option<&'a RawValue>,
    }
    raw.and_then(|raw| serde_json::from_str::<Paged<'_>>(raw.get()).ok())
        .is_some_and(|p| p.cursor.is_some_and(|c| c.get() != "null"))
}

/// Parse a request's params into the type its method takes (absent params read as `{}`).
/// A `_meta` that is not an object is named as such: a 2026-07-28 request then lacks its
/// required fields, which its transport answers with 400.
fn params<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Result<T, ErrorData> {
    if is_array(raw) {
        return Err(by_position(false));
    }
    let text = raw.map_or("{}", RawValue::get);
    serde_json::from_str(text).map_err(|e| {
        /// Only the params' `_meta`, as it was sent.
        #[derive(Deserialize)]
        struct MetaOf<'a> {
            #[serde(rename = "_meta", borrow, default)]
            meta: Option<&'a RawValue>,
        }
        let meta = raw.and_then(|raw| serde_json::from_str::<MetaOf>(raw.get()).ok()).and_then(|m| m.meta);
        match meta.map(RawValue::get) {
            Some(meta) if !meta.starts_with('{') && meta != "null" => ErrorData::invalid_params(
                "request _meta must be an object",
                Some(serde_json::json!({ "missingMetadata": RequestMetaObject::DRAFT_REQUIRED_KEYS })),
            ),
            _ => ErrorData::invalid_params(format!("Invalid params: {e}"), None),
        }
    })
}

/// Parse optional params (a paginated list's).
fn optional<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Result<Option<T>, ErrorData> {
    raw.map(|raw| params(Some(raw))).transpose()
}

/// Whether the transport declared the request 2026-07-28 or later.
fn declares_modern(front: &Front) -> bool {
    front.declared.as_deref().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28.as_str())
}

/// A params type's `_meta`, as the dispatcher reads it.
fn view<M: MetaView>(meta: &Option<M>) -> Option<&dyn MetaView> {
    meta.as_ref().map(|m| m as &dyn MetaView)
}

fn method_not_found(method: &str) -> ErrorData {
    ErrorData::new(ErrorCode::METHOD_NOT_FOUND, format!("Method not found: {}", super::excerpt(method)), None)
}

/// Shape a result or error for the request's revision.
fn finish(cx: &RequestCx, result: Result<impl Into<Reply>, ErrorData>) -> Result<Reply, ErrorData> {
    let modern = cx.is_modern();
    match result.map(Into::into) {
        Ok(Reply::Model(mut result)) => {
            if modern {
                result.fill_missing_cache_hints();
                lists::sign(&mut result);
            } else if matches!(result, ServerResult::InputRequiredResult(_)) {
                return Err(ErrorData::internal_error("input_required results exist only in 2026-07-28", None));
            } else {
                result.strip_result_type_for_legacy_peer();
            }
            Ok(Reply::Model(result))
        }
        Ok(Reply::Tool(mut tool)) => {
            tool.typed = modern;
            Ok(Reply::Tool(tool))
        }
        // 2026-07-28 answers an unknown resource with -32602 (SEP-2164).
        Err(mut error) if modern && error.code == ErrorCode::RESOURCE_NOT_FOUND => {
            error.code = ErrorCode::INVALID_PARAMS;
            Err(error)
        }
        Err(error) => Err(error),
    }
}

/// What the request span needs of the params before the request is read: the tool's or
/// prompt's name and the client's W3C trace context, which the MCP conventions carry in
/// `_meta` (read as a call's `_meta` is: a trace field that is not text is ignored, the rest
/// kept).
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<Meta<'a>>,
}

impl<'a> Peek<'a> {
    /// What a tool call's span needs, from its params read already.
    fn of(call: &'a CallParams<'a>) -> Peek<'a> {
        Peek { name: Some(Cow::Borrowed(&call.name)), meta: call.meta.clone() }
    }
}

/// A resource request's URI, for its exported span.
#[derive(Deserialize)]
struct UriPeek<'a> {
    #[serde(borrow)]
    uri: Cow<'a, str>,
}

/// Whether answering `method` depends on which plugins are loaded.
fn serves_plugins(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "tools/call"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "resources/subscribe"
            | "prompts/list"
            | "prompts/get"
            | "completion/complete"
    )
}

impl CapsuleServer {
    /// Answer one request.
    pub async fn request(&self, method: &str, raw: Option<&RawValue>, front: &Front) -> Result<Reply, ErrorData> {
        let origin = &front.origin;
        // Named and described as the OpenTelemetry MCP conventions say (`otel.*` fields set
        // the exported span's name and kind), and continuing the client's trace. Its name and
        // parent are fixed when it starts, so what they need is read first, only when the span
        // is wanted. It is at error level so that it is wanted under any log filter that lets a
        // record through: every record the request writes carries its trace id. What is known
        // only at its end (`mcp.protocol.version`, `error.type`) goes to the exporter alone.
        // By the level alone: `enabled!` asks the subscriber, and under a log filter with span
        // directives (`tracing-subscriber`'s registry with per-layer filters) an answer not
        // followed by that very callsite's span is left in the filters' per-thread state and
        // disabled the span after it, so nothing was exported (tokio-rs/tracing#2519).
        let traced = tracing::level_enabled!(tracing::Level::ERROR);
        // A tool call's params are read once, here: the span takes what it needs of them,
        // and the call the rest. Other requests' are peeked at only when the span is wanted.
        let call = (method == "tools/call").then(|| params::<CallParams>(raw));
        let peek = match &call {
            Some(Ok(call)) if traced => Some(Peek::of(call)),
            _ if traced => raw.and_then(|raw| serde_json::from_str::<Peek>(raw.get()).ok()),
            _ => None,
        };
        // A call or prompt request that comes while the plugins first load waits for them here
        // (as it would in dispatch), so that its span is named after what the catalog holds.
        if traced && matches!(method, "tools/call" | "prompts/get") && !self.shared.published.is_loaded() {
            self.plugins_loaded().await;
        }
        let named = peek.as_ref().and_then(|p| p.name.as_deref());
        let tool = named
            .filter(|name| method == "tools/call" && self.shared.with_catalog(|catalog| catalog.tool(name).is_some()));
        let prompt = named.filter(|name| {
            method == "prompts/get" && self.shared.with_catalog(|catalog| catalog.prompt(name).is_some())
        });
        let meta = peek.as_ref().and_then(|p| p.meta.as_ref());
        let (traceparent, tracestate) = meta.map_or((None, None), |m| (m.traceparent(), m.tracestate()));
        let parent = match (traceparent.as_deref(), origin.trace.as_deref()) {
            (Some(parent), _) => Some((parent, tracestate.as_deref())),
            (None, Some(headers)) => Some((&*headers.traceparent, headers.tracestate.as_deref())),
            (None, None) => None,
        };
        // Each request is the root of its own trace here, continuing the client's.
        let trace = traced.then(|| crate::telemetry::TraceContext::new(parent));
        let span = trace.map_or_else(tracing::Span::none, |trace| {
            // Named only from fixed sets and the catalog: a client's method name may be
            // anything, of any length.
            let method = crate::telemetry::method_name(method);
            let name = match tool.or(prompt) {
                Some(target) => format!("{method} {target}"),
                None => method.to_owned(),
            };
            trace.root(|trace_id| {
                tracing::error_span!(
                    parent: None,
                    "request",
                    otel.name = name,
                    otel.kind = "server",
                    mcp.method.name = method,
                    mcp.session.id = origin.session.as_deref(),
                    network.transport = origin.transport.network(),
                    gen_ai.tool.name = tool,
                    gen_ai.prompt.name = prompt,
                    trace_id = trace_id,
                )
            })
        });
        let started = Instant::now();
        let note = Arc::<Note>::default();
        // Boxed, so that instrumenting it moves a pointer rather than the whole future.
        let dispatched = Box::pin(self.dispatch(method, raw, call, front, &note));
        let reply = answered(dispatched).instrument(span.clone()).await;
        let error = match &reply {
            Ok(Reply::Tool(tool)) if tool.is_error() => Some(Cow::Borrowed("tool_error")),
            Ok(_) => None,
            Err(error) => Some(Cow::Owned(error.code.0.to_string())),
        };
        let op = Operation {
            method,
            transport: origin.transport.network(),
            version: note.version.get().map(|v| v.as_str()),
            tool: note.tool.get().cloned(),
            error,
        };
        self.shared.metrics.operation(&op, started.elapsed());
        // Only the exporter can still see these: the request wrote its log records already.
        crate::telemetry::export_attributes(&span, |set| {
            if let Some(version) = op.version {
                set("mcp.protocol.version", crate::telemetry::version_name(version));
            }
            if let Some(error) = &op.error {
                set("error.type", error);
            }
            set("jsonrpc.request.id", &front.id.to_string());
            if method == "tools/call" {
                set("gen_ai.operation.name", "execute_tool");
            }
            let uri = raw.filter(|_| method.starts_with("resources/"));
            if let Some(uri) = uri.and_then(|raw| serde_json::from_str::<UriPeek>(raw.get()).ok()) {
                set("mcp.resource.uri", &uri.uri);
            }
            if let Err(error) = &reply {
                set("rpc.response.status_code", &error.code.0.to_string());
                // The span's status describes the error as the client was told it.
                set("otel.status_message", &error.message);
            }
        });
        reply
    }

    /// Answer one request; a tool call's params come read already (`call`).
    async fn dispatch(
        &self,
        method: &str,
        raw: Option<&RawValue>,
        call: Option<Result<CallParams<'_>, ErrorData>>,
        front: &Front,
        note: &Arc<Note>,
    ) -> Result<Reply, ErrorData> {
        // A transport that declares 2026-07-28 rules out the legacy methods before their
        // params are looked at.
        let legacy_only = matches!(
            method,
            "initialize" | "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe"
        );
        if legacy_only && declares_modern(front) {
            return Err(method_not_found(method));
        }
        if is_array(raw) {
            return Err(by_position(declares_modern(front)));
        }
        if serves_plugins(method) {
            // Only a first page is answered from the loaded catalog as a whole: a later one
            // continues a list the session holds, which the load's end must still announce.
            if let Some(list) = List::of(method)
                && !self.shared.published.is_loaded()
                && !has_cursor(raw)
            {
                self.session.awaiting_first_load(list);
            }
            self.plugins_loaded().await;
        }
        match method {
            "initialize" => self.initialize(params(raw)?, note).map(Reply::from),
            "ping" => {
                let p: MetaOnly = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Legacy, front)?;
                finish(&cx, Ok(ServerResult::empty(())))
            }
            "server/discover" => {
                let p: MetaOnly = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Modern, front)?;
                finish(&cx, Ok(ServerResult::DiscoverResult(lists::discover_result())))
            }
            "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
                let p: Option<PaginatedRequestParams> = optional(raw)?;
                let cx = self.enter(note, p.as_ref().and_then(|p| view(&p.meta)), method, Era::Any, front)?;
                let result = match method {
                    "tools/list" => self.list_tools(&p, &cx).map(ServerResult::ListToolsResult),
                    "resources/list" => self.list_resources(&p, &cx).map(ServerResult::ListResourcesResult),
                    "resources/templates/list" => {
                        self.list_resource_templates(&p, &cx).map(ServerResult::ListResourceTemplatesResult)
                    }
                    _ => self.list_prompts(&p, &cx).map(ServerResult::ListPromptsResult),
                };
                finish(&cx, result)
            }
            "tools/call" => {
                let call = call.unwrap_or_else(|| params(raw));
                let (p, entry) = self.mirrored_call(call, raw, front)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Any, front)?;
                finish(&cx, self.tools_call(p, entry, &cx).await)
            }
            "resources/read" => {
                let p: ReadResourceRequestParams = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Any, front)?;
                finish(&cx, self.resources_read(p, &cx).await.map(ServerResult::from))
            }
            "prompts/get" => {
                let p: GetPromptRequestParams = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Any, front)?;
                finish(&cx, self.prompts_get(p, &cx).await.map(ServerResult::from))
            }
            "completion/complete" => {
                let p: rmcp::model::CompleteRequestParams = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Any, front)?;
                finish(&cx, self.completion_complete(p, &cx).await.map(ServerResult::CompleteResult))
            }
            "resources/subscribe" => {
                let p: SubscribeRequestParams = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Legacy, front)?;
                finish(&cx, self.subscribe(p.uri, &cx).map(ServerResult::empty))
            }
            "resources/unsubscribe" => {
                let p: UnsubscribeRequestParams = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Legacy, front)?;
                finish(&cx, self.unsubscribe(&p.uri).map(ServerResult::empty))
            }
            "logging/setLevel" => {
                let p: SetLevelRequestParams = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Legacy, front)?;
                *self.session.log_level.lock().unwrap_or_else(|e| e.into_inner()) = Some(p.level);
                finish(&cx, Ok(ServerResult::empty(())))
            }
            "subscriptions/listen" => {
                // Its params are held as long as its stream stays open, which may be days.
                if let Some(raw) = raw.filter(|raw| raw.get().len() > MAX_LISTEN_PARAMS_BYTES) {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "subscriptions/listen params are {} bytes; at most {MAX_LISTEN_PARAMS_BYTES} are held for a stream",
                            raw.get().len()
                        ),
                        None,
                    ));
                }
                let p: SubscriptionsListenRequestParams = params(raw)?;
                let cx = self.enter(note, view(&p.meta), method, Era::Modern, front)?;
                // The stream may stay open for days: only what is honoured is kept.
                let accepted = self.accepted_filter(&p.notifications, &cx);
                drop(p);
                let result = self.listen(accepted, &cx, front).await;
                finish(&cx, result)
            }
            _ => Err(method_not_found(method)),
        }
    }

    /// Take one notification. Cancellation is the transport's to apply (it knows what is
    /// running); progress and unknown notifications need nothing.
    pub async fn notification(&self, method: &str, raw: Option<&RawValue>, link: &Arc<dyn ClientLink>) {
        match method {
            "notifications/initialized" if self.session.peer.get().is_some() => {
                self.shared.sessions.register(link.clone(), self.session.clone(), &self.shared.catalog());
            }
            // Noted before the transport takes the client's next message.
            "notifications/roots/list_changed" => self.session.roots_changed(),
            "notifications/cancelled" => {
                if let Ok(CancelledNotificationParam { request_id: Some(id), .. }) = params(raw) {
                    self.session.cancel(&id);
                }
            }
            _ => {}
        }
    }

    fn initialize(&self, params: InitializeRequestParams, note: &Note) -> Result<ServerResult, ErrorData> {
        let result = lists::initialize_result(&params);
        // The revision agreed is the one its metrics and span go by.
        let _ = note.version.set(result.protocol_version.clone());
        let peer = Peer { version: result.protocol_version.clone(), capabilities: params.capabilities };
        if self.session.peer.set(peer).is_err() {
            return Err(ErrorData::invalid_request("this session is already initialized", None));
        }
        Ok(ServerResult::InitializeResult(result))
    }

    /// A tool call's params and its tool, once the headers its client mirrored them into (if
    /// any) agree with them: a mismatch is answered before anything else the call gets wrong,
    /// even params that are not a tool call's, as far as they can be read.
    fn mirrored_call<'a>(
        &self,
        call: Result<CallParams<'a>, ErrorData>,
        raw: Option<&'a RawValue>,
        front: &Front,
    ) -> Result<(CallParams<'a>, Option<Arc<ToolEntry>>), ErrorData> {
        let tool = |name: &str| self.shared.with_catalog(|catalog| catalog.tool(name).cloned());
        let check = |name: &str, arguments, entry: Option<&ToolEntry>| match &front.mirrored {
            Some(headers) => mirror::check_call(headers, name, arguments, entry.map_or(&[], |e| &e.mirrored))
                .map_err(|reason| ErrorData::header_mismatch(reason, None)),
            None => Ok(()),
        };
        match call {
            Ok(call) => {
                let entry = tool(&call.name);
                check(&call.name, call.arguments, entry.as_deref())?;
                Ok((call, entry))
            }
            Err(error) => {
                if front.mirrored.is_some()
                    && let Some(Ok(mirror::Named { name: Some(name), arguments, .. })) =
                        raw.map(|raw| serde_json::from_str::<mirror::Named>(raw.get()))
                {
                    check(&name, arguments, tool(&name).as_deref())?;
                }
                Err(error)
            }
        }
    }

    /// The context of a request, after the checks of its revision: a 2026-07-28 request
    /// describes itself in `_meta`; any other needs a session that began with `initialize`.
    fn enter(
        &self,
        note: &Arc<Note>,
        meta: Option<&dyn MetaView>,
        method: &str,
        era: Era,
        front: &Front,
    ) -> Result<RequestCx, ErrorData> {
        let empty = Meta::default();
        let meta = meta.unwrap_or(&empty);
        let requested = meta.protocol_version();
        if let (Some(declared), Some(requested)) = (front.declared.as_deref(), &requested)
            && declared != requested.as_str()
        {
            return Err(ErrorData::header_mismatch(
                format!(
                    "MCP-Protocol-Version header ({declared}) does not match request _meta protocolVersion ({requested})"
                ),
                None,
            ));
        }
        if let Some(version) = &requested
            && !VERSIONS.contains(version)
        {
            return Err(ErrorData::unsupported_protocol_version(version.clone(), VERSIONS));
        }
        let modern = method == "server/discover"
            || declares_modern(front)
            || requested.as_ref().is_some_and(|v| !v.has_initialize());
        // A request that describes itself (or comes before any `initialize`) cannot name a
        // revision that begins with `initialize` (the spec leaves it open): the revisions it
        // can name are listed, so that the client sends one of them, or `initialize`, rather
        // than retrying as it was.
        if (modern || (self.session.peer.get().is_none() && method != "ping"))
            && let Some(version) = requested.as_ref().filter(|v| v.has_initialize())
        {
            return Err(ErrorData::unsupported_protocol_version(version.clone(), &self_described()));
        }
        // A self-describing 2026-07-28 request belongs to no session: inside an HTTP session
        // it would escape the header rules its own revision holds it to (`Mcp-Method`,
        // `Mcp-Name`, `Mcp-Param-*`), which only a sessionless request is checked against.
        if modern && requested.is_some() && front.origin.session.is_some() {
            return Err(ErrorData::header_mismatch(
                "a 2026-07-28 request belongs to no session: send it without Mcp-Session-Id, with \
                 MCP-Protocol-Version: 2026-07-28",
                None,
            ));
        }
        let peer = self.session.peer.get();
        // Decoded once: the capabilities are the largest part of `_meta`.
        let capabilities = meta.client_capabilities();
        if modern {
            let [version_key, capabilities_key] = RequestMetaObject::DRAFT_REQUIRED_KEYS;
            let mut missing = Vec::new();
            if requested.is_none() {
                missing.push(version_key);
            }
            if capabilities.is_none() {
                missing.push(capabilities_key);
            }
            if !missing.is_empty() {
                return Err(ErrorData::invalid_params(
                    format!("request _meta is missing or has malformed required fields: {}", missing.join(", ")),
                    Some(serde_json::json!({ "missingMetadata": missing })),
                ));
            }
            if meta.log_level_is_malformed() {
                return Err(ErrorData::invalid_params(
                    "io.modelcontextprotocol/logLevel must be one of debug, info, notice, warning, error, \
                     critical, alert, emergency",
                    None,
                ));
            }
        } else if (peer.is_none() || front.before_initialize) && method != "ping" {
            return Err(ErrorData::invalid_params(
                "send initialize first, or describe the request in _meta as 2026-07-28 does \
                 (io.modelcontextprotocol/protocolVersion, io.modelcontextprotocol/clientCapabilities)",
                None,
            ));
        }
        if (era == Era::Legacy && modern) || (era == Era::Modern && !modern) {
            return Err(method_not_found(method));
        }
        let (version, client) = if modern {
            (requested, capabilities)
        } else {
            // A session uses what it negotiated: a request's `_meta` claiming more (sampling,
            // say) does not make the server ask for it.
            (peer.map(|p| p.version.clone()).or(requested), peer.map(|p| p.capabilities.clone()).or(capabilities))
        };
        if let Some(version) = &version {
            let _ = note.version.set(version.clone());
        }
        let progress_token = meta.progress_token();
        if let Some(ProgressToken(NumberOrString::String(token))) = &progress_token
            && token.len() > super::MAX_ID_BYTES
        {
            return Err(ErrorData::invalid_params(
                format!("progressToken is {} bytes long; the limit is {} bytes", token.len(), super::MAX_ID_BYTES),
                None,
            ));
        }
        Ok(RequestCx {
            version,
            client,
            progress_token,
            log_level: meta.log_level(),
            cancelled: front.cancelled.clone(),
            link: front.link.clone(),
            principal: front.origin.principal.clone(),
            note: note.clone(),
        })
    }

    /// `subscriptions/listen`: acknowledge what is honoured, then pass changes on, each
    /// tagged with the subscription (the request's id), until the client cancels or goes.
    async fn listen(
        &self,
        accepted: SubscriptionFilter,
        cx: &RequestCx,
        front: &Front,
    ) -> Result<ServerResult, ErrorData> {
        // The stream lasts until the client cancels it or goes: it waits on the client, and
        // a transport that reads the client's input only while requests have room (stdio)
        // must not count it as running, or enough of them would stop the reading for good.
        cx.link.wait_on_client().map_err(|e| ErrorData::new(super::NO_ROOM, e.to_string(), None))?;
        let tag = |mut notification: ServerNotification| {
            notification.get_meta_mut().set_subscription_id(front.id.clone());
            notification
        };
        let ack = SubscriptionsAcknowledgedNotification::new(SubscriptionsAcknowledgedNotificationParams::new(
            accepted.clone(),
        ));
        cx.link
            .notify(tag(ack.into()))
            .await
            .map_err(|e| ErrorData::internal_error(format!("failed to acknowledge the subscription: {e}"), None))?;
        let send = |notification| {
            let link = cx.link.clone();
            let notification = tag(notification);
            async move {
                let _ = link.notify(notification).await;
            }
        };
        tokio::select! {
            () = self.forward_changes(&accepted, &cx.cancelled, send) => {}
            () = cx.link.closed() => {}
        }
        let mut result = SubscriptionsListenResult::complete(front.id.clone());
        result.meta.set_server_info(lists::server_config().server_info);
        Ok(ServerResult::SubscriptionsListenResult(result))
    }
}

/// `work`'s result, or -32603 if it panics: a defect fails its own request with an answer,
/// on every transport, rather than leave it unanswered or take its connection down.
async fn answered<T>(work: impl Future<Output = Result<T, ErrorData>>) -> Result<T, ErrorData> {
    AssertUnwindSafe(work).catch_unwind().await.unwrap_or_else(|_| {
        tracing::error!("a request failed on a defect in the server (a panic); it was answered -32603");
        Err(ErrorData::internal_error("the server failed on this request; it goes on serving others", None))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_fails_its_request_with_an_answer() {
        assert_eq!(answered(async { Ok::<_, ErrorData>(7) }).await, Ok(7));
        let failed = answered(async {
            if std::hint::black_box(true) {
                panic!("a defect");
            }
            Ok::<u8, ErrorData>(0)
        })
        .await
        .unwrap_err();
        assert_eq!(failed.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
    }
}
