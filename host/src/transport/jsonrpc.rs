//! JSON-RPC 2.0 framing shared by the transports. A body or line is read once into a
//! borrowed envelope: `params`, `result` and `error` stay raw text for whoever handles the
//! message, so nothing is built twice. Replies are written straight to bytes.

use std::borrow::Cow;

use rmcp::ErrorData;
use rmcp::model::{ErrorCode, ProtocolVersion, RequestId};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::mcp::MAX_ID_BYTES;

/// The only revision whose clients may send JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";

/// How many elements of one batch run at once: enough for a batch's calls to overlap, few
/// enough that one client's batch cannot take a plugin's whole concurrency and answer its own
/// elements "busy".
pub const BATCH_PARALLEL: usize = 8;

/// The most messages one batch may hold unless the operator says otherwise (`--max-batch`).
/// A batch is served whole (its answers collected, every element's work prepared), so its
/// length, not its bytes, is what multiplies a body into memory: 60,000 `ping`s in a 3 MB
/// body held ~170 MB until they were answered.
pub const MAX_BATCH: usize = 256;

/// Whether a client that negotiated `negotiated` may send a batch of `len` messages: only
/// 2025-03-26 clients may, and at most `max` at once. `holder` names what negotiated it in
/// the refusal ("session", "connection").
pub fn batch_allowed(
    negotiated: Option<&ProtocolVersion>,
    holder: &str,
    (len, max): (usize, usize),
) -> Result<(), ErrorData> {
    if negotiated != Some(&ProtocolVersion::V_2025_03_26) {
        return Err(batch_refused(negotiated, holder));
    }
    if len > max {
        let message = format!("Invalid Request: a batch may hold at most {max} messages; this one holds {len}");
        return Err(ErrorData::invalid_request(message, None));
    }
    Ok(())
}

/// The refusal of a batch from a client of another revision (none: one that negotiated nothing).
pub fn batch_refused(negotiated: Option<&ProtocolVersion>, holder: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "Invalid Request: JSON-RPC batches are only part of protocol revision {BATCH_VERSION}{}",
            negotiated.map(|v| format!(" (this {holder} uses {v})")).unwrap_or_default()
        ),
        None,
    )
}

/// One element of an allowed batch: the message to take, or the answer it gets at once (it
/// was not a message, or it was an `initialize`, which never belongs to a batch).
pub fn batch_element<'a>(item: Result<Message<'a>, Refusal>) -> Result<Message<'a>, Vec<u8>> {
    match item {
        Err(refusal) => Err(refusal.to_bytes()),
        Ok(Message::Request { id, method, .. }) if method == "initialize" => {
            let refused = ErrorData::invalid_request("initialize must not be part of a batch", None);
            Err(error(Some(&id), &refused))
        }
        Ok(message) => Ok(message),
    }
}

/// Run a batch's elements, at most [`BATCH_PARALLEL`] at a time; the answers keep their order.
pub async fn run_batch<F>(works: Vec<F>) -> Vec<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    use futures::StreamExt;
    // Each on a task of its own: a long plugin call blocks the task it runs in (see
    // `runtime::offload`), and must not hold up the batch's other requests.
    let spawned = futures::stream::iter(works).map(tokio::spawn).buffered(BATCH_PARALLEL);
    spawned.filter_map(|joined| std::future::ready(joined.ok())).collect().await
}

/// The fields of a message, borrowed from the text it was read from.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    /// Present even when `null` (which MCP forbids as an id), so that case can be refused.
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    /// Present even when `null`: a result may be `null`, and an answer that names the
    /// request it answers must reach it, however wrong its content.
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// Only a message's id, for answering one whose other fields are malformed.
#[derive(Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<RequestId>,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// One message from the client.
#[derive(Debug)]
pub enum Message<'a> {
    /// A request: it gets exactly one response.
    Request { id: RequestId, method: Cow<'a, str>, params: Option<&'a RawValue> },
    /// A notification: it gets none.
    Notification { method: Cow<'a, str>, params: Option<&'a RawValue> },
    /// The client's answer to a request the server sent: its result, or its error.
    Response { id: RequestId, outcome: Result<&'a RawValue, &'a RawValue> },
}

