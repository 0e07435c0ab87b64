//! Outbound HTTP through `wasi:http`, for plugins the operator granted network hosts.
//!
//! The host checks every request against the plugin's `network` grants before opening a
//! connection; a request to any other host fails with [`HttpError::Denied`]. Declare the hosts a
//! plugin needs with [`needs!`](crate::needs) so `capsule check` and the operator see them.
//!
//! ```ignore
//! let page = capsule_sdk::http::Request::get("https://example.com/")?.send()?;
//! assert_eq!(page.status, 200);
//! let text = page.text();
//! ```

use std::fmt;
use std::time::Duration;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// Response bodies larger than this are refused unless [`Request::max_body`] says otherwise.
pub const DEFAULT_MAX_BODY: usize = 10 << 20;
/// Redirects followed unless [`Request::redirects`] says otherwise.
pub const DEFAULT_REDIRECTS: u8 = 5;

/// One outgoing request. Build it with [`Request::get`] or [`Request::new`], then [`send`](Request::send).
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    scheme: String,
    authority: String,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
    max_body: usize,
    redirects: u8,
}

/// A response with its whole body read.
#[derive(Debug, Clone)]
pub struct Response {
    /// The URL that answered, after any redirects.
    pub url: String,
    /// The HTTP status code.
    pub status: u16,
    /// Header names (lowercase) and values, in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL is not an absolute `http` or `https` URL.
    InvalidUrl(String),
    /// A header name or value was refused (malformed, or one the host sets itself).
    InvalidHeader(String),
    /// The host refused the request: the destination is not in this plugin's network grants.
    Denied {
        /// `host:port` the request was for.
        destination: String,
    },
    /// The response body is larger than the request's limit.
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The request failed on the way (DNS, connection, TLS, protocol, timeout).
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::InvalidUrl(why) => write!(f, "invalid URL: {why}"),
            HttpError::InvalidHeader(why) => write!(f, "invalid header: {why}"),
            HttpError::Denied { destination } => {
                write!(f, "the host denied the request to {destination}: it is not in this plugin's network grants")
            }
            HttpError::TooLarge { limit } => write!(f, "the response body is larger than {limit} bytes"),
            HttpError::Failed(why) => write!(f, "request failed: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// `GET url`, with the default limits.
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::get(url)?.send()
}

impl Request {
    /// A request with `method` (`GET`, `POST`, ...) to an absolute `http(s)://` URL.
    pub fn new(method: &str, url: &str) -> Result<Self, HttpError> {
        let (scheme, rest) =
            url.split_once("://").ok_or_else(|| HttpError::InvalidUrl(format!("{url:?} has no scheme")))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(HttpError::InvalidUrl(format!("scheme {scheme:?} is not http or https")));
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() || authority.contains('@') {
            return Err(HttpError::InvalidUrl(format!("{url:?} needs a host (and no user info)")));
        }
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        Ok(Request {
            method: method.to_owned(),
            scheme,
            authority: authority.to_owned(),
            path,
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
            max_body: DEFAULT_MAX_BODY,
            redirects: DEFAULT_REDIRECTS,
        })
    }

    /// A `GET` request.
    pub fn get(url: &str) -> Result<Self, HttpError> {
        Request::new("GET", url)
    }

    /// Add a header.
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Set the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Give up on connecting, and on each wait for response bytes, after `timeout`. The host's
    /// per-call deadline applies in any case.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Refuse response bodies larger than `bytes` (default [`DEFAULT_MAX_BODY`]).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Follow at most `count` redirects (default [`DEFAULT_REDIRECTS`]; 0 returns the 3xx
    /// response itself). Each hop is a new request, checked by the host like the first.
    pub fn redirects(mut self, count: u8) -> Self {
        self.redirects = count;
        self
    }

    /// Send the request, following redirects, and read the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        let mut request = self;
        let mut left = request.redirects;
        loop {
            let response = request.exchange()?;
            match (left, request.redirect(&response)?) {
                (1.., Some(next)) => {
                    request = next;
                    left -= 1;
                }
                _ => return Ok(response),
            }
        }
    }

