//! RFC 6570 URI templates, the subset MCP servers use: literal text with `{name}` (simple
//! string expansion, stops at `/`, `?` and `#`) and `{+name}` (reserved expansion, may contain
//! `/`) variables. Used by the Capsule host to route a URI to the plugin whose template
//! matches it, and by the SDK to dispatch among a plugin's own templates.

use std::collections::BTreeMap;

/// The variables matched from a URI, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UriVariables(BTreeMap<String, String>);

impl UriVariables {
    /// The value of variable `name`, percent-decoded.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// All variables, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Var { name: String, reserved: bool },
}

/// A parsed URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
}

impl UriTemplate {
    /// Parse a template; text that is not a well-formed `{...}` expression is literal.
    pub fn parse(source: &str) -> Self {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else { break };
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let expr = &rest[open + 1..open + close];
            let (reserved, name) = match expr.strip_prefix('+') {
                Some(name) => (true, name),
                None => (false, expr),
            };
            parts.push(Part::Var { name: name.to_owned(), reserved });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        UriTemplate { source: source.to_owned(), parts }
    }

    /// The template text.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Match a URI against the template, returning its variables.
    pub fn matches(&self, uri: &str) -> Option<UriVariables> {
        let mut vars = BTreeMap::new();
        if match_parts(&self.parts, uri, &mut vars) { Some(UriVariables(vars)) } else { None }
    }
}

fn match_parts(parts: &[Part], uri: &str, vars: &mut BTreeMap<String, String>) -> bool {
    match parts.split_first() {
        None => uri.is_empty(),
        Some((Part::Literal(lit), rest)) => {
            uri.strip_prefix(lit.as_str()).is_some_and(|tail| match_parts(rest, tail, vars))
        }
        Some((Part::Var { name, reserved }, rest)) => {
            // Try every split point, shortest value first; a simple variable stops at '/'.
            for end in 1..=uri.len() {
                if !uri.is_char_boundary(end) {
                    continue;
                }
                let value = &uri[..end];
                if !reserved && value.contains(['/', '?', '#']) {
                    break;
                }
                if match_parts(rest, &uri[end..], vars) {
                    vars.insert(name.clone(), percent_decode(value));
                    return true;
                }
            }
            false
        }
    }
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
            .flatten();
        if let Some(b) = escaped {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_simple_and_reserved_variables() {
        let t = UriTemplate::parse("test://template/{id}/data");
        assert_eq!(t.matches("test://template/123/data").unwrap().get("id"), Some("123"));
        assert!(t.matches("test://template/1/2/data").is_none());
        assert!(t.matches("test://template//data").is_none());
        let r = UriTemplate::parse("file:///{+path}");
        assert_eq!(r.matches("file:///a/b%20c.txt").unwrap().get("path"), Some("a/b c.txt"));
    }
}