/// A message that could not be accepted, and the error to answer it with.
#[derive(Debug)]
pub struct Refusal {
    /// The id to echo, when one could be read.
    pub id: Option<RequestId>,
    pub error: ErrorData,
}

impl Refusal {
    fn invalid(id: Option<RequestId>, message: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal { id, error: ErrorData::invalid_request(message, None) }
    }

    /// The error as a JSON-RPC message.
    pub fn to_bytes(&self) -> Vec<u8> {
        error(self.id.as_ref(), &self.error)
    }
}

/// A body or line: one message, or a batch of them (each element accepted or refused on
/// its own).
pub enum Incoming<'a> {
    Single(Message<'a>),
    Batch(Batch<'a>),
}

/// The most elements of a batch kept for reading: `--max-batch`'s ceiling. A longer batch is
/// refused whole, so its elements past this are only counted.
pub const BATCH_CEILING: usize = 10_000;

/// A batch whose elements are read as messages only once its length is allowed: two million
/// `0`s in a 4 MiB body would otherwise each become a refusal (hundreds of MB) before the
/// batch was refused for its length.
pub struct Batch<'a> {
    items: Vec<&'a RawValue>,
    len: usize,
}

impl<'a> Batch<'a> {
    /// How many elements the batch holds.
    pub fn size(&self) -> usize {
        self.len
    }

    /// Its elements as messages (for a batch no longer than [`BATCH_CEILING`]).
    pub fn messages(self) -> impl Iterator<Item = Result<Message<'a>, Refusal>> {
        debug_assert_eq!(self.items.len(), self.len, "a batch past the ceiling is refused unread");
        self.items.into_iter().map(|item| message(item.get()))
    }
}

impl<'de> serde::Deserialize<'de> for Batch<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Elements;
        impl<'de> serde::de::Visitor<'de> for Elements {
            type Value = Batch<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON-RPC batch")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Batch<'de>, A::Error> {
                let mut batch = Batch { items: Vec::new(), len: 0 };
                while batch.len < BATCH_CEILING {
                    let Some(item) = seq.next_element::<&RawValue>()? else { return Ok(batch) };
                    batch.items.push(item);
                    batch.len += 1;
                }
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    batch.len += 1;
                }
                Ok(batch)
            }
        }
        deserializer.deserialize_seq(Elements)
    }
}

/// The JSON text of a body or line: without the UTF-8 byte order mark a client may put
/// first, which RFC 8259 (section 8.1) lets a parser ignore, and which editors and some
/// runtimes' writers add without being asked.
pub fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Read a body or line.
pub fn read(bytes: &[u8]) -> Result<Incoming<'_>, Refusal> {
    let bytes = without_bom(bytes);
    // JSON text is UTF-8 (RFC 8259, section 8.1) all through: serde checks only what it
    // reads, and would take invalid bytes in a member it skips. Checked once, here: serde
    // reads a `str` without checking it again.
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let error = format!("Parse error: invalid UTF-8 at byte {}", e.valid_up_to());
            return Err(Refusal { id: None, error: ErrorData::parse_error(error, None) });
        }
    };
    if text.trim_start_matches(|c: char| c.is_ascii_whitespace()).starts_with('[') {
        let batch: Batch = serde_json::from_str(text).map_err(|e| parse_error(e, text))?;
        if batch.len == 0 {
            return Err(Refusal::invalid(None, "Invalid Request: empty batch"));
        }
        return Ok(Incoming::Batch(batch));
    }
    message(text).map(Incoming::Single)
}

