//! What the dispatcher answers with. Most results are rmcp model values; a tool's result is
//! written to the wire straight from the plugin's WIT value: its text is escaped once into
//! the response, binary content is base64-encoded as it is written, and structured content
//! is the plugin's own JSON text (checked, never rebuilt), so a call's output is not copied
//! into an intermediate `CallToolResult` tree first.

use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD as B64;
use rmcp::model::ServerResult;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::runtime::types as wit;

/// A request's result, ready to serialise once into the response.
// Returned by value and serialised at once; boxing the model result would cost every other
// request an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    Model(ServerResult),
    Tool(ToolReply),
}

impl From<ServerResult> for Reply {
    fn from(result: ServerResult) -> Self {
        Reply::Model(result)
    }
}

impl Serialize for Reply {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Reply::Model(result) => result.serialize(serializer),
            Reply::Tool(tool) => tool.serialize(serializer),
        }
    }
}

/// What a client's revision knows beyond 2024-11-05. Content blocks: audio arrived in
/// 2025-03-26, resource links in 2025-06-18 (a block the client does not know reaches it as
/// text). Fields: tool annotations in 2025-03-26; titles, output schemas and structured
/// content in 2025-06-18 (left out for older clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Known {
    Original,
    Audio,
    Links,
}

/// What a client that knows no audio content reads in its place.
pub fn audio_as_text(mime_type: &str, bytes: usize) -> String {
    format!("[audio ({mime_type}, {bytes} bytes): audio content needs MCP 2025-03-26 or later]")
}

/// What a client that knows no resource links reads in place of one.
pub fn link_as_text(name: &str, uri: &str) -> String {
    format!("Resource: {name} <{uri}>")
}

/// A complete `tools/call` result.
pub struct ToolReply {
    content: Vec<wit::Content>,
    structured: Option<Box<RawValue>>,
    is_error: bool,
    known: Known,
    /// 2026-07-28 results name their type (`"resultType": "complete"`); older ones do not.
    pub(super) typed: bool,
}

impl ToolReply {
    /// A plugin's result; `structured` is its structured content, already checked to be JSON.
    pub fn new(result: wit::ToolResult, structured: Option<Box<RawValue>>, known: Known) -> Self {
        ToolReply { content: result.content, structured, is_error: result.is_error, known, typed: false }
    }

    /// Whether the tool reported an error (`isError`).
    pub fn is_error(&self) -> bool {
        self.is_error
    }

    /// A tool error the client reads as text (`isError: true`).
    pub fn error(message: String) -> Self {
        ToolReply {
            content: vec![wit::Content::Text(message)],
            structured: None,
            is_error: true,
            known: Known::Original,
            typed: false,
        }
    }
}

impl Serialize for ToolReply {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if self.typed {
            map.serialize_entry("resultType", "complete")?;
        }
        map.serialize_entry("content", &Blocks(&self.content, self.known))?;
        // Structured content arrived in 2025-06-18.
        if let Some(structured) = self.structured.as_ref().filter(|_| self.known >= Known::Links) {
            map.serialize_entry("structuredContent", structured)?;
        }
        map.serialize_entry("isError", &self.is_error)?;
        if self.typed {
            map.serialize_entry("_meta", &ServerInfo)?;
        }
        map.end()
    }
}

/// A 2026-07-28 result's `_meta`: the server's name.
struct ServerInfo;

impl Serialize for ServerInfo {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(super::lists::SERVER_INFO_KEY, super::lists::server_info())?;
        map.end()
    }
}

/// A plugin's JSON text as it goes on the wire: its own bytes when they hold no line break
/// (stdio frames messages by line, SSE by line too), else re-serialised compactly. Either way
/// it is held to what the host accepts from clients (nesting 128 deep, numbers within `f64`):
/// a plugin's `[[[…` two million deep or `1e999999` would break its clients' parsers.
pub fn wire_json(text: String) -> Result<Box<RawValue>, serde_json::Error> {
    if text.bytes().any(|b| b == b'\n' || b == b'\r') {
        return serde_json::value::to_raw_value(&serde_json::from_str::<serde_json::Value>(&text)?);
    }
    serde_json::from_str::<Parsable>(&text)?;
    RawValue::from_string(text)
}

