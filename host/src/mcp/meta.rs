//! A request's `_meta`, read in the same pass as its params: each field is kept as raw text
//! and decoded only if asked for, straight into its type (no intermediate JSON tree).

#![allow(deprecated)] // Logging levels are deprecated by SEP-2577 but served to legacy clients.

use std::borrow::Cow;

use rmcp::model::{ClientCapabilities, LoggingLevel, ProgressToken, ProtocolVersion, RequestMetaObject};
use serde::Deserialize;
use serde_json::value::RawValue;

/// What the dispatcher reads of a request's `_meta`.
pub trait MetaView {
    fn protocol_version(&self) -> Option<ProtocolVersion>;
    fn client_capabilities(&self) -> Option<ClientCapabilities>;
    fn progress_token(&self) -> Option<ProgressToken>;
    fn log_level(&self) -> Option<LoggingLevel>;
    /// Whether `_meta` names a log level that is none (a 2026-07-28 request is refused).
    fn log_level_is_malformed(&self) -> bool;
}

/// The `_meta` key of a 2026-07-28 request's log level.
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// `_meta` borrowed from the request's text. Only an object is one: serde would also take
/// an array's items as the fields in order (`["2026-07-28", {}]`).
#[derive(Deserialize, Default, Clone)]
#[serde(remote = "Self")]
pub struct Meta<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow, default)]
    capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow, default)]
    log_level: Option<&'a RawValue>,
    #[serde(rename = "progressToken", borrow, default)]
    progress_token: Option<&'a RawValue>,
    /// The client's W3C trace context, where the MCP conventions carry it.
    #[serde(borrow, default)]
    traceparent: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tracestate: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Meta<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = Meta<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("_meta as an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Meta<'de>, A::Error> {
                Meta::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Object)
    }
}

impl<'a> Meta<'a> {
    /// The client's `traceparent`, if it is a string.
    pub fn traceparent(&self) -> Option<Cow<'a, str>> {
        text(self.traceparent)
    }

    /// The client's `tracestate`, if it is a string.
    pub fn tracestate(&self) -> Option<Cow<'a, str>> {
        text(self.tracestate)
    }
}

/// A string field, borrowed unless it holds escapes.
fn text<'a>(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
    decode::<&str>(raw).map(Cow::Borrowed).or_else(|| decode::<String>(raw).map(Cow::Owned))
}

fn decode<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    raw.and_then(|raw| serde_json::from_str(raw.get()).ok())
}

impl MetaView for Meta<'_> {
    fn protocol_version(&self) -> Option<ProtocolVersion> {
        decode(self.version)
    }

    fn client_capabilities(&self) -> Option<ClientCapabilities> {
        decode(self.capabilities)
    }

    fn progress_token(&self) -> Option<ProgressToken> {
        decode(self.progress_token)
    }

    fn log_level(&self) -> Option<LoggingLevel> {
        decode(self.log_level)
    }

    fn log_level_is_malformed(&self) -> bool {
        self.log_level.is_some_and(|raw| raw.get() != "null" && self.log_level().is_none())
    }
}

impl MetaView for RequestMetaObject {
    fn protocol_version(&self) -> Option<ProtocolVersion> {
        RequestMetaObject::protocol_version(self)
    }

    fn client_capabilities(&self) -> Option<ClientCapabilities> {
        RequestMetaObject::client_capabilities(self)
    }

    fn progress_token(&self) -> Option<ProgressToken> {
        self.get_progress_token()
    }

    fn log_level(&self) -> Option<LoggingLevel> {
        RequestMetaObject::log_level(self)
    }

    fn log_level_is_malformed(&self) -> bool {
        self.get(LOG_LEVEL).is_some_and(|level| !level.is_null() && RequestMetaObject::log_level(self).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_same_as_rmcp() {
        let text = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":{"roots":{}},
            "io.modelcontextprotocol/logLevel":"info","progressToken":7,"other":[1,2]}"#;
        let ours: Meta = serde_json::from_str(text).unwrap();
        let theirs: RequestMetaObject = serde_json::from_str(text).unwrap();
        assert_eq!(ours.protocol_version(), MetaView::protocol_version(&theirs));
        assert_eq!(ours.client_capabilities(), MetaView::client_capabilities(&theirs));
        assert_eq!(ours.progress_token(), MetaView::progress_token(&theirs));
        assert_eq!(ours.log_level(), MetaView::log_level(&theirs));
        let malformed: Meta = serde_json::from_str(r#"{"io.modelcontextprotocol/protocolVersion":5}"#).unwrap();
        assert_eq!(malformed.protocol_version(), None);
        for (level, bad) in [(r#""info""#, false), ("null", false), (r#""bogus""#, true), ("5", true)] {
            let text = format!(r#"{{"io.modelcontextprotocol/logLevel":{level}}}"#);
            let ours: Meta = serde_json::from_str(&text).unwrap();
            let theirs: RequestMetaObject = serde_json::from_str(&text).unwrap();
            assert_eq!((ours.log_level_is_malformed(), theirs.log_level_is_malformed()), (bad, bad), "{level}");
        }
        assert!(!Meta::default().log_level_is_malformed() && !RequestMetaObject::default().log_level_is_malformed());
    }

    #[test]
    fn trace_context_is_read_when_it_is_text_and_ignored_when_not() {
        let meta: Meta = serde_json::from_str(r#"{"traceparent":"00-ab-cd-01","tracestate":"a=\u0062"}"#).unwrap();
        assert_eq!(meta.traceparent().as_deref(), Some("00-ab-cd-01"));
        assert_eq!(meta.tracestate().as_deref(), Some("a=b"));
        let odd: Meta = serde_json::from_str(r#"{"traceparent":7,"tracestate":{}}"#).unwrap();
        assert_eq!((odd.traceparent(), odd.tracestate()), (None, None));
    }

    #[test]
    fn only_an_object_is_meta() {
        for text in [r#"["2026-07-28",{},"debug","tok"]"#, "[]", r#""x""#, "5"] {
            assert!(serde_json::from_str::<Meta>(text).is_err(), "{text}");
        }
        let meta: Meta = serde_json::from_str(r#"{"progressToken":"t"}"#).unwrap();
        assert!(meta.progress_token().is_some());
    }
}