/// The refusal of `bytes`, which serde could not read as it was asked to (`e`): a field of
/// the wrong type is an invalid request only if the text is JSON all through; serde stops at
/// the first mismatch, before a syntax error further on.
fn parse_error(e: serde_json::Error, text: &str) -> Refusal {
    let syntax = match e.classify() {
        serde_json::error::Category::Data => match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => return Refusal::invalid(None, format!("Invalid Request: {e}")),
            Err(syntax) => syntax,
        },
        _ => e,
    };
    Refusal { id: None, error: ErrorData::parse_error(format!("Parse error: {syntax}"), None) }
}

/// Read one message (a whole body or line, or a batch element).
fn message(text: &str) -> Result<Message<'_>, Refusal> {
    // serde would read an array as a struct's fields in order.
    if !text.trim_start_matches(|c: char| c.is_ascii_whitespace()).starts_with('{') {
        return match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => Err(Refusal::invalid(None, "Invalid Request: expected a JSON-RPC object")),
            Err(e) => Err(parse_error(e, text)),
        };
    }
    let envelope: Envelope = serde_json::from_str(text).map_err(|e| {
        // A field of the wrong type (`"method": 5`): the answer still names the request, if
        // its id can be read.
        let mut refusal = parse_error(e, text);
        if refusal.error.code == ErrorCode::INVALID_REQUEST {
            refusal.id = serde_json::from_str::<IdOnly>(text).ok().and_then(|only| only.id);
        }
        refusal
    })?;
    let id = match envelope.id {
        None => None,
        Some(raw) => match serde_json::from_str::<RequestId>(raw.get()) {
            Ok(RequestId::String(text)) if text.len() > MAX_ID_BYTES => {
                return Err(Refusal::invalid(
                    None,
                    format!("Invalid Request: \"id\" is {} bytes long; the limit is {MAX_ID_BYTES} bytes", text.len()),
                ));
            }
            Ok(id) => Some(id),
            // An integer id is read as i64 (rmcp's `RequestId`); one beyond that is named so.
            Err(_) if raw.get().trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) => {
                return Err(Refusal::invalid(
                    None,
                    "Invalid Request: \"id\" is an integer beyond the signed 64-bit range; send a smaller one or a string",
                ));
            }
            Err(_) => {
                return Err(Refusal::invalid(None, "Invalid Request: \"id\" must be a string or an integer"));
            }
        },
    };
    if envelope.jsonrpc.as_deref() != Some("2.0") {
        return Err(Refusal::invalid(id, "Invalid Request: \"jsonrpc\" must be \"2.0\""));
    }
    // JSON-RPC params are structured: an object or an array.
    if envelope.params.is_some_and(|p| !matches!(p.get().as_bytes().first(), Some(b'{' | b'['))) {
        return Err(Refusal::invalid(id, "Invalid Request: \"params\" must be an object or an array"));
    }
    match (envelope.method, id, envelope.result, envelope.error) {
        (Some(method), Some(id), _, _) => Ok(Message::Request { id, method, params: envelope.params }),
        (Some(method), None, _, _) => Ok(Message::Notification { method, params: envelope.params }),
        (None, Some(id), Some(result), None) => Ok(Message::Response { id, outcome: Ok(result) }),
        (None, Some(id), None, Some(error)) => Ok(Message::Response { id, outcome: Err(error) }),
        (None, id, None, None) => Err(Refusal::invalid(id, "Invalid Request: missing \"method\"")),
        (None, id, _, _) => Err(Refusal::invalid(id, "Invalid Request: a response has a result or an error")),
    }
}

/// A JSON-RPC response carrying `result`.
pub fn response(id: &RequestId, result: &impl Serialize) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    write(&mut out, id);
    out.extend_from_slice(b",\"result\":");
    if serde_json::to_writer(&mut out, result).is_err() {
        return error(Some(id), &ErrorData::internal_error("the result could not be serialized", None));
    }
    out.push(b'}');
    out
}

/// The longest error message sent, in bytes. Messages quote what the client sent (a cursor,
/// a level, a schema violation's value); the spec wants them a concise sentence, and an answer
/// should not be as large as the request that provoked it.
const MAX_MESSAGE_BYTES: usize = 2048;

