//! SEP-2243 standard headers on 2026-07-28 requests: `Mcp-Method` must be present and agree
//! with the body, and so must `Mcp-Name` where the method names something. A tool call's
//! `Mcp-Name` and `Mcp-Param-*` headers are the dispatcher's to check (see
//! [`crate::mcp::mirror`]): it reads the params and finds the tool anyway.

use axum::http::HeaderMap;
use serde_json::value::RawValue;

use crate::mcp::excerpt;
use crate::mcp::mirror::{self, Named};

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
    let named: Named = params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_default();
    match if key_is_name { named.name } else { named.uri } {
        Some(expected) => mirror::check_name(headers, method, &expected),
        None => Ok(()),
    }
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
