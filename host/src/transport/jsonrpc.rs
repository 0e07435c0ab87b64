//! JSON-RPC checks both transports apply before a message reaches rmcp, so malformed input
//! gets a spec-shaped error (rmcp answers some of it with a bare HTTP 415 or not at all).

use rmcp::model::ClientJsonRpcMessage;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

/// The only revision whose clients may send JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";

/// A JSON-RPC error message.
pub fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// Parse a body or line: `Err` is the parse error to send back.
pub fn parse(bytes: &[u8]) -> Result<Value, Value> {
    serde_json::from_slice(bytes).map_err(|e| error(Value::Null, -32700, format!("Parse error: {e}")))
}

/// The fields of a single message the transports look at. Parsing it validates the whole
/// text as JSON but skips `params` without building anything: on the hot path this is all
/// the checking done before rmcp parses the message for real.
#[derive(Deserialize)]
pub struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a str>,
    #[serde(borrow, default)]
    pub method: Option<&'a str>,
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    result: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl Envelope<'_> {
    /// The JSON-RPC rules every message must meet: `Err` is the invalid-request error,
    /// echoing the id.
    fn validate(&self) -> Result<(), Value> {
        let id = || self.id.clone().unwrap_or(Value::Null);
        if self.jsonrpc != Some("2.0") {
            return Err(error(id(), -32600, "Invalid Request: \"jsonrpc\" must be \"2.0\""));
        }
        if self.method.is_none() && self.result.is_none() && self.error.is_none() {
            return Err(error(id(), -32600, "Invalid Request: missing \"method\""));
        }
        Ok(())
    }
}

/// A body or line: one message, or a batch.
pub enum Incoming<'a> {
    Single(Envelope<'a>),
    Batch(Vec<Value>),
}

/// Read a body or line cheaply: `Err` is the parse or invalid-request error to send back.
pub fn read(bytes: &[u8]) -> Result<Incoming<'_>, Value> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        return match parse(bytes)? {
            Value::Array(items) => Ok(Incoming::Batch(items)),
            _ => Err(error(Value::Null, -32700, "Parse error")),
        };
    }
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => error(Value::Null, -32600, format!("Invalid Request: {e}")),
        _ => error(Value::Null, -32700, format!("Parse error: {e}")),
    })?;
    envelope.validate()?;
    Ok(Incoming::Single(envelope))
}

/// Check that a message is one rmcp can decode (e.g. `params` of the right shape), so the
/// error can echo the id; `Err` is the invalid-request error.
pub fn check_typed(bytes: &[u8], id: Option<&Value>) -> Result<(), Value> {
    serde_json::from_slice::<ClientJsonRpcMessage>(bytes)
        .map(drop)
        .map_err(|e| error(id.cloned().unwrap_or(Value::Null), -32600, format!("Invalid Request: {e}")))
}

/// Check one already-parsed message (a batch element) by the same rules as [`read`], then
/// that rmcp can decode it: `Err` is the invalid-request error to send back, echoing the id.
pub fn check(value: &Value) -> Result<(), Value> {
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    if !value.is_object() {
        // serde would read an array as a struct's fields in order.
        return Err(error(id, -32600, "Invalid Request: expected a JSON-RPC object"));
    }
    let invalid = |e: serde_json::Error| error(id.clone(), -32600, format!("Invalid Request: {e}"));
    Envelope::deserialize(value).map_err(invalid)?.validate()?;
    ClientJsonRpcMessage::deserialize(value).map(drop).map_err(invalid)
}

/// Whether a message is a request (and so gets a response).
pub fn is_request(value: &Value) -> bool {
    value.get("method").is_some() && value.get("id").is_some()
}

/// The error for a batch element that may not be batched.
pub fn unbatchable(value: &Value) -> Option<Value> {
    (value.get("method").and_then(Value::as_str) == Some("initialize")).then(|| {
        error(value.get("id").cloned().unwrap_or(Value::Null), -32600, "initialize must not be part of a batch")
    })
}

/// The error for a batch from a client of another revision.
pub fn batch_refused(version: Option<&str>) -> Value {
    error(
        Value::Null,
        -32600,
        format!(
            "Invalid Request: JSON-RPC batches are only part of protocol revision {BATCH_VERSION}{}",
            version.map(|v| format!(" (this connection uses {v})")).unwrap_or_default()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_messages() {
        assert_eq!(parse(b"{").unwrap_err()["error"]["code"], -32700);
        let no_method = check(&json!({"jsonrpc": "2.0", "id": 4})).unwrap_err();
        assert_eq!((no_method["id"].clone(), no_method["error"]["code"].clone()), (json!(4), json!(-32600)));
        assert!(check(&json!({"jsonrpc": "1.0", "id": 1, "method": "ping"})).is_err());
        assert!(check(&json!([1])).is_err());
        assert!(check(&json!(["2.0", "ping"])).is_err());
        assert_eq!(check(&json!({"jsonrpc": "2.0", "id": 6})).unwrap_err()["id"], 6);
        assert!(check(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).is_ok());
        assert!(check(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).is_ok());
        assert!(is_request(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})));
        assert!(unbatchable(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize"})).is_some());
        let Ok(Incoming::Single(envelope)) = read(br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":[1,2]}}"#)
        else {
            panic!("a request reads as one message")
        };
        assert_eq!((envelope.method, envelope.id), (Some("ping"), Some(json!(3))));
        assert!(matches!(read(b" [1, 2]"), Ok(Incoming::Batch(items)) if items.len() == 2));
        assert_eq!(read(b"{\"jsonrpc\": ").err().unwrap()["error"]["code"], -32700);
        assert_eq!(read(b"42").err().unwrap()["error"]["code"], -32600);
        assert_eq!(read(br#"{"jsonrpc":"2.0","id":5}"#).err().unwrap()["id"], 5);
        assert!(check_typed(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":7}"#, None).is_err());
    }
}