/// A JSON-RPC error response (`id` is `null` when the request's could not be read, as
/// JSON-RPC 2.0 and the revisions up to 2025-11-25 have it).
pub fn error(id: Option<&RequestId>, error: &ErrorData) -> Vec<u8> {
    error_with(Some(id), error)
}

/// A JSON-RPC error response to a 2026-07-28 client: without an `id` when the request's
/// could not be read (that revision's schema types it a string or an integer, never `null`).
pub fn modern_error(id: Option<&RequestId>, error: &ErrorData) -> Vec<u8> {
    error_with(id.map(Some), error)
}

/// `id`: `None` leaves the member out, `Some(None)` writes `null`.
fn error_with(id: Option<Option<&RequestId>>, error: &ErrorData) -> Vec<u8> {
    let shortened;
    let error = if error.message.len() > MAX_MESSAGE_BYTES {
        // Room for the ellipsis, so that the message is at most the limit in all.
        let end = error.message.floor_char_boundary(MAX_MESSAGE_BYTES - '…'.len_utf8());
        shortened = ErrorData { message: format!("{}…", &error.message[..end]).into(), ..error.clone() };
        &shortened
    } else {
        error
    };
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
    match id {
        Some(Some(id)) => {
            out.extend_from_slice(b"\"id\":");
            write(&mut out, id);
            out.push(b',');
        }
        Some(None) => out.extend_from_slice(b"\"id\":null,"),
        None => {}
    }
    out.extend_from_slice(b"\"error\":");
    write(&mut out, error);
    out.push(b'}');
    out
}

/// A JSON-RPC request or notification from the server (`id` is `None` for a notification).
pub fn outgoing(id: Option<&RequestId>, message: &impl Serialize) -> Result<Vec<u8>, serde_json::Error> {
    // rmcp's request and notification types serialise as `{"method", "params"}`.
    let body = serde_json::to_vec(message)?;
    let mut out = Vec::with_capacity(body.len() + 48);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
    if let Some(id) = id {
        out.extend_from_slice(b"\"id\":");
        write(&mut out, id);
        out.push(b',');
    }
    match body.strip_prefix(b"{") {
        Some(rest) if rest != b"}" => out.extend_from_slice(rest),
        _ => {
            out.pop();
            out.push(b'}');
        }
    }
    Ok(out)
}

/// A JSON array of already serialised messages.
pub fn array(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
    out
}