/// A JSON value read through serde_json's own rules (its depth limit, numbers in range)
/// without building it.
struct Parsable;

impl<'de> Deserialize<'de> for Parsable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Parsable)
    }
}

impl<'de> serde::de::Visitor<'de> for Parsable {
    type Value = Parsable;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Parsable, E> {
        Ok(Parsable)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Parsable, E> {
        Ok(Parsable)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Parsable, E> {
        Ok(Parsable)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Parsable, E> {
        Ok(Parsable)
    }
    fn visit_str<E>(self, _: &str) -> Result<Parsable, E> {
        Ok(Parsable)
    }
    fn visit_unit<E>(self) -> Result<Parsable, E> {
        Ok(Parsable)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Parsable, A::Error> {
        while seq.next_element::<Parsable>()?.is_some() {}
        Ok(Parsable)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Parsable, A::Error> {
        while map.next_entry::<serde::de::IgnoredAny, Parsable>()?.is_some() {}
        Ok(Parsable)
    }
}

/// Content blocks in MCP's wire form.
struct Blocks<'a>(&'a [wit::Content], Known);

impl Serialize for Blocks<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for content in self.0 {
            seq.serialize_element(&Block { content, known: self.1 })?;
        }
        seq.end()
    }
}

/// One content block. Resource links arrived in 2025-06-18; older clients get them as text.
pub struct Block<'a> {
    pub content: &'a wit::Content,
    pub known: Known,
}

impl Serialize for Block<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self.content {
            wit::Content::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            wit::Content::Audio(binary) if self.known < Known::Audio => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", &audio_as_text(&binary.mime_type, binary.data.len()))?;
            }
            wit::Content::Image(binary) | wit::Content::Audio(binary) => {
                let kind = if matches!(self.content, wit::Content::Image(_)) { "image" } else { "audio" };
                map.serialize_entry("type", kind)?;
                map.serialize_entry("data", &Base64(&binary.data))?;
                map.serialize_entry("mimeType", &binary.mime_type)?;
            }
            wit::Content::Resource(contents) => {
                map.serialize_entry("type", "resource")?;
                map.serialize_entry("resource", &Contents(contents))?;
            }
            wit::Content::ResourceLink(link) if self.known >= Known::Links => {
                map.serialize_entry("type", "resource_link")?;
                map.serialize_entry("uri", &link.uri)?;
                map.serialize_entry("name", &link.name)?;
                if let Some(description) = &link.description {
                    map.serialize_entry("description", description)?;
                }
                if let Some(mime) = &link.mime_type {
                    map.serialize_entry("mimeType", mime)?;
                }
            }
            wit::Content::ResourceLink(link) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", &link_as_text(&link.name, &link.uri))?;
            }
        }
        map.end()
    }
}

/// An embedded resource's contents.
struct Contents<'a>(&'a wit::ResourceContents);

impl Serialize for Contents<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let contents = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("uri", &contents.uri)?;
        if let Some(mime) = &contents.mime_type {
            map.serialize_entry("mimeType", mime)?;
        }
        match &contents.body {
            wit::ResourceBody::Text(text) => map.serialize_entry("text", text)?,
            wit::ResourceBody::Blob(bytes) => map.serialize_entry("blob", &Base64(bytes))?,
        }
        map.end()
    }
}

