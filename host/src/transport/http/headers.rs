//! SEP-2243 standard headers on 2026-07-28 requests: `Mcp-Method`, `Mcp-Name` and the
//! `Mcp-Param-*` headers a tool's input schema asks for (`x-mcp-header`) must be present and
//! agree with the body, so that whatever routes on them routes what is really served.

use std::sync::Arc;

use axum::http::HeaderMap;
use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::checks::{Repeated, at_most_once};
use crate::mcp::excerpt;

/// What the checks read of a request's params: the routing name, and the tool arguments.
#[derive(Deserialize, Default)]
struct Named<'a> {
    #[serde(default, borrow)]
    name: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    uri: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// Check the standard headers of a request or notification. `schema` gives a tool's input
/// schema by name. `Err` is the reason, for a -32020 error.
pub fn check(
    headers: &HeaderMap,
    method: &str,
    params: Option<&RawValue>,
    schema: impl FnOnce(&str) -> Option<Arc<Map<String, Value>>>,
) -> Result<(), String> {
    match single(headers, "Mcp-Method")? {
        None => return Err("missing required Mcp-Method header".into()),
        Some(value) if value != method => {
            return Err(format!(
                "Mcp-Method header `{}` does not match body method `{}`",
                excerpt(value),
                excerpt(method)
            ));
        }
        Some(_) => {}
    }
    let key_is_name = matches!(method, "tools/call" | "prompts/get");
    let key_is_uri = matches!(method, "resources/read" | "resources/subscribe" | "resources/unsubscribe");
    if !key_is_name && !key_is_uri {
        return Ok(());
    }
    let named: Named = params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_default();
    let expected = if key_is_name { named.name.as_deref() } else { named.uri.as_deref() };
    if let Some(expected) = expected {
        let raw =
            single(headers, "Mcp-Name")?.ok_or_else(|| format!("missing required Mcp-Name header for `{method}`"))?;
        let decoded = decode(raw).ok_or("Mcp-Name header is not valid Base64")?;
        if decoded != expected {
            return Err(format!(
                "Mcp-Name header `{}` does not match body value `{}`",
                excerpt(&decoded),
                excerpt(expected)
            ));
        }
    }
    let Some(schema) = named.name.as_deref().filter(|_| method == "tools/call").and_then(schema) else {
        return Ok(());
    };
    let mut annotations = Vec::new();
    annotated(schema.get("properties"), &mut Vec::new(), &mut annotations);
    if annotations.is_empty() {
        return Ok(());
    }
    let arguments: Value = named.arguments.and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or(Value::Null);
    for (path, header) in annotations {
        let full = format!("Mcp-Param-{header}");
        let property = path.join(".");
        let value = path.iter().try_fold(&arguments, |value, key| value.get(key)).filter(|v| !v.is_null());
        let value = value.filter(|v| matches!(v, Value::String(_) | Value::Bool(_) | Value::Number(_)));
        match (single(headers, &full)?, value) {
            (None, None) => {}
            (Some(_), None) => return Err(format!("unexpected {full} header for absent or null `{property}`")),
            (None, Some(_)) => return Err(format!("missing {full} header for `{property}`")),
            (Some(raw), Some(value)) => {
                let decoded = decode(raw).ok_or_else(|| format!("{full} header is not valid Base64"))?;
                if !agrees(&decoded, value) {
                    return Err(format!(
                        "{full} header `{}` does not match body value `{}`",
                        excerpt(&decoded),
                        excerpt(&value.to_string())
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether a header's text stands for a body value; numbers compare as numbers (`42` and
/// `42.0` agree).
fn agrees(header: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (n.as_i64(), header.parse::<i64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => n.as_f64().zip(header.parse::<f64>().ok()).is_some_and(|(a, b)| a == b),
        },
        _ => false,
    }
}

/// The `x-mcp-header` annotations reached from the schema root through `properties` alone.
fn annotated<'a>(properties: Option<&'a Value>, path: &mut Vec<&'a str>, out: &mut Vec<(Vec<&'a str>, &'a str)>) {
    let Some(Value::Object(properties)) = properties else { return };
    for (name, schema) in properties {
        path.push(name);
        if let Some(Value::String(header)) = schema.get("x-mcp-header")
            && !header.is_empty()
        {
            out.push((path.clone(), header));
        }
        annotated(schema.get("properties"), path, out);
        path.pop();
    }
}

/// A header that may appear at most once, as text.
fn single<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, String> {
    let once = at_most_once(headers, name).map_err(|Repeated| format!("duplicate {name} header"))?;
    let Some(value) = once else { return Ok(None) };
    value.to_str().map(Some).map_err(|_| format!("{name} header contains invalid characters"))
}

/// A header value, with the `=?base64?…?=` form decoded.
fn decode(value: &str) -> Option<String> {
    match value.strip_prefix("=?base64?").and_then(|inner| inner.strip_suffix("?=")) {
        Some(inner) => String::from_utf8(BASE64_STANDARD.decode(inner).ok()?).ok(),
        None => Some(value.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::transport::http::header_map as headers;

    #[test]
    fn standard_headers_must_agree_with_the_body() {
        let schema = json!({"properties": {"region": {"type": "string", "x-mcp-header": "Region"}, "n": {"type": "integer", "x-mcp-header": "N"}}});
        let schema = Arc::new(schema.as_object().unwrap().clone());
        let params =
            RawValue::from_string(json!({"name": "t", "arguments": {"region": "eu", "n": 42}}).to_string()).unwrap();
        let run = |pairs: &[(&'static str, &str)]| {
            check(&headers(pairs), "tools/call", Some(&params), |_| Some(schema.clone()))
        };
        let good =
            [("mcp-method", "tools/call"), ("mcp-name", "t"), ("mcp-param-region", "eu"), ("mcp-param-n", "42.0")];
        assert_eq!(run(&good), Ok(()));
        assert!(run(&good[..3]).unwrap_err().contains("missing Mcp-Param-N"));
        assert!(run(&[good[0], ("mcp-name", "=?base64?dA==?="), good[2], good[3]]).is_ok());
        assert!(run(&[good[0], ("mcp-name", "u"), good[2], good[3]]).unwrap_err().contains("does not match"));
        assert!(run(&[("mcp-method", "tools/list")]).unwrap_err().contains("Mcp-Method"));
        assert!(run(&[]).unwrap_err().contains("missing required Mcp-Method"));
        assert!(run(&[good[0], good[0]]).unwrap_err().contains("duplicate"));
        let list = check(&headers(&[("mcp-method", "tools/list")]), "tools/list", None, |_| None);
        assert_eq!(list, Ok(()));
    }
}