fn write(out: &mut Vec<u8>, value: &impl Serialize) {
    // Ids and error objects always serialise.
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn single(text: &str) -> Result<Message<'_>, Refusal> {
        match read(text.as_bytes()) {
            Ok(Incoming::Single(message)) => Ok(message),
            Ok(Incoming::Batch(_)) => panic!("{text} is not a batch"),
            Err(refusal) => Err(refusal),
        }
    }

    fn code(refusal: Refusal) -> (Option<RequestId>, i32) {
        (refusal.id, refusal.error.code.0)
    }

    #[test]
    fn classifies_messages() {
        assert_eq!(code(single("{").unwrap_err()), (None, -32700));
        assert_eq!(code(single("\"x").unwrap_err()), (None, -32700));
        assert_eq!(code(single("42").unwrap_err()), (None, -32600));
        let Ok(Incoming::Batch(batch)) = read(br#"[["2.0", "ping"]]"#) else { panic!("a batch") };
        assert_eq!(code(batch.messages().next().unwrap().unwrap_err()).1, -32600);
        assert_eq!(code(single(r#"{"jsonrpc":"2.0","id":4}"#).unwrap_err()), (Some(RequestId::Number(4)), -32600));
        assert_eq!(code(single(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).unwrap_err()).1, -32600);
        assert_eq!(code(single(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).unwrap_err()), (None, -32600));
        assert_eq!(code(single(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#).unwrap_err()), (None, -32600));
        // JSON Schema's integers include `1e2` and `1.0` (the same values as 100 and 1).
        for (spelling, value) in [("1e2", 100), ("1.0", 1), ("-3E0", -3)] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{spelling},"method":"ping"}}"#);
            assert!(matches!(single(&text), Ok(Message::Request { id: RequestId::Number(n), .. }) if n == value));
        }
        let long = format!(r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#, "i".repeat(MAX_ID_BYTES + 1));
        let refused = single(&long).unwrap_err();
        assert!(refused.error.message.contains("the limit is 1024 bytes"), "{}", refused.error.message);
        let longest = format!(r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#, "i".repeat(MAX_ID_BYTES));
        assert!(single(&longest).is_ok());
        let huge = single(r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#).unwrap_err();
        assert!(huge.error.message.contains("64-bit"), "{}", huge.error.message);
        assert!(single(r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}"#).is_ok());
        // A field of the wrong type: the id is still echoed when it can be read.
        assert_eq!(
            code(single(r#"{"jsonrpc":"2.0","id":13,"method":5}"#).unwrap_err()),
            (Some(RequestId::Number(13)), -32600)
        );
        let numeric_version = single(r#"{"jsonrpc":2.0,"id":"x","method":"ping"}"#).unwrap_err();
        assert_eq!(code(numeric_version), (Some(RequestId::String("x".into())), -32600));
        assert_eq!(code(single(r#"{"jsonrpc":"2.0","id":[1],"method":5}"#).unwrap_err()), (None, -32600));
        let primitive = single(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":7}"#).unwrap_err();
        assert_eq!(code(primitive), (Some(RequestId::Number(2)), -32600));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"x":[1]}}"#),
            Ok(Message::Request { id: RequestId::String(id), method, params: Some(p) })
                if &*id == "a" && method == "tools/call" && p.get() == r#"{"x":[1]}"#
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Message::Notification { params: None, .. })
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            Ok(Message::Response { id: RequestId::Number(3), outcome: Ok(_) })
        ));
        // A `null` result is a result, and a `null` error still names what it answers.
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":3,"result":null}"#),
            Ok(Message::Response { id: RequestId::Number(3), outcome: Ok(r) }) if r.get() == "null"
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","id":3,"error":null}"#),
            Ok(Message::Response { id: RequestId::Number(3), outcome: Err(e) }) if e.get() == "null"
        ));
        assert_eq!(
            code(single(r#"{"jsonrpc":"2.0","id":3,"result":null,"error":null}"#).unwrap_err()),
            (Some(RequestId::Number(3)), -32600)
        );
        let Ok(Incoming::Batch(batch)) = read(b" [1, {\"jsonrpc\":\"2.0\",\"method\":\"x\"}]") else {
            panic!("a batch")
        };
        let items: Vec<_> = batch.messages().collect();
        assert!(items.len() == 2 && items[0].is_err() && items[1].is_ok());
        assert_eq!(code(read(b"[]").err().unwrap()).1, -32600);
        let not_utf8 = read(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}").err().unwrap();
        assert_eq!(code(not_utf8), (None, -32700));
        // Invalid UTF-8 where serde would skip it; broken JSON after a field of the wrong type.
        let skipped = read(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"x\":\"\xff\xfe\"}").err().unwrap();
        assert_eq!(code(skipped), (None, -32700));
        for broken in [r#"{"jsonrpc":2,"id":1,"method":"ping""#, r#"{"jsonrpc":"2.0","id":1,"method":5}x"#] {
            assert_eq!(code(single(broken).unwrap_err()), (None, -32700), "{broken}");
        }
        // A leading byte order mark is ignored; one anywhere else is a character like any other.
        assert!(matches!(
            read(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"),
            Ok(Incoming::Single(Message::Request { method, .. })) if method == "ping"
        ));
        assert!(matches!(read(b"\xEF\xBB\xBF[{\"jsonrpc\":\"2.0\",\"method\":\"x\"}]"), Ok(Incoming::Batch(_))));
        assert_eq!(code(read(b" \xEF\xBB\xBF{}").err().unwrap()), (None, -32700));
    }

    /// A batch past the ceiling is only counted: its elements are never read as messages.
    #[test]
    fn a_long_batch_is_counted_not_read() {
        let body = format!("[{}0]", "0,".repeat(2 * BATCH_CEILING));
        let Ok(Incoming::Batch(batch)) = read(body.as_bytes()) else { panic!("a batch") };
        assert_eq!((batch.size(), batch.items.len()), (2 * BATCH_CEILING + 1, BATCH_CEILING));
        assert!(read(format!("[{}0", "0,".repeat(2 * BATCH_CEILING)).as_bytes()).is_err(), "an unclosed batch");
    }

    #[test]
    fn batches_follow_the_revision_and_never_hold_initialize() {
        assert!(batch_allowed(Some(&ProtocolVersion::V_2025_03_26), "session", (3, 3)).is_ok());
        let long = batch_allowed(Some(&ProtocolVersion::V_2025_03_26), "session", (4, 3)).unwrap_err();
        assert!(long.message.contains("at most 3 messages; this one holds 4"), "{}", long.message);
        let later = batch_allowed(Some(&ProtocolVersion::V_2025_06_18), "session", (1, 3)).unwrap_err();
        assert!(later.message.ends_with("(this session uses 2025-06-18)"), "{}", later.message);
        assert!(batch_allowed(None, "connection", (1, 3)).is_err());
        let Ok(Incoming::Batch(items)) = read(
            br#"[7, {"jsonrpc":"2.0","id":1,"method":"initialize"},
            {"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
        ) else {
            panic!("a batch")
        };
        let mut elements = items.messages().map(batch_element);
        let answered = |element: Option<Result<Message<'_>, Vec<u8>>>| -> Value {
            serde_json::from_slice(&element.unwrap().expect_err("answered at once")).unwrap()
        };
        assert_eq!(answered(elements.next())["error"]["code"], -32600);
        let initialize = answered(elements.next());
        assert_eq!((initialize["id"].clone(), initialize["error"]["code"].clone()), (json!(1), json!(-32600)));
        assert!(matches!(elements.next(), Some(Ok(Message::Request { method, .. })) if method == "ping"));
    }

    #[test]
    fn writes_messages() {
        let id = RequestId::String("x\"y".into());
        let ok: Value = serde_json::from_slice(&response(&id, &json!({"a": 1}))).unwrap();
        assert_eq!(ok, json!({"jsonrpc": "2.0", "id": "x\"y", "result": {"a": 1}}));
        let failed: Value = serde_json::from_slice(&error(None, &ErrorData::parse_error("bad", None))).unwrap();
        assert_eq!(failed, json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "bad"}}));
        let modern: Value = serde_json::from_slice(&modern_error(None, &ErrorData::parse_error("bad", None))).unwrap();
        assert_eq!(modern, json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "bad"}}));
        let known: Value =
            serde_json::from_slice(&modern_error(Some(&id), &ErrorData::parse_error("bad", None))).unwrap();
        assert_eq!(known["id"], "x\"y");
        // A message quoting a huge value is cut, at a character.
        let long = ErrorData::invalid_params(format!("invalid cursor \"{}\"", "é".repeat(100_000)), None);
        let failed: Value = serde_json::from_slice(&error(None, &long)).unwrap();
        let message = failed["error"]["message"].as_str().unwrap();
        assert!(message.len() <= MAX_MESSAGE_BYTES && message.ends_with("é…"), "{} bytes", message.len());
        let note: Value = serde_json::from_slice(&outgoing(None, &json!({"method": "m"})).unwrap()).unwrap();
        assert_eq!(note, json!({"jsonrpc": "2.0", "method": "m"}));
        let ask: Value = serde_json::from_slice(
            &outgoing(Some(&RequestId::Number(2)), &json!({"method": "m", "params": {}})).unwrap(),
        )
        .unwrap();
        assert_eq!(ask, json!({"jsonrpc": "2.0", "id": 2, "method": "m", "params": {}}));
        assert_eq!(array(&[b"1".to_vec(), b"2".to_vec()]), b"[1,2]");
    }
}
