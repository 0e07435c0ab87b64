//! SEP-2243 standard headers on 2026-07-28 requests: `Mcp-Method` must be present and agree
//! with the body, and so must `Mcp-Name` where the method names something. A tool call's
//! `Mcp-Name` and `Mcp-Param-*` headers are the dispatcher's to check (see
//! [`crate::mcp::mirror`]): it reads the params and finds the tool anyway.

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::mcp::excerpt;
use crate::mcp::mirror;

/// Check the standard headers of a request or notification, except a tool call's
/// `Mcp-Name` and `Mcp-Param-*`. `Err` is the reason, for a -32020 error. SEP-2243 requires
/// `Mcp-Method` on requests and leaves a notification's headers undefined, so a notification
/// may go without (one it carries must still agree).
pub fn check(headers: &HeaderMap, method: &str, params: Option<&RawValue>, request: bool) -> Result<(), String> {
    match mirror::single(headers, "Mcp-Method")? {
        None if !request => return Ok(()),
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
    // Of the methods that name something, these are 2026-07-28's; resources/subscribe and
    // unsubscribe are not, and are answered as unknown methods.
    let key_is_name = method == "prompts/get";
    let key_is_uri = method == "resources/read";
    if !key_is_name && !key_is_uri {
        return Ok(());
    }
    // Params that are no object (or none) are the method's own to refuse.
    let Some(params) = params.filter(|p| p.get().trim_start().starts_with('{')) else { return Ok(()) };
    let key = if key_is_name { "name" } else { "uri" };
    // Only the key is read: a stray field of another type beside it must not hide it (it
    // did, read together with the fields of other methods).
    let named = if key_is_name {
        serde_json::from_str::<PromptName>(params.get()).map(|p| p.name)
    } else {
        serde_json::from_str::<ResourceUri>(params.get()).map(|p| p.uri)
    };
    match named {
        Ok(Some(expected)) => mirror::check_name(headers, method, &expected),
        // Params without the key are the method's own to refuse too.
        Ok(None) => Ok(()),
        // A key that is there but not one string (or there twice) cannot be checked, and
        // what the method would read of it is not served unchecked.
        Err(_) => Err(format!("Mcp-Name cannot be checked: params.{key} is not one string")),
    }
}

/// What `prompts/get` is about.
#[derive(Deserialize)]
struct PromptName<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
}

/// What `resources/read` is about.
#[derive(Deserialize)]
struct ResourceUri<'a> {
    #[serde(default, borrow)]
    uri: Option<Cow<'a, str>>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::transport::http::header_map as headers;

    #[test]
    fn standard_headers_must_agree_with_the_body() {
        let params = RawValue::from_string(json!({"name": "p", "arguments": {}}).to_string()).unwrap();
        let run = |pairs: &[(&'static str, &str)]| check(&headers(pairs), "prompts/get", Some(&params), true);
        let good = [("mcp-method", "prompts/get"), ("mcp-name", "p")];
        assert_eq!(run(&good), Ok(()));
        assert!(run(&good[..1]).unwrap_err().contains("missing required Mcp-Name"));
        assert!(run(&[good[0], ("mcp-name", "=?base64?cA==?=")]).is_ok());
        assert!(run(&[good[0], ("mcp-name", "q")]).unwrap_err().contains("does not match"));
        assert!(run(&[("mcp-method", "tools/list"), good[1]]).unwrap_err().contains("Mcp-Method"));
        assert!(run(&[good[1]]).unwrap_err().contains("missing required Mcp-Method"));
        assert!(run(&[good[0], good[0], good[1]]).unwrap_err().contains("duplicate Mcp-Method"));
        assert!(run(&[good[0], good[1], good[1]]).unwrap_err().contains("duplicate Mcp-Name"));
        // A tool call's name and arguments are the dispatcher's to check.
        let call = check(&headers(&[("mcp-method", "tools/call")]), "tools/call", Some(&params), true);
        assert_eq!(call, Ok(()));
        let list = check(&headers(&[("mcp-method", "tools/list")]), "tools/list", None, true);
        assert_eq!(list, Ok(()));
        // Only the key is read: a stray field of another type does not hide it, and a key
        // that is not one string is not served unchecked.
        let stray = |params: serde_json::Value| {
            let params = RawValue::from_string(params.to_string()).unwrap();
            check(&headers(&[good[0], ("mcp-name", "q")]), "prompts/get", Some(&params), true)
        };
        assert!(stray(json!({"name": "p", "uri": 42})).unwrap_err().contains("does not match"));
        let read = RawValue::from_string(json!({"uri": "a://b", "name": 42}).to_string()).unwrap();
        let read = check(
            &headers(&[("mcp-method", "resources/read"), ("mcp-name", "a://c")]),
            "resources/read",
            Some(&read),
            true,
        );
        assert!(read.unwrap_err().contains("does not match"));
        assert!(stray(json!({"name": 42})).unwrap_err().contains("cannot be checked"));
        // Params without the name, or no object, are the method's to refuse (-32602).
        for params in [json!({"arguments": {}}), json!({"name": null}), json!(["p"]), json!("p")] {
            assert_eq!(stray(params.clone()), Ok(()), "{params}");
        }
        let twice = RawValue::from_string(r#"{"name": "q", "name": "p"}"#.to_owned()).unwrap();
        let twice = check(&headers(&[good[0], ("mcp-name", "q")]), "prompts/get", Some(&twice), true);
        assert!(twice.unwrap_err().contains("cannot be checked"), "a name given twice");
        // A method 2026-07-28 removed is not asked for its name: it is unknown.
        let uri = RawValue::from_string(json!({"uri": "a://b"}).to_string()).unwrap();
        let removed =
            check(&headers(&[("mcp-method", "resources/subscribe")]), "resources/subscribe", Some(&uri), true);
        assert_eq!(removed, Ok(()));
        // A notification may go without `Mcp-Method`, but not with a wrong one.
        let cancelled = "notifications/cancelled";
        assert_eq!(check(&headers(&[]), cancelled, None, false), Ok(()));
        assert!(check(&headers(&[("mcp-method", "tools/list")]), cancelled, None, false).is_err());
        assert_eq!(check(&headers(&[]), "prompts/get", Some(&params), false), Ok(()), "nor Mcp-Name");
    }
}