    /// The URL as it will be requested (its scheme and host as the parser wrote them), to
    /// compare with [`Response::url`].
    pub fn url(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority, self.path)
    }

    /// The request a redirect response asks for, if it is one (and not a downgrade from https
    /// to http).
    fn redirect(&self, response: &Response) -> Result<Option<Request>, HttpError> {
        if !matches!(response.status, 301 | 302 | 303 | 307 | 308) {
            return Ok(None);
        }
        let Some(location) = response.header("location") else { return Ok(None) };
        // A fragment is the client's business, never sent.
        let location = location.split('#').next().unwrap_or_default();
        let path = self.path.split('?').next().unwrap_or_default();
        let url = if has_scheme(location) {
            location.to_owned()
        } else if let Some(rest) = location.strip_prefix("//") {
            format!("{}://{rest}", self.scheme)
        } else if location.starts_with('/') {
            format!("{}://{}{location}", self.scheme, self.authority)
        } else if location.is_empty() || location.starts_with('?') {
            // The same path, with the new query (or none).
            format!("{}://{}{path}{location}", self.scheme, self.authority)
        } else {
            let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!("{}://{}{dir}{location}", self.scheme, self.authority)
        };
        // 303, and 301/302 after a POST, turn into a GET without a body, as browsers do.
        let (method, body) = match (response.status, self.method.to_ascii_uppercase().as_str()) {
            (303, "HEAD") => ("HEAD".to_owned(), Vec::new()),
            (303, _) | (301 | 302, "POST") => ("GET".to_owned(), Vec::new()),
            _ => (self.method.clone(), self.body.clone()),
        };
        let mut next = Request::new(&method, &url)?;
        // From https to http, what the request carries would go out in clear text: the
        // redirect is not followed, and the plugin gets the 3xx response to judge.
        if self.scheme == "https" && next.scheme == "http" {
            return Ok(None);
        }
        next.headers = self.headers.clone();
        // Credentials go only where they were meant to. Whatever header a plugin put its key
        // in, only headers that carry none follow a redirect to another host or scheme.
        if (next.scheme.as_str(), next.authority.to_ascii_lowercase())
            != (self.scheme.as_str(), self.authority.to_ascii_lowercase())
        {
            next.headers.retain(|(name, _)| CROSS_ORIGIN_HEADERS.contains(&name.as_str()));
        }
        next.body = body;
        next.timeout = self.timeout;
        next.max_body = self.max_body;
        Ok(Some(next))
    }

    /// One request and its response.
    fn exchange(&self) -> Result<Response, HttpError> {
        let headers = Fields::from_list(&self.headers).map_err(|e| HttpError::InvalidHeader(format!("{e:?}")))?;
        let request = OutgoingRequest::new(headers);
        let method = match self.method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_owned()),
        };
        let scheme = if self.scheme == "http" { Scheme::Http } else { Scheme::Https };
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{what} refused"));
        request.set_method(&method).map_err(|()| invalid("method"))?;
        request.set_scheme(Some(&scheme)).map_err(|()| invalid("scheme"))?;
        request.set_authority(Some(&self.authority)).map_err(|()| invalid("host"))?;
        request.set_path_with_query(Some(&self.path)).map_err(|()| invalid("path"))?;
        let options = self.timeout.map(|timeout| {
            let options = RequestOptions::new();
            let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
            // Hosts that do not support a timeout refuse it; the call deadline still holds.
            let _ = options.set_connect_timeout(Some(nanos));
            let _ = options.set_first_byte_timeout(Some(nanos));
            let _ = options.set_between_bytes_timeout(Some(nanos));
            options
        });
        let body = request.body().map_err(|()| HttpError::Failed("the request body was taken".into()))?;
        let destination = self.destination();
        let pending = outgoing_handler::handle(request, options).map_err(|e| failure(e, &destination))?;
        write_body(body, &self.body).map_err(|e| failure(e, &destination))?;
        pending.subscribe().block();
        let response = match pending.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(code))) => return Err(failure(code, &destination)),
            Some(Err(())) | None => return Err(HttpError::Failed("the response was lost".into())),
        };
        let status = response.status();
        let headers = response.headers().entries();
        let body = response.consume().map_err(|()| HttpError::Failed("the response body was taken".into()))?;
        let body = read_body(body, self.max_body)?;
        Ok(Response { url: self.url(), status, headers, body })
    }

    fn destination(&self) -> String {
        let has_port = match self.authority.rfind(']') {
            Some(bracket) => self.authority[bracket..].contains(':'),
            None => self.authority.contains(':'),
        };
        if has_port {
            self.authority.clone()
        } else {
            let port = if self.scheme == "http" { 80 } else { 443 };
            format!("{}:{port}", self.authority)
        }
    }
}

impl Response {
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first value of header `name` (case-insensitive), as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

fn failure(code: ErrorCode, destination: &str) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied => HttpError::Denied { destination: destination.to_owned() },
        other => HttpError::Failed(format!("{other}")),
    }
}

fn write_body(body: OutgoingBody, bytes: &[u8]) -> Result<(), ErrorCode> {
    if !bytes.is_empty() {
        let stream = body.write().map_err(|()| ErrorCode::InternalError(Some("no body stream".into())))?;
        // `blocking-write-and-flush` takes at most 4096 bytes at a time.
        for chunk in bytes.chunks(4096) {
            stream.blocking_write_and_flush(chunk).map_err(|e| ErrorCode::InternalError(Some(stream_error(e))))?;
        }
    }
    OutgoingBody::finish(body, None)
}

