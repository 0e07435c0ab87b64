//! Reading an HTTP answer Capsule fetched (an authorization server's document, a `/metrics`
//! page) no further than a limit: a server that sends no length, or never ends, cannot make
//! Capsule hold more.

/// The body of `response`, or `None` once it passes `limit` bytes. Read by chunks, so that
/// nothing past the limit is held.
pub(crate) async fn body(response: &mut reqwest::Response, limit: usize) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}
