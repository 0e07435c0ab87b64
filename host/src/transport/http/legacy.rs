//! Sessions of 2024-11-05 … 2025-11-25 clients: `initialize` opens one (its id in
//! `Mcp-Session-Id`), later POSTs name it, a GET opens its stream, DELETE ends it. Batches
//! are for 2025-03-26 sessions only; their elements run concurrently.

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData;
use rmcp::model::{ErrorCode, ProtocolVersion, RequestId};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::super::jsonrpc::{self, Batch, Incoming, Message};
use super::checks;
use super::exchange::{self, Answer, OnDrop, json};
use super::refused;
use super::resume::PostStreams;
use super::session::{Session, SessionTable};
use super::sse;
use crate::auth::{Authenticator, Principal};
use crate::mcp::{Front, NO_ROOM, Origin, TraceContext};

/// The session a request names. A name that is not even text names no session there is
/// (404), rather than no session at all (400). Two names are refused (400): a proxy in front
/// may have judged the request by the other one.
fn session_id(headers: &HeaderMap) -> Result<Option<&str>, checks::Repeated> {
    let value = checks::at_most_once(headers, "mcp-session-id")?;
    Ok(value.map(|v| v.to_str().unwrap_or_default()))
}

/// The refusal of a request that names two sessions (see [`session_id`]).
const TWO_SESSIONS: &str = "Bad Request: more than one Mcp-Session-Id header";

/// The session a GET or DELETE must name; `Err` is the reason for its 400.
fn required_session_id(headers: &HeaderMap) -> Result<&str, &'static str> {
    match session_id(headers) {
        Ok(Some(id)) => Ok(id),
        Ok(None) => Err("Bad Request: Session ID is required"),
        Err(checks::Repeated) => Err(TWO_SESSIONS),
    }
}

/// Who sent a request, when the tenant authenticates its callers.
pub type Caller = Option<Arc<Principal>>;

/// The id a session is bound to.
fn caller_id(caller: &Caller) -> Option<&str> {
    caller.as_ref().map(|p| &*p.id)
}

/// A message's id, if it is a request.
fn request_id<'m>(message: &'m Message<'_>) -> Option<&'m RequestId> {
    match message {
        Message::Request { id, .. } => Some(id),
        _ => None,
    }
}

/// The answer to a request naming a session that is not live, with the request's id when
/// there is one.
fn no_session(id: Option<&RequestId>) -> Response {
    json(
        StatusCode::NOT_FOUND,
        jsonrpc::error(id, &ErrorData::new(ErrorCode(-32001), "no such session (it may have ended)", None)),
    )
}

/// A POST for a legacy session (or one opening a session); a batch holds at most `max_batch`
/// messages.
pub async fn post(
    table: &Arc<SessionTable>,
    headers: &HeaderMap,
    (client, caller, auth): (Option<IpAddr>, &Caller, Option<&Arc<Authenticator>>),
    body: &[u8],
    max_batch: usize,
) -> Response {
    let incoming = match jsonrpc::read(body) {
        Ok(incoming) => incoming,
        Err(refusal) => return json(StatusCode::BAD_REQUEST, refusal.to_bytes()),
    };
    let named = match session_id(headers) {
        Ok(named) => named,
        Err(checks::Repeated) => {
            let id = match &incoming {
                Incoming::Single(message) => request_id(message),
                Incoming::Batch(_) => None,
            };
            return json(StatusCode::BAD_REQUEST, jsonrpc::error(id, &ErrorData::invalid_request(TWO_SESSIONS, None)));
        }
    };
    let session = match named {
        Some(id) => match table.get(id, caller_id(caller)) {
            Some(session) => Some(session),
            None => {
                let id = match &incoming {
                    Incoming::Single(message) => request_id(message),
                    Incoming::Batch(_) => None,
                };
                return no_session(id);
            }
        },
        None => None,
    };
    let sender = Sender { caller, trace: TraceContext::from_headers(headers) };
    match (incoming, session) {
        (Incoming::Single(Message::Request { id, method, params }), None) if method == "initialize" => {
            initialize(table, (client, &sender), id, params).await
        }
        (Incoming::Single(message), Some(session)) => {
            let mut cap = session.max_in_flight;
            exchange_for(one(&session, message, &sender, &mut cap, None), auth, resumable(&session)).await
        }
        (Incoming::Batch(items), Some(session)) => batch(&session, items, &sender, max_batch).await,
        (Incoming::Batch(_), None) => {
            let error = ErrorData::invalid_request(
                format!(
                    "Invalid Request: a batch belongs to a session; send initialize (protocol revision {}) \
                     first and name its Mcp-Session-Id",
                    jsonrpc::BATCH_VERSION
                ),
                None,
            );
            json(StatusCode::BAD_REQUEST, jsonrpc::error(None, &error))
        }
        (Incoming::Single(message), None) => {
            // A self-describing request that forgot its header is told so; one naming a
            // revision that begins with `initialize` (or none served) is told which it can name.
            if let Message::Request { params, .. } | Message::Notification { params, .. } = &message
                && let Some(version) = declared_version(*params)
            {
                let described = crate::mcp::self_described();
                let error = if described.contains(&version) {
                    ErrorData::header_mismatch(
                        format!(
                            "the request's _meta names protocol version {version}: send it with \
                             MCP-Protocol-Version: {version} (an earlier revision needs a session: send initialize \
                             first)"
                        ),
                        None,
                    )
                } else if ProtocolVersion::KNOWN_VERSIONS.contains(&version) {
                    ErrorData::unsupported_protocol_version(version, &described)
                } else {
                    // One no revision served names is answered as everywhere: with all of them.
                    ErrorData::unsupported_protocol_version(version, ProtocolVersion::KNOWN_VERSIONS)
                };
                return json(StatusCode::BAD_REQUEST, jsonrpc::error(request_id(&message), &error));
            }
            let error = ErrorData::invalid_request("Bad Request: Session ID is required", None);
            json(StatusCode::BAD_REQUEST, jsonrpc::error(request_id(&message), &error))
        }
    }
}