fn read_body(body: IncomingBody, limit: usize) -> Result<Vec<u8>, HttpError> {
    let stream = body.stream().map_err(|()| HttpError::Failed("the response stream was taken".into()))?;
    let mut out = Vec::new();
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => {
                if out.len() + chunk.len() > limit {
                    return Err(HttpError::TooLarge { limit });
                }
                out.extend_from_slice(&chunk);
            }
            Err(StreamError::Closed) => break,
            Err(e) => return Err(HttpError::Failed(stream_error(e))),
        }
    }
    drop(stream);
    drop(IncomingBody::finish(body));
    Ok(out)
}

fn stream_error(error: StreamError) -> String {
    match error {
        StreamError::Closed => "stream closed".into(),
        StreamError::LastOperationFailed(e) => e.to_debug_string(),
    }
}

/// The headers a redirect to another host or scheme keeps: the ones that describe the
/// request and the client (the Fetch standard's safelisted ones, and `user-agent`), never a
/// credential.
const CROSS_ORIGIN_HEADERS: [&str; 6] =
    ["accept", "accept-language", "content-language", "content-type", "user-agent", "accept-encoding"];

/// Whether a URL reference starts with a scheme (`https:`), as opposed to a path that merely
/// holds `://` in its query.
fn has_scheme(reference: &str) -> bool {
    let Some((scheme, _)) = reference.split_once(':') else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_parts() {
        let r = Request::get("https://Example.com:8443/a/b?q=1#frag").unwrap();
        assert_eq!(
            (r.scheme.as_str(), r.authority.as_str(), r.path.as_str()),
            ("https", "Example.com:8443", "/a/b?q=1")
        );
        assert_eq!(r.destination(), "Example.com:8443");
        let r = Request::get("http://example.com?x").unwrap();
        assert_eq!((r.path.as_str(), r.destination().as_str()), ("/?x", "example.com:80"));
        assert_eq!(Request::get("https://[::1]/").unwrap().destination(), "[::1]:443");
        assert!(Request::get("ftp://example.com/").is_err());
        assert!(Request::get("example.com").is_err());
        assert!(Request::get("https://user@example.com/").is_err());
        assert!(Request::get("https:///path").is_err());
    }

    fn redirected(from: &str, status: u16, location: &str) -> Request {
        let response = Response {
            url: from.into(),
            status,
            headers: vec![("location".into(), location.as_bytes().to_vec())],
            body: Vec::new(),
        };
        Request::new("POST", from).unwrap().body("x").redirect(&response).unwrap().unwrap()
    }

    #[test]
    fn redirects_resolve_like_browsers() {
        let from = "https://a.example/docs/page?x=1";
        assert_eq!(redirected(from, 302, "https://b.example/y").url(), "https://b.example/y");
        assert_eq!(redirected(from, 302, "//c.example/z").url(), "https://c.example/z");
        assert_eq!(redirected(from, 301, "/root").url(), "https://a.example/root");
        assert_eq!(redirected(from, 302, "other?q").url(), "https://a.example/docs/other?q");
        assert_eq!(redirected(from, 302, "?q=2").url(), "https://a.example/docs/page?q=2");
        assert_eq!(redirected(from, 302, "/login?next=https://a/").url(), "https://a.example/login?next=https://a/");
        assert_eq!(redirected(from, 302, "next#part").url(), "https://a.example/docs/next");
        let kept = redirected(from, 307, "/again");
        assert_eq!((kept.method.as_str(), kept.body.as_slice()), ("POST", &b"x"[..]));
        let get = redirected(from, 303, "/done");
        assert_eq!((get.method.as_str(), get.body.len()), ("GET", 0));
        let secret = Request::get(from).unwrap().header("Authorization", "Bearer t").header("accept", "*/*");
        let response = Response {
            url: from.into(),
            status: 302,
            headers: vec![("location".into(), b"/same".to_vec())],
            body: Vec::new(),
        };
        assert_eq!(secret.redirect(&response).unwrap().unwrap().headers.len(), 2);
        let response = Response {
            url: from.into(),
            status: 302,
            headers: vec![("location".into(), b"https://evil.example/".to_vec())],
            body: Vec::new(),
        };
        assert_eq!(secret.redirect(&response).unwrap().unwrap().headers, vec![("accept".to_owned(), b"*/*".to_vec())]);
        // A key in a header of the plugin's own naming stays home too.
        let keyed = Request::get(from).unwrap().header("X-Api-Key", "k").header("user-agent", "ua");
        let kept = keyed.redirect(&response).unwrap().unwrap().headers;
        assert_eq!(kept, vec![("user-agent".to_owned(), b"ua".to_vec())]);
        // From https to http: not followed, the 3xx is the answer.
        let downgrade = Response {
            url: from.into(),
            status: 301,
            headers: vec![("location".into(), b"http://a.example/docs/page".to_vec())],
            body: Vec::new(),
        };
        assert!(keyed.redirect(&downgrade).unwrap().is_none());
        let plain = Response { url: from.into(), status: 200, headers: Vec::new(), body: Vec::new() };
        assert!(Request::get(from).unwrap().redirect(&plain).unwrap().is_none());
    }
}