/// Bytes as a base64 string, encoded while it is written.
struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&Base64Display::new(self.0, &B64))
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::CallToolResult;
    use serde_json::{Value, json};

    use super::*;
    use crate::mcp::convert;

    fn binary(data: &[u8], mime: &str) -> wit::Binary {
        wit::Binary { data: data.to_vec(), mime_type: mime.into() }
    }

    /// Every kind of content, as rmcp's `CallToolResult` writes it: the wire form is the
    /// same whichever way it is produced.
    #[test]
    fn writes_what_rmcp_writes() {
        let link = wit::ResourceLink {
            uri: "file:///a".into(),
            name: "a".into(),
            description: Some("the \"a\" file".into()),
            mime_type: None,
        };
        let content = vec![
            wit::Content::Text("line\nwith \u{1} and é".into()),
            wit::Content::Image(binary(&[0, 1, 2, 250, 251], "image/png")),
            wit::Content::Audio(binary(b"RIFF", "audio/wav")),
            wit::Content::Resource(wit::ResourceContents {
                uri: "mem://t".into(),
                mime_type: Some("text/plain".into()),
                body: wit::ResourceBody::Text("hi".into()),
            }),
            wit::Content::Resource(wit::ResourceContents {
                uri: "mem://b".into(),
                mime_type: None,
                body: wit::ResourceBody::Blob(vec![9; 7]),
            }),
            wit::Content::ResourceLink(link),
        ];
        let structured = r#"{"n": 1, "s": "x"}"#;
        for (known, is_error, typed) in
            [(Known::Links, false, false), (Known::Audio, true, true), (Known::Original, false, false)]
        {
            let result =
                wit::ToolResult { content: content.clone(), structured_content: Some(structured.into()), is_error };
            let expected = {
                let blocks = content.iter().map(|c| convert::content(c, known)).collect();
                let mut model = if is_error { CallToolResult::error(blocks) } else { CallToolResult::success(blocks) };
                if known >= Known::Links {
                    model.structured_content = Some(serde_json::from_str(structured).unwrap());
                }
                let mut model = ServerResult::CallToolResult(model);
                if typed {
                    crate::mcp::lists::sign(&mut model);
                } else {
                    model.strip_result_type_for_legacy_peer();
                }
                serde_json::to_value(model).unwrap()
            };
            let raw = RawValue::from_string(structured.into()).unwrap();
            let mut reply = ToolReply::new(result, Some(raw), known);
            reply.typed = typed;
            let written: Value = serde_json::from_slice(&serde_json::to_vec(&reply).unwrap()).unwrap();
            assert_eq!(written, expected);
            let kinds: Vec<&str> =
                written["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
            let (audio, link) = match known {
                Known::Links => ("audio", "resource_link"),
                Known::Audio => ("audio", "text"),
                Known::Original => ("text", "text"),
            };
            assert_eq!(kinds, ["text", "image", audio, "resource", "resource", link], "{known:?}");
        }
    }

    #[test]
    fn structured_text_stays_on_one_line() {
        assert_eq!(wire_json(" {\"a\": [1, 2]}\t".into()).unwrap().get(), "{\"a\": [1, 2]}");
        assert_eq!(wire_json("{\n  \"a\": \"b\\nc\"\r\n}".into()).unwrap().get(), r#"{"a":"b\nc"}"#);
        assert!(wire_json("{\"a\": }".into()).is_err());
        assert!(wire_json("{} {}".into()).is_err());
        assert!(wire_json(format!("{}1{}", "[".repeat(200), "]".repeat(200))).is_err());
        assert!(wire_json(format!("{}1{}", "[".repeat(100), "]".repeat(100))).is_ok());
        assert!(wire_json("{\"a\": 1e999999}".into()).is_err());
        assert!(wire_json("{\"a\": 1e300, \"b\": -12345678901234567890123}".into()).is_ok());
    }

    #[test]
    fn an_error_is_text() {
        let mut reply = ToolReply::error("it broke".into());
        reply.typed = true;
        assert_eq!(
            serde_json::to_value(&reply).unwrap(),
            json!({"resultType": "complete", "content": [{"type": "text", "text": "it broke"}], "isError": true,
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "capsule", "version": env!("CARGO_PKG_VERSION")}}})
        );
    }
}
