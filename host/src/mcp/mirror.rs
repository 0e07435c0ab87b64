//! SEP-2243's rules for what 2026-07-28 HTTP clients mirror from a request's body into
//! headers: `Mcp-Name` carries the `name` (or `uri`) a request is about, and each argument a
//! tool's schema marks with `x-mcp-header` travels as `Mcp-Param-{name}` too. Whatever routes
//! on the headers must route what is really served, so they have to agree with the body.
//!
//! The transport checks `Mcp-Method` and the `Mcp-Name` of requests other than `tools/call`;
//! a tool call's headers are checked by the dispatcher, which reads the params and finds the
//! tool anyway ([`Front::mirrored`](super::Front::mirrored) carries them there).

use std::borrow::Cow;

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::excerpt;
use crate::catalog::MirroredParam;

const NAME: &str = "mcp-name";
const PARAM_PREFIX: &str = "mcp-param-";

/// The headers a `tools/call`'s check reads, out of all of a request's.
pub fn kept(headers: &HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for (name, value) in headers {
        if name.as_str() == NAME || name.as_str().starts_with(PARAM_PREFIX) {
            kept.append(name.clone(), value.clone());
        }
    }
    kept
}

/// Check `Mcp-Name` against the body's `expected` name or URI.
pub fn check_name(headers: &HeaderMap, method: &str, expected: &str) -> Result<(), String> {
    let raw = single(headers, "Mcp-Name")?.ok_or_else(|| format!("missing required Mcp-Name header for `{method}`"))?;
    let decoded = decode(raw).ok_or("Mcp-Name header is not valid Base64")?;
    if decoded != expected {
        return Err(format!(
            "Mcp-Name header `{}` does not match body value `{}`",
            excerpt(&decoded),
            excerpt(expected)
        ));
    }
    Ok(())
}

/// Check a tool call's headers: `Mcp-Name` against the tool's name, then one `Mcp-Param-*`
/// header for each mirrored argument the body has (and none for one it lacks or has null).
pub fn check_call(
    headers: &HeaderMap,
    name: &str,
    arguments: Option<&RawValue>,
    mirrored: &[MirroredParam],
) -> Result<(), String> {
    check_name(headers, "tools/call", name)?;
    if mirrored.is_empty() {
        return Ok(());
    }
    let arguments: Value = arguments.and_then(|a| serde_json::from_str(a.get()).ok()).unwrap_or(Value::Null);
    for param in mirrored {
        let header = format!("Mcp-Param-{}", param.header);
        let value = param.path.iter().try_fold(&arguments, |value, key| value.get(&**key));
        let value = value.filter(|v| matches!(v, Value::String(_) | Value::Bool(_) | Value::Number(_)));
        match (single(headers, &header)?, value) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!("unexpected {header} header for absent or null `{}`", param.property()));
            }
            (None, Some(_)) => return Err(format!("missing {header} header for `{}`", param.property())),
            (Some(raw), Some(value)) => {
                let decoded = decode(raw).ok_or_else(|| format!("{header} header is not valid Base64"))?;
                if !agrees(&decoded, value) {
                    return Err(format!(
                        "{header} header `{}` does not match body value `{}`",
                        excerpt(&decoded),
                        excerpt(&value.to_string())
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What the checks read of a tool call's params, leniently: the tool's name and its
/// arguments. Read where the call's own type is not (params that are not a tool call's,
/// whose headers are answered first all the same).
#[derive(Deserialize, Default)]
pub struct Named<'a> {
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub arguments: Option<&'a RawValue>,
}

/// Whether a header's text stands for a body value; numbers compare as numbers (`42` and
/// `42.0` agree), integers exactly (past 2^53 two integers can be one `f64`).
fn agrees(header: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)), header.parse::<i128>()) {
            (Some(a), Ok(b)) => a == b,
            _ => n.as_f64().zip(header.parse::<f64>().ok()).is_some_and(|(a, b)| a == b),
        },
        _ => false,
    }
}

/// A header that may appear at most once, as text.
pub fn single<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, String> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(format!("duplicate {name} header"));
    }
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

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(name, value)| (http::HeaderName::from_static(name), value.parse().unwrap())).collect()
    }

    #[test]
    fn a_tool_calls_headers_must_agree_with_its_arguments() {
        let param =
            |property: &str, header: &str| MirroredParam { path: [property.into()].into(), header: header.into() };
        let mirrored = [param("region", "Region"), param("n", "N")];
        let arguments = RawValue::from_string(json!({"region": "eu", "n": 42}).to_string()).unwrap();
        let run = |pairs: &[(&'static str, &str)]| check_call(&headers(pairs), "t", Some(&arguments), &mirrored);
        let good = [("mcp-name", "t"), ("mcp-param-region", "eu"), ("mcp-param-n", "42.0")];
        assert_eq!(run(&good), Ok(()));
        assert!(run(&good[..2]).unwrap_err().contains("missing Mcp-Param-N header for `n`"));
        assert!(run(&[("mcp-name", "=?base64?dA==?="), good[1], good[2]]).is_ok());
        assert!(run(&[("mcp-name", "u"), good[1], good[2]]).unwrap_err().contains("does not match"));
        assert!(run(&[good[0], ("mcp-param-region", "=?base64?ZXU=?="), good[2]]).is_ok());
        assert!(run(&[good[0], ("mcp-param-region", "us"), good[2]]).unwrap_err().contains("does not match"));
        assert!(run(&[good[0], good[1], good[1], good[2]]).unwrap_err().contains("duplicate Mcp-Param-Region"));
        assert!(run(&good[1..]).unwrap_err().contains("missing required Mcp-Name"));
        // An argument that is absent or null has no header.
        let null = RawValue::from_string(json!({"region": "eu", "n": null}).to_string()).unwrap();
        assert_eq!(check_call(&headers(&good[..2]), "t", Some(&null), &mirrored), Ok(()));
        let extra = check_call(&headers(&good), "t", Some(&null), &mirrored).unwrap_err();
        assert!(extra.contains("unexpected Mcp-Param-N"), "{extra}");
        // Integers compare exactly, past what an f64 tells apart too.
        let big = RawValue::from_string(r#"{"region": "eu", "n": 18446744073709551615}"#.to_owned()).unwrap();
        let near = [good[0], good[1], ("mcp-param-n", "18446744073709551614")];
        assert!(check_call(&headers(&near), "t", Some(&big), &mirrored).unwrap_err().contains("does not match"));
        let exact = [good[0], good[1], ("mcp-param-n", "18446744073709551615")];
        assert_eq!(check_call(&headers(&exact), "t", Some(&big), &mirrored), Ok(()));
        // Only the headers a check reads are kept for it.
        let all = headers(&[("mcp-method", "tools/call"), good[0], good[1], ("accept", "*/*")]);
        let kept = kept(&all);
        assert_eq!(kept.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["mcp-name", "mcp-param-region"]);
    }
}
