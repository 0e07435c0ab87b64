//! `fetch`: read a web page or API response over HTTP(S). The host sends the request only if
//! the operator granted the destination in this plugin's `network` list; anything else comes
//! back as a clear refusal, never as a connection. Text is returned in pages, so a long
//! document can be read piece by piece.

use capsule_sdk::http::{self, HttpError};
use capsule_sdk::prelude::*;

/// Bodies larger than this are not read.
const MAX_BODY: usize = 5 << 20;
/// Characters returned per call unless the caller asks for fewer.
const DEFAULT_LENGTH: usize = 20_000;

#[derive(Deserialize, JsonSchema)]
struct FetchArgs {
    /// The absolute http:// or https:// URL to fetch.
    url: String,
    /// Most characters to return (default 20000).
    #[serde(default)]
    max_length: Option<usize>,
    /// Character offset to start from, to read the rest of a long response.
    #[serde(default)]
    start_index: Option<usize>,
}

fn fetch(args: FetchArgs) -> Result<String, String> {
    let request = http::Request::get(&args.url)
        .map_err(explain)?
        .header("accept", "text/*, application/json, application/xml;q=0.9, */*;q=0.1")
        .header("user-agent", "capsule-fetch/0.1")
        .max_body(MAX_BODY);
    // As the request writes it: `HTTP://Host/` is no redirect for answering as `http://host/`.
    let asked = request.url();
    let response = request.send().map_err(explain)?;
    // What comes back as a redirect is one the SDK stopped following: a downgrade to http,
    // a loop, or too many.
    if let (301 | 302 | 303 | 307 | 308, Some(location)) = (response.status, response.header("location")) {
        if response.url.starts_with("https:") && location.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("http:")) {
            return Err(format!(
                "{} redirected from https to {location} (HTTP {}); not followed: it would leave TLS",
                response.url, response.status
            ));
        }
        return Err(format!(
            "{} redirected more than {} times (the last answer, HTTP {}, pointed to {location}); giving up",
            args.url,
            http::DEFAULT_REDIRECTS,
            response.status
        ));
    }
    let content_type = response.header("content-type").unwrap_or_default();
    if !is_text(&content_type) {
        return Err(format!(
            "{} answered {} with {} bytes of {}; this tool returns text only",
            args.url,
            response.status,
            response.body.len(),
            if content_type.is_empty() { "unlabelled content" } else { content_type.as_str() }
        ));
    }
    let text = response.text();
    let mut page = page(&text, args.start_index.unwrap_or(0), args.max_length.unwrap_or(DEFAULT_LENGTH));
    if response.url != asked {
        page = format!("(redirected to {})\n\n{page}", response.url);
    }
    if response.status >= 400 {
        return Err(format!("{} answered HTTP {}:\n{page}", args.url, response.status));
    }
    Ok(page)
}

fn explain(error: HttpError) -> String {
    match error {
        HttpError::Denied { destination } => format!(
            "the server does not allow this tool to reach {destination}; the operator grants hosts in the \
             plugin's network list"
        ),
        other => other.to_string(),
    }
}

fn is_text(content_type: &str) -> bool {
    let mime = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    mime.is_empty()
        || mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || ["application/json", "application/xml", "application/javascript", "application/x-www-form-urlencoded"]
            .contains(&mime.as_str())
}

/// `length` characters from `start`, with a note saying how to read on if there is more.
fn page(text: &str, start: usize, length: usize) -> String {
    let total = text.chars().count();
    if start >= total && total > 0 {
        return format!("(start_index {start} is past the end: the content has {total} characters)");
    }
    let body: String = text.chars().skip(start).take(length).collect();
    let end = start + body.chars().count();
    if end < total {
        format!(
            "{body}\n\n(content truncated at character {end} of {total}; call again with start_index {end} for more)"
        )
    } else {
        body
    }
}

capsule_sdk::plugin!(|p| {
    p.tool("fetch", "Fetch a URL over HTTP(S) and return its text, a page at a time", fetch)
        .read_only()
        .open_world(true);
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_count_characters_and_say_how_to_go_on() {
        assert_eq!(page("héllo", 0, 10), "héllo");
        assert_eq!(
            page("héllo", 1, 2),
            "él\n\n(content truncated at character 3 of 5; call again with start_index 3 for more)"
        );
        assert!(page("abc", 5, 2).contains("past the end"));
        assert_eq!(page("", 0, 2), "");
    }

    #[test]
    fn text_types_are_recognised() {
        for text in ["text/html; charset=utf-8", "application/json", "application/ld+json", "image/svg+xml", ""] {
            assert!(is_text(text), "{text}");
        }
        for binary in ["image/png", "application/octet-stream", "application/pdf"] {
            assert!(!is_text(binary), "{binary}");
        }
    }
}