/// The protocol version params name in `_meta`, if any. Only objects count: serde would read
/// an array into these structs by position.
fn declared_version(params: Option<&RawValue>) -> Option<ProtocolVersion> {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
        version: Option<ProtocolVersion>,
    }
    let object = |raw: &&RawValue| raw.get().starts_with('{');
    params
        .filter(object)
        .and_then(|p| serde_json::from_str::<Params>(p.get()).ok())
        .and_then(|p| p.meta)
        .filter(object)
        .and_then(|m| serde_json::from_str::<Meta>(m.get()).ok())
        .and_then(|m| m.version)
}

/// Who sent a POST, and the trace context of its headers: what the origin of each of its
/// messages carries.
struct Sender<'a> {
    caller: &'a Caller,
    trace: Option<Arc<TraceContext>>,
}

impl Sender<'_> {
    fn origin(&self, session: &Session) -> Origin {
        Origin::http(Some(session.id.clone()), self.caller.clone(), self.trace.clone())
    }
}

/// `initialize`: a new session, answered with its id.
async fn initialize(
    table: &Arc<SessionTable>,
    (client, sender): (Option<IpAddr>, &Sender<'_>),
    id: RequestId,
    params: Option<&RawValue>,
) -> Response {
    let session = match table.create(client, sender.caller.as_ref().map(|p| p.id.clone())) {
        Ok(session) => session,
        Err(full) => {
            let error = ErrorData::new(NO_ROOM, full.to_string(), None);
            return json(StatusCode::SERVICE_UNAVAILABLE, jsonrpc::error(Some(&id), &error));
        }
    };
    let (link, _notes) = exchange::link(None);
    let origin = sender.origin(&session);
    let front = Front {
        origin,
        id,
        link,
        cancelled: session.ended.child_token(),
        declared: None,
        mirrored: None,
        before_initialize: false,
    };
    let answer = session.server.request("initialize", params, &front).await;
    let mut response = match answer {
        Ok(result) => json(StatusCode::OK, jsonrpc::response(&front.id, &result)),
        Err(error) => {
            table.remove(&session.id, caller_id(sender.caller));
            return json(StatusCode::OK, jsonrpc::error(Some(&front.id), &error));
        }
    };
    if let Ok(value) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// The answer to one message of a session: `None` for notifications and the client's answers.
type Work = std::pin::Pin<Box<dyn Future<Output = Option<Written>> + Send>>;

/// An answer as written, with the scope it lacked if it was refused for want of one.
struct Written {
    message: Vec<u8>,
    needed_scope: Option<String>,
}

/// Restarts its session's idle time when a request's work ends, however it ends (answered,
/// or unwound by a panic): the session was not idle while it answered, however long that
/// took. A client that hangs up does not end the work early: it runs on a task of its own.
struct Answered(Arc<Session>);

impl Drop for Answered {
    fn drop(&mut self) {
        self.0.touch();
    }
}

/// Take one message: notifications and answers at once, a request as work to run unless
/// `cap` requests of the session are running already. A request admitted lifts `cap` for
/// the requests after it in the same message (a batch counts once), one refused drops it.
fn one(
    session: &Arc<Session>,
    message: Message<'_>,
    sender: &Sender<'_>,
    cap: &mut usize,
    batch: Option<&mpsc::Sender<Vec<u8>>>,
) -> OneOf {
    match message {
        Message::Request { id, method, params } => {
            // A batch element sends into the batch's one stream directly: through a task of
            // its own between, what it sent last could still be on its way when the batch's
            // answers went out, and was lost.
            let (link, notes) = match batch {
                Some(tx) => (exchange::link_into(tx.clone(), Some(session.pending.clone())), None),
                None => {
                    let (link, notes) = exchange::link(Some(session.pending.clone()));
                    (link, Some(notes))
                }
            };
            let request = |work: Work| match notes {
                Some(notes) => OneOf::Request(work, notes),
                None => OneOf::Done(work),
            };
            // Each running request holds its params, and a client that hangs up leaves it
            // running (the spec's rule): without a bound one client could stack them up.
            // Ending the session (DELETE) stops what it has running.
            let admitted = session.server.try_begin(&id, Some(&session.ended), *cap);
            *cap = if admitted.is_some() { usize::MAX } else { 0 };
            let Some(in_flight) = admitted else {
                let error = ErrorData::new(
                    NO_ROOM,
                    format!(
                        "this session has {} requests running, its limit (--max-in-flight); wait for one to end",
                        session.max_in_flight
                    ),
                    None,
                );
                let message = jsonrpc::error(Some(&id), &error);
                return request(Box::pin(std::future::ready(Some(Written { message, needed_scope: None }))));
            };
            let origin = sender.origin(session);
            let front = Front {
                origin,
                id,
                link,
                cancelled: in_flight.token().clone(),
                declared: None,
                mirrored: None,
                before_initialize: false,
            };
            let (session, method, params) = (session.clone(), method.into_owned(), params.map(|p| p.to_owned()));
            request(Box::pin(async move {
                // Touched before the request leaves the in-flight map, so that no expiry
                // sweep between sees it neither answering nor freshly seen.
                let marks = (Answered(session.clone()), in_flight);
                let answer = session.server.request(&method, params.as_deref(), &front).await;
                // A request the client cancelled is not answered (nor is one its session's
                // end stopped): the client has stopped waiting for it. One the server stopped
                // (shutting down) is answered with what stopping it made, as a 2026-07-28 one
                // is: its client is still waiting.
                if marks.1.token().is_cancelled() && !session.closed_by_server.is_cancelled() {
                    return None;
                }
                Some(match answer {
                    Ok(result) => Written { message: jsonrpc::response(&front.id, &result), needed_scope: None },
                    Err(error) => Written {
                        message: jsonrpc::error(Some(&front.id), &error),
                        needed_scope: exchange::needed_scope(&error),
                    },
                })
            }))
        }
        Message::Notification { method, params } => {
            let link = SessionTable::link(session);
            let (server, method, params) = (session.server.clone(), method.into_owned(), params.map(|p| p.to_owned()));
            OneOf::Done(Box::pin(async move {
                server.notification(&method, params.as_deref(), &link).await;
                None
            }))
        }
        Message::Response { id, outcome } => {
            session.pending.answer(&id, outcome);
            OneOf::Done(Box::pin(std::future::ready(None)))
        }
    }
}

enum OneOf {
    Request(Work, mpsc::Receiver<Vec<u8>>),
    Done(Work),
}

/// The session's POST streams, if its revision lets a client resume them (SEP-1699,
/// 2025-11-25 on).
fn resumable(session: &Session) -> Option<&PostStreams> {
    primes(session).then_some(&session.posts)
}

/// Whether the session's streams open with a priming event (SEP-1699, 2025-11-25 on).
fn primes(session: &Session) -> bool {
    session.server.negotiated().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2025_11_25.as_str())
}

/// Answer one message of a session. The work runs on its own task: a client that
/// disconnects does not cancel its request (it cancels with `notifications/cancelled`),
/// and on a `resumable` session it can take up the answer's stream again with a GET.
async fn exchange_for(work: OneOf, auth: Option<&Arc<Authenticator>>, resumable: Option<&PostStreams>) -> Response {
    match work {
        OneOf::Done(work) => {
            work.await;
            StatusCode::ACCEPTED.into_response()
        }
        OneOf::Request(work, notes) => {
            let auth = auth.cloned();
            let work = async move {
                let Some(written) = work.await else { return Answer::unanswered() };
                let answer = Answer::one(StatusCode::OK, written.message);
                exchange::refused_for_scope(answer, written.needed_scope, auth.as_deref())
            };
            exchange::respond(work, notes, OnDrop::Detach, resumable).await
        }
    }
}

/// A batch (2025-03-26 sessions only): its requests run concurrently (8 at a time) and their answers come
/// back together, with anything they send the client on the same stream.
async fn batch(session: &Arc<Session>, items: Batch<'_>, sender: &Sender<'_>, max_batch: usize) -> Response {
    let size = (items.size(), max_batch);
    if let Err(refused) = jsonrpc::batch_allowed(session.server.negotiated().as_ref(), "session", size) {
        return json(StatusCode::BAD_REQUEST, jsonrpc::error(None, &refused));
    }
    let (tx, notes) = mpsc::channel(64);
    let mut works: Vec<Work> = Vec::new();
    // A batch counts once against `--max-in-flight`: its first request is admitted or not,
    // and the others follow it (they run a few at a time, and one refused for the others
    // queued beside it could not be sent on its own).
    let mut cap = session.max_in_flight;
    for item in items.messages() {
        match jsonrpc::batch_element(item) {
            Err(message) => works.push(Box::pin(std::future::ready(Some(Written { message, needed_scope: None })))),
            // Each element's messages join the batch's one stream.
            Ok(message) => match one(session, message, sender, &mut cap, Some(&tx)) {
                OneOf::Done(work) | OneOf::Request(work, _) => works.push(work),
            },
        }
    }
    drop(tx);
    let work = async move {
        let messages = jsonrpc::run_batch(works).await.into_iter().flatten().map(|w| w.message).collect();
        Answer { status: StatusCode::OK, challenge: None, messages, batch: true }
    };
    // Batches belong to 2025-03-26, before streams could be resumed.
    exchange::respond(work, notes, OnDrop::Detach, None).await
}

/// The refusal of a `Last-Event-ID` that names no event this session issued.
const NOT_ISSUED: &str = "Bad Request: Last-Event-ID is not an event id of this session";

/// GET: the session's stream of what belongs to no request.
pub fn get(table: &Arc<SessionTable>, headers: &HeaderMap, caller: &Caller) -> Response {
    let id = match required_session_id(headers) {
        Ok(id) => id,
        Err(reason) => return refused(headers, 400, reason),
    };
    let Some(session) = table.get(id, caller_id(caller)) else { return no_session(None) };
    // An empty id is no id (an EventSource that saw none sends none); one that is not text
    // is no id this session issued.
    let Ok(resume) = checks::at_most_once(headers, "last-event-id") else {
        return refused(headers, 400, "Bad Request: more than one Last-Event-ID header");
    };
    let resume = match resume.map(|v| v.to_str().map(str::trim)) {
        None => None,
        Some(Ok(id)) => Some(id).filter(|id| !id.is_empty()),
        Some(Err(_)) => return refused(headers, 400, NOT_ISSUED),
    };
    // A POST stream's id resumes that stream, through its answer; the session's own GET
    // stream is left as it is.
    match resume.map(|id| session.posts.find(id)) {
        Some(Ok(Some(events))) => return sse::response(events),
        Some(Err(())) => {
            return refused(headers, 400, "Bad Request: Last-Event-ID names a stream this session no longer keeps");
        }
        _ => {}
    }
    // An id this session never issued would silence the stream (nothing comes after it).
    let after = match resume.map(|id| session.resume_point(id)) {
        None => None,
        Some(Some(after)) => Some(after),
        Some(None) => return refused(headers, 400, NOT_ISSUED),
    };
    // SEP-1699 (2025-11-25): a priming event gives the client an id to resume from.
    let start = after.unwrap_or_else(|| session.delivered());
    sse::response(session.attach(start, primes(&session) && after.is_none()))
}

/// DELETE: end the session.
pub fn delete(table: &SessionTable, headers: &HeaderMap, caller: &Caller) -> Response {
    let id = match required_session_id(headers) {
        Ok(id) => id,
        Err(reason) => return refused(headers, 400, reason),
    };
    if table.remove(id, caller_id(caller)) { StatusCode::NO_CONTENT.into_response() } else { no_session(None) }
}
