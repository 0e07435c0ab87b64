//! RFC 6570 URI templates, levels 1 and 2, the subset MCP servers use: literal text with
//! `{var}` (simple string expansion: a non-empty value without `/`, `?` or `#`), `{+var}`
//! (reserved expansion: any non-empty value) and `{#var}` (fragment expansion: `#` followed by
//! any non-empty value). Used by the Capsule host to route a URI to the plugin whose template
//! matches it, and by the SDK to dispatch among a plugin's own templates.
//!
//! [`UriTemplate::parse`] refuses what it cannot match faithfully: level 3-4 operators, lists of
//! variables, modifiers, malformed braces and names, repeated names, and templates over
//! [`MAX_TEMPLATE_LEN`] bytes or [`MAX_VARIABLES`] expressions. [`UriTemplate::matches`] runs in
//! time linear in the URI length (times the number of variables), so hostile URIs cannot stall
//! the host, and returns the leftmost-shortest match: each variable, from left to right, takes the
//! shortest value that lets the rest of the template match.

use std::collections::BTreeMap;
use std::fmt;

/// The longest template accepted, in bytes.
pub const MAX_TEMPLATE_LEN: usize = 1024;

/// The most expressions (variables) a template may hold.
pub const MAX_VARIABLES: usize = 32;

const SUPPORTED: &str = "supported are `{var}`, `{+var}` and `{#var}` (RFC 6570 levels 1-2)";

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

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TemplateErrorKind {
    /// The template is longer than [`MAX_TEMPLATE_LEN`] bytes.
    TooLong { len: usize },
    /// The template has more than [`MAX_VARIABLES`] expressions.
    TooManyVariables,
    /// A `{` with no `}` after it.
    Unclosed { expression: String },
    /// A `}` outside any expression.
    StrayBrace { offset: usize },
    /// `{}`, `{+}` or `{#}`.
    Empty { expression: String },
    /// A level 3-4 operator such as `{/var}` or `{?var}`.
    UnsupportedOperator { expression: String, operator: char },
    /// Several variables in one expression, like `{a,b}`.
    MultipleVariables { expression: String },
    /// A prefix (`{var:3}`) or explode (`{var*}`) modifier.
    Modifier { expression: String },
    /// A variable name outside the RFC 6570 `varname` grammar.
    InvalidName { expression: String },
    /// A variable named twice.
    DuplicateVariable { expression: String },
}

/// A template refused by [`UriTemplate::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    template: String,
    kind: TemplateErrorKind,
}

impl TemplateError {
    /// The refused template (its beginning only, if it was too long).
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Why it was refused.
    pub fn kind(&self) -> &TemplateErrorKind {
        &self.kind
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TemplateErrorKind::*;
        let t = &self.template;
        match &self.kind {
            TooLong { len } => {
                write!(f, "URI template `{t}...` is {len} bytes long; at most {MAX_TEMPLATE_LEN} are allowed")
            }
            TooManyVariables => write!(
                f,
                "URI template `{t}` has more than {MAX_VARIABLES} expressions; at most {MAX_VARIABLES} are allowed"
            ),
            Unclosed { expression } => {
                write!(f, "URI template `{t}`: expression `{expression}` has no closing `}}`; {SUPPORTED}")
            }
            StrayBrace { offset } => write!(
                f,
                "URI template `{t}`: `}}` at byte {offset} closes no expression; write a literal `}}` as `%7D`"
            ),
            Empty { expression } => {
                write!(f, "URI template `{t}`: expression `{expression}` names no variable; {SUPPORTED}")
            }
            UnsupportedOperator { expression, operator } => write!(
                f,
                "URI template `{t}`: expression `{expression}` uses operator `{operator}` (RFC 6570 level 3-4), \
                 which is not supported; {SUPPORTED}"
            ),
            MultipleVariables { expression } => write!(
                f,
                "URI template `{t}`: expression `{expression}` lists several variables; \
                 only one per expression is supported; {SUPPORTED}"
            ),
            Modifier { expression } => write!(
                f,
                "URI template `{t}`: expression `{expression}` uses a `:n` prefix or `*` explode modifier \
                 (RFC 6570 level 4), which is not supported; {SUPPORTED}"
            ),
            InvalidName { expression } => write!(
                f,
                "URI template `{t}`: expression `{expression}` has an invalid variable name; names are made of \
                 ASCII letters, digits, `_` and `%XX` escapes, with single `.`s between them"
            ),
            DuplicateVariable { expression } => write!(
                f,
                "URI template `{t}`: expression `{expression}` repeats a variable; each variable may appear only once"
            ),
        }
    }
}

impl std::error::Error for TemplateError {}

/// A variable and the literal text that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    name: String,
    reserved: bool,
    literal: String,
}

/// A parsed URI template: a leading literal, then variables each followed by a (maybe empty)
/// literal. `{#var}` is stored as a literal `#` before a reserved variable, which it means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    source: String,
    head: String,
    segments: Vec<Segment>,
}

impl UriTemplate {
    /// Parse a template, refusing anything beyond levels 1-2 or not well-formed.
    pub fn parse(source: &str) -> Result<Self, TemplateError> {
        let fail = |kind| Err(TemplateError { template: source.to_owned(), kind });
        if source.len() > MAX_TEMPLATE_LEN {
            let cut = source.floor_char_boundary(64);
            let kind = TemplateErrorKind::TooLong { len: source.len() };
            return Err(TemplateError { template: source[..cut].to_owned(), kind });
        }
        let mut head = String::new();
        let mut segments: Vec<Segment> = Vec::new();
        let mut literal = String::new();
        let mut offset = 0;
        while let Some(found) = source[offset..].find(['{', '}']) {
            let open = offset + found;
            literal.push_str(&source[offset..open]);
            if source[open..].starts_with('}') {
                return fail(TemplateErrorKind::StrayBrace { offset: open });
            }
            let Some(len) = source[open..].find('}') else {
                return fail(TemplateErrorKind::Unclosed { expression: source[open..].to_owned() });
            };
            let expression = source[open..=open + len].to_owned();
            let body = &source[open + 1..open + len];
            offset = open + len + 1;
            let (reserved, name) = match body.chars().next() {
                Some('+') => (true, &body[1..]),
                Some('#') => {
                    literal.push('#');
                    (true, &body[1..])
                }
                Some(operator @ ('/' | ';' | '?' | '&' | '.' | '=' | ',' | '!' | '@' | '|')) => {
                    return fail(TemplateErrorKind::UnsupportedOperator { expression, operator });
                }
                _ => (false, body),
            };
            if name.is_empty() {
                return fail(TemplateErrorKind::Empty { expression });
            }
            if name.contains(',') {
                return fail(TemplateErrorKind::MultipleVariables { expression });
            }
            if name.contains(':') || name.ends_with('*') {
                return fail(TemplateErrorKind::Modifier { expression });
            }
            if !is_varname(name) {
                return fail(TemplateErrorKind::InvalidName { expression });
            }
            if segments.iter().any(|s| s.name == name) {
                return fail(TemplateErrorKind::DuplicateVariable { expression });
            }
            if segments.len() == MAX_VARIABLES {
                return fail(TemplateErrorKind::TooManyVariables);
            }
            *segments.last_mut().map_or(&mut head, |s| &mut s.literal) = std::mem::take(&mut literal);
            segments.push(Segment { name: name.to_owned(), reserved, literal: String::new() });
        }
        literal.push_str(&source[offset..]);
        *segments.last_mut().map_or(&mut head, |s| &mut s.literal) = literal;
        Ok(UriTemplate { source: source.to_owned(), head, segments })
    }

    /// The template text.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The variable names, in template order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().map(|s| s.name.as_str())
    }

    /// Match a URI against the template, returning its percent-decoded variables.
    ///
    /// Each variable, from left to right, gets the shortest value that lets the rest match.
    /// Runs in O(variables × URI length) time, without backtracking.
    pub fn matches(&self, uri: &str) -> Option<UriVariables> {
        let Some(last) = self.segments.last() else {
            return (uri == self.head).then(UriVariables::default);
        };
        if !uri.starts_with(&self.head) || !uri.ends_with(&last.literal) {
            return None;
        }
        // A simple variable's value cannot contain these.
        let stops = self.segments.iter().any(|s| !s.reserved).then(|| byte_positions(uri.as_bytes(), b"/?#"));
        // Right to left: `rest` holds the positions from which the remainder of the template
        // matches; `value_ends[i]` the positions where variable i's value may end.
        let mut rest = Positions(vec![0; uri.len() / 64 + 1]);
        rest.0[uri.len() / 64] = 1 << (uri.len() % 64);
        let mut value_ends = Vec::with_capacity(self.segments.len());
        for segment in self.segments.iter().rev() {
            let ends = match segment.literal.as_bytes() {
                [] => char_boundaries(uri, &rest),
                literal => literal_starts(uri.as_bytes(), literal, &rest),
            };
            rest = value_starts(&ends, stops.as_ref().filter(|_| !segment.reserved));
            value_ends.push(ends);
        }
        value_ends.reverse();
        let mut start = self.head.len();
        if !rest.contains(start) {
            return None;
        }
        // Left to right: the first feasible end is the shortest value, and since the start is
        // feasible it is not beyond a simple variable's stop.
        let mut vars = BTreeMap::new();
        for (segment, ends) in self.segments.iter().zip(&value_ends) {
            let end = ends.first_from(start + 1)?;
            vars.insert(segment.name.clone(), percent_decode(&uri[start..end]));
            start = end + segment.literal.len();
        }
        Some(UriVariables(vars))
    }
}

/// RFC 6570 `varname`: varchar *( ["."] varchar ), varchar = ALPHA / DIGIT / "_" / pct-encoded.
fn is_varname(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut i = 0;
    let mut after_varchar = false;
    while i < bytes.len() {
        match bytes[i] {
            b'.' if after_varchar && i + 1 < bytes.len() => {
                after_varchar = false;
                i += 1;
            }
            b'%' if bytes.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) => {
                after_varchar = true;
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b == b'_' => {
                after_varchar = true;
                i += 1;
            }
            _ => return false,
        }
    }
    after_varchar
}

/// A set of URI byte positions `0..=len`, one bit each. Sets are built a 64-bit word at a time
/// where possible, which keeps matching fast even in unoptimized builds.
struct Positions(Vec<u64>);

impl Positions {
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }

    /// The smallest position `>= i` in the set.
    fn first_from(&self, i: usize) -> Option<usize> {
        let mut word = i / 64;
        let mut bits = self.0.get(word)? & (u64::MAX << (i % 64));
        while bits == 0 {
            word += 1;
            bits = *self.0.get(word)?;
        }
        Some(word * 64 + bits.trailing_zeros() as usize)
    }
}

/// The positions holding one of `targets`, found eight bytes at a time (SWAR), since these
/// scans dominate matching.
fn byte_positions(uri: &[u8], targets: &[u8]) -> Positions {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    let mut positions = Positions(vec![0; uri.len() / 64 + 1]);
    for (c, chunk) in uri.chunks(8).enumerate() {
        let mut lane = [0; 8];
        lane[..chunk.len()].copy_from_slice(chunk);
        let lane = u64::from_le_bytes(lane);
        let mut found = 0;
        for &target in targets {
            let x = lane ^ u64::from_le_bytes([target; 8]);
            // Bit 7 of each byte of `x` that is zero, i.e. of each byte equal to `target`.
            found |= !(((x & LOW7) + LOW7) | x | LOW7);
        }
        // Gather bit 7 of byte j into bit j, and drop the padding of a short last chunk.
        let bits = (found >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56 & !(u64::MAX << chunk.len());
        positions.0[c / 8] |= bits << (c % 8 * 8);
    }
    positions
}

/// The char boundaries among `rest`: where a value may end when the next variable follows
/// directly. (A non-empty literal is valid UTF-8, so it can only occur at a char boundary.)
fn char_boundaries(uri: &str, rest: &Positions) -> Positions {
    let bytes = uri.as_bytes();
    let words = rest.0.iter().enumerate().map(|(w, &word)| {
        let chunk = &bytes[w * 64..bytes.len().min(w * 64 + 64)];
        if chunk.is_ascii() {
            return word;
        }
        let continuations =
            chunk.iter().enumerate().filter(|(_, b)| **b & 0xC0 == 0x80).fold(0, |m, (i, _)| m | 1 << i);
        word & !continuations
    });
    Positions(words.collect())
}

/// The positions where `literal` occurs in `uri` with `rest` matching right after it: where
/// the preceding variable's value may end.
fn literal_starts(uri: &[u8], literal: &[u8], rest: &Positions) -> Positions {
    let occurrences = match literal {
        [byte] => byte_positions(uri, &[*byte]),
        _ => occurrences(uri, literal),
    };
    let (skip, shift) = (literal.len() / 64, literal.len() % 64);
    let after = |w: usize| rest.0.get(w).copied().unwrap_or(0);
    let words = occurrences.0.iter().enumerate().map(|(w, &found)| {
        let high = if shift == 0 { 0 } else { after(w + skip + 1) << (64 - shift) };
        found & (after(w + skip) >> shift | high)
    });
    Positions(words.collect())
}

/// The positions where `literal` starts in `uri`, overlapping ones included, found by KMP in
/// linear time.
fn occurrences(uri: &[u8], literal: &[u8]) -> Positions {
    // failure[j]: length of the longest proper border of literal[..=j].
    let mut failure = vec![0; literal.len()];
    let mut k = 0;
    for j in 1..literal.len() {
        while k > 0 && literal[j] != literal[k] {
            k = failure[k - 1];
        }
        if literal[j] == literal[k] {
            k += 1;
        }
        failure[j] = k;
    }
    // An index loop: iterator adapters are slow in unoptimized builds.
    let mut starts = Positions(vec![0; uri.len() / 64 + 1]);
    let (mut i, mut k) = (0, 0);
    while i < uri.len() {
        while k > 0 && uri[i] != literal[k] {
            k = failure[k - 1];
        }
        if uri[i] == literal[k] {
            k += 1;
        }
        i += 1;
        if k == literal.len() {
            let start = i - k;
            starts.0[start / 64] |= 1 << (start % 64);
            k = failure[k - 1];
        }
    }
    starts
}

/// The positions where a variable's value may start: some end lies strictly after, with no
/// stop (for a simple variable) from the start up to that end.
fn value_starts(ends: &Positions, stops: Option<&Positions>) -> Positions {
    let mut starts = Positions(vec![0; ends.0.len()]);
    // Bit 0 of `ends | starts` in the word after the current one.
    let mut carry = 0;
    for w in (0..ends.0.len()).rev() {
        // starts[p] = allowed[p] & (ends[p + 1] | starts[p + 1]): a fill toward lower
        // positions through allowed ones, done for the whole word in six Kogge-Stone steps.
        let allowed = stops.map_or(u64::MAX, |s| !s.0[w]);
        let mut filled = allowed & (ends.0[w] >> 1 | carry << 63);
        let mut through = allowed;
        for shift in [1, 2, 4, 8, 16, 32] {
            filled |= through & filled >> shift;
            through &= through >> shift;
        }
        starts.0[w] = filled;
        carry = (ends.0[w] | filled) & 1;
    }
    starts
}

fn percent_decode(value: &str) -> String {
    // Two hex digits exactly: `u8::from_str_radix` would also take a sign (`%+1`).
    let digit = |b: Option<&u8>| b.and_then(|&b| char::from(b).to_digit(16));
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (digit(bytes.get(i + 1)), digit(bytes.get(i + 2)))
        {
            out.push((high * 16 + low) as u8);
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
    use std::time::{Duration, Instant};

    fn parse(source: &str) -> UriTemplate {
        UriTemplate::parse(source).unwrap()
    }

    fn refusal(source: &str) -> TemplateError {
        UriTemplate::parse(source).unwrap_err()
    }

    #[test]
    fn matches_simple_and_reserved_variables() {
        let t = parse("test://template/{id}/data");
        assert_eq!(t.matches("test://template/123/data").unwrap().get("id"), Some("123"));
        assert!(t.matches("test://template/1/2/data").is_none());
        assert!(t.matches("test://template//data").is_none());
        let r = parse("file:///{+path}");
        assert_eq!(r.matches("file:///a/b%20c.txt").unwrap().get("path"), Some("a/b c.txt"));
    }

    #[test]
    fn simple_variables_stop_at_slash_query_and_fragment() {
        let t = parse("x://{a}");
        assert_eq!(t.matches("x://abc").unwrap().get("a"), Some("abc"));
        for uri in ["x://a/b", "x://a?b", "x://a#b", "x://", "y://a"] {
            assert!(t.matches(uri).is_none(), "{uri}");
        }
    }

    #[test]
    fn fragment_expansion_is_hash_then_reserved_value() {
        let t = parse("doc://{name}{#section}");
        let vars = t.matches("doc://guide#a/b?c#d").unwrap();
        assert_eq!(vars.get("name"), Some("guide"));
        assert_eq!(vars.get("section"), Some("a/b?c#d"));
        assert!(t.matches("doc://guide").is_none());
        assert!(t.matches("doc://guide#").is_none());
        assert_eq!(t.variables().collect::<Vec<_>>(), ["name", "section"]);
        assert_eq!(t.as_str(), "doc://{name}{#section}");
    }

    #[test]
    fn adjacent_variables_are_lazy_left_to_right() {
        let t = parse("x://{a}{b}");
        let vars = t.matches("x://abc").unwrap();
        assert_eq!((vars.get("a"), vars.get("b")), (Some("a"), Some("bc")));
        assert!(t.matches("x://a").is_none());
        let t = parse("x://{+a}{b}");
        let vars = t.matches("x://p/q/r").unwrap();
        assert_eq!((vars.get("a"), vars.get("b")), (Some("p/q/"), Some("r")));
        let t = parse("x://{+a}/{+b}");
        let vars = t.matches("x://p/q/r").unwrap();
        assert_eq!((vars.get("a"), vars.get("b")), (Some("p"), Some("q/r")));
    }

    #[test]
    fn values_split_on_char_boundaries() {
        let t = parse("x://{a}{b}");
        let vars = t.matches("x://éü").unwrap();
        assert_eq!((vars.get("a"), vars.get("b")), (Some("é"), Some("ü")));
        assert!(t.matches("x://é").is_none());
        let t = parse("x://{+a}é{b}");
        let vars = t.matches("x://ééé").unwrap();
        assert_eq!((vars.get("a"), vars.get("b")), (Some("é"), Some("é")));
    }

    #[test]
    fn values_are_percent_decoded() {
        let t = parse("x://{a}/{+b}");
        let vars = t.matches("x://%C3%A9t%C3%A9/a%2Fb%20c%").unwrap();
        assert_eq!((vars.get("a"), vars.get("b")), (Some("été"), Some("a/b c%")));
        // Only two hex digits make an escape; a sign is not a digit.
        let vars = t.matches("x://%+1/%4").unwrap();
        assert_eq!((vars.get("a"), vars.get("b")), (Some("%+1"), Some("%4")));
    }

    #[test]
    fn empty_values_do_not_match() {
        for (template, uri) in [("x://{a}/", "x:///"), ("x://{+a}/", "x:///"), ("x://{#a}", "x://#"), ("{a}", "")] {
            assert!(parse(template).matches(uri).is_none(), "{template} {uri}");
        }
        let vars = parse("x://{+a}/").matches("x:////").unwrap();
        assert_eq!(vars.get("a"), Some("/"));
    }

    #[test]
    fn templates_without_variables_match_exactly() {
        let t = parse("x://fixed");
        assert_eq!(t.matches("x://fixed"), Some(UriVariables::default()));
        assert!(t.matches("x://fixed/").is_none());
        assert_eq!(parse("").matches(""), Some(UriVariables::default()));
    }

    #[test]
    fn accepts_rfc_6570_varnames() {
        let t = parse("x://{a.b}/{_1}/{%41x}/{+Z9.y_.w}");
        assert_eq!(t.variables().collect::<Vec<_>>(), ["a.b", "_1", "%41x", "Z9.y_.w"]);
        let many: String = (0..MAX_VARIABLES).map(|i| format!("{{v{i}}}/")).collect();
        assert_eq!(parse(&many).variables().count(), MAX_VARIABLES);
    }

    /// Each refusal names the template and the offending expression, and says what is allowed.
    #[test]
    fn refuses_unsupported_or_malformed_templates() {
        use TemplateErrorKind::*;
        let cases: &[(&str, TemplateErrorKind, &str)] = &[
            ("x://{/p}", UnsupportedOperator { expression: "{/p}".into(), operator: '/' }, "operator `/`"),
            ("x://{;p}", UnsupportedOperator { expression: "{;p}".into(), operator: ';' }, "level 3-4"),
            ("x://{?q}", UnsupportedOperator { expression: "{?q}".into(), operator: '?' }, "`{+var}`"),
            ("x://{&q}", UnsupportedOperator { expression: "{&q}".into(), operator: '&' }, "`{#var}`"),
            ("x://{.e}", UnsupportedOperator { expression: "{.e}".into(), operator: '.' }, "`{var}`"),
            ("x://{=e}", UnsupportedOperator { expression: "{=e}".into(), operator: '=' }, "not supported"),
            ("x://{,e}", UnsupportedOperator { expression: "{,e}".into(), operator: ',' }, "not supported"),
            ("x://{!e}", UnsupportedOperator { expression: "{!e}".into(), operator: '!' }, "not supported"),
            ("x://{@e}", UnsupportedOperator { expression: "{@e}".into(), operator: '@' }, "not supported"),
            ("x://{|e}", UnsupportedOperator { expression: "{|e}".into(), operator: '|' }, "not supported"),
            ("x://{a,b}", MultipleVariables { expression: "{a,b}".into() }, "several variables"),
            ("x://{+a,b}", MultipleVariables { expression: "{+a,b}".into() }, "one per expression"),
            ("x://{a*}", Modifier { expression: "{a*}".into() }, "explode"),
            ("x://{a:3}", Modifier { expression: "{a:3}".into() }, "prefix"),
            ("x://{}", Empty { expression: "{}".into() }, "names no variable"),
            ("x://{+}", Empty { expression: "{+}".into() }, "names no variable"),
            ("x://{#}", Empty { expression: "{#}".into() }, "names no variable"),
            ("x://{a", Unclosed { expression: "{a".into() }, "no closing `}`"),
            ("x://{a}/{b", Unclosed { expression: "{b".into() }, "no closing `}`"),
            ("x://a}", StrayBrace { offset: 5 }, "byte 5 closes no expression"),
            ("x://{a}}", StrayBrace { offset: 7 }, "%7D"),
            ("x://{a-b}", InvalidName { expression: "{a-b}".into() }, "invalid variable name"),
            ("x://{a..b}", InvalidName { expression: "{a..b}".into() }, "single `.`s"),
            ("x://{.}", UnsupportedOperator { expression: "{.}".into(), operator: '.' }, "operator `.`"),
            ("x://{a.}", InvalidName { expression: "{a.}".into() }, "letters, digits"),
            ("x://{%4}", InvalidName { expression: "{%4}".into() }, "`%XX` escapes"),
            ("x://{%zz}", InvalidName { expression: "{%zz}".into() }, "`%XX` escapes"),
            ("x://{é}", InvalidName { expression: "{é}".into() }, "ASCII letters"),
            ("x://{ a}", InvalidName { expression: "{ a}".into() }, "invalid variable name"),
            ("x://{a{b}", InvalidName { expression: "{a{b}".into() }, "invalid variable name"),
            ("x://{a}/{+a}", DuplicateVariable { expression: "{+a}".into() }, "only once"),
            ("x://{a}{#a}", DuplicateVariable { expression: "{#a}".into() }, "repeats a variable"),
        ];
        for (source, kind, hint) in cases {
            let error = refusal(source);
            assert_eq!(error.kind(), kind, "{source}");
            assert_eq!(error.template(), *source);
            let message = error.to_string();
            assert!(message.contains(&format!("URI template `{source}`")), "{message}");
            assert!(message.contains(hint), "{source}: {message}");
            if let Some(expression) = message.split("expression `").nth(1) {
                assert!(source.contains(expression.split('`').next().unwrap()), "{message}");
            }
        }
    }

    #[test]
    fn refuses_oversized_templates() {
        let long = format!("x://{}", "a".repeat(MAX_TEMPLATE_LEN));
        let error = refusal(&long);
        assert_eq!(error.kind(), &TemplateErrorKind::TooLong { len: MAX_TEMPLATE_LEN + 4 });
        let message = error.to_string();
        assert!(message.contains("x://aaa") && message.contains("at most 1024"), "{message}");
        assert!(message.len() < 200, "the message quotes only the beginning: {message}");
        assert!(UriTemplate::parse(&long[..MAX_TEMPLATE_LEN]).is_ok());

        let many: String = (0..=MAX_VARIABLES).map(|i| format!("{{v{i}}}/")).collect();
        let error = refusal(&many);
        assert_eq!(error.kind(), &TemplateErrorKind::TooManyVariables);
        assert!(error.to_string().contains("at most 32"), "{error}");
    }

    #[derive(Debug)]
    enum Part {
        Literal(String),
        Var { name: String, reserved: bool },
    }

    /// The former backtracking matcher, kept as the reference for the semantics.
    fn backtrack(parts: &[Part], uri: &str, vars: &mut BTreeMap<String, String>) -> bool {
        match parts.split_first() {
            None => uri.is_empty(),
            Some((Part::Literal(lit), rest)) => {
                uri.strip_prefix(lit.as_str()).is_some_and(|tail| backtrack(rest, tail, vars))
            }
            Some((Part::Var { name, reserved }, rest)) => {
                for end in 1..=uri.len() {
                    if !uri.is_char_boundary(end) {
                        continue;
                    }
                    let value = &uri[..end];
                    if !reserved && value.contains(['/', '?', '#']) {
                        break;
                    }
                    if backtrack(rest, &uri[end..], vars) {
                        vars.insert(name.clone(), percent_decode(value));
                        return true;
                    }
                }
                false
            }
        }
    }

    fn reference_match(template: &UriTemplate, uri: &str) -> Option<UriVariables> {
        let mut parts = vec![Part::Literal(template.head.clone())];
        for s in &template.segments {
            parts.push(Part::Var { name: s.name.clone(), reserved: s.reserved });
            parts.push(Part::Literal(s.literal.clone()));
        }
        let mut vars = BTreeMap::new();
        backtrack(&parts, uri, &mut vars).then_some(UriVariables(vars))
    }

    struct XorShift(u64);

    impl XorShift {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        /// `min..=max` pieces of URI-ish text, chosen to exercise literals, stops and escapes.
        fn tokens(&mut self, min: usize, max: usize) -> String {
            const TOKENS: &[&str] = &["a", "b", "ab", "/", "?", "#", "é", "%41", "%"];
            (0..min + self.below(max - min + 1)).map(|_| TOKENS[self.below(TOKENS.len())]).collect()
        }
    }

    /// Many small pseudo-random templates and URIs, some long enough to span several bit words.
    #[test]
    fn agrees_with_backtracking_reference() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let (mut matched, mut cases) = (0, 0);
        for round in 0..4000 {
            let mut source = String::new();
            for v in 0..rng.below(6) {
                source += &rng.tokens(0, 1);
                source += ["{", "{+", "{#"][rng.below(3)];
                source += &format!("v{v}}}");
            }
            source += &rng.tokens(0, 1);
            let template = parse(&source);
            // URIs both expanded from the template (to get matches) and at random (mostly misses).
            let value_len = if round % 8 == 0 { 30 } else { 3 };
            for _ in 0..8 {
                let mut expanded = String::new();
                for piece in source.split_inclusive(['{', '}']) {
                    match piece.strip_suffix('}') {
                        Some(expression) => {
                            expanded += if expression.starts_with('#') { "#" } else { "" };
                            expanded += &rng.tokens(1, value_len);
                        }
                        None => expanded += piece.trim_end_matches('{'),
                    }
                }
                let random = rng.tokens(0, 4 * value_len);
                for uri in [expanded, random] {
                    let expected = reference_match(&template, &uri);
                    matched += usize::from(expected.is_some());
                    cases += 1;
                    assert_eq!(template.matches(&uri), expected, "template {source:?}, uri {uri:?}");
                }
            }
        }
        eprintln!("{matched} of {cases} URIs matched");
        assert!(matched > cases / 10 && matched < cases * 9 / 10, "{matched} of {cases} matched");
    }

    /// Literals longer than a bit word, at every offset within a word.
    #[test]
    fn long_literals_agree_with_backtracking_reference() {
        let literal = format!("{}c", "ab".repeat(70));
        let template = parse(&format!("x://{{a}}{literal}{{+b}}{literal}{{c}}"));
        for pad in 1..=130 {
            let a = "z".repeat(pad);
            let uri = format!("x://{a}{literal}{literal}/{literal}{literal}z");
            let vars = template.matches(&uri).unwrap();
            assert_eq!(vars.get("a"), Some(a.as_str()));
            assert_eq!(vars.get("b").map(str::len), Some(literal.len() + 1));
            assert_eq!(Some(vars), reference_match(&template, &uri), "{uri}");
            assert_eq!(template.matches(&format!("{uri}/")), None);
        }
    }

    /// A guard against quadratic or exponential matching, not a benchmark: the old matcher
    /// took seconds on 100 KB and never finished the many-variable cases.
    fn timed(template: &UriTemplate, uri: &str) -> Option<UriVariables> {
        let start = Instant::now();
        let vars = template.matches(uri);
        let elapsed = start.elapsed();
        eprintln!("{} on a {} byte URI: {elapsed:?}", template.as_str(), uri.len());
        assert!(elapsed < Duration::from_secs(2), "{} took {elapsed:?}", template.as_str());
        vars
    }

    #[test]
    fn long_uris_match_in_linear_time() {
        let t = parse("calc://units/{category}");
        let body = "a".repeat(4 << 20);
        assert!(timed(&t, &format!("calc://units/{body}/x")).is_none());
        assert!(timed(&t, &format!("calc://units/{}", "/".repeat(4 << 20))).is_none());
        let vars = timed(&t, &format!("calc://units/{body}")).unwrap();
        assert_eq!(vars.get("category").map(str::len), Some(4 << 20));
    }

    /// URIs where almost every split of the variables is plausible and the match still fails
    /// at the end: exponential for a backtracker.
    #[test]
    fn many_reserved_variables_match_in_linear_time() {
        let template = |separator: &str, last: &str| {
            let reserved: String = (1..MAX_VARIABLES).map(|i| format!("{{+v{i}}}{separator}")).collect();
            parse(&format!("x://{reserved}{last}"))
        };
        let separated = template("-", "{+v32}!");
        let simple_last = template("-", "{v32}");
        let adjacent = template("", "{v32}");
        let dashes = "-".repeat(1 << 20);
        let one_separator_short = format!("x://{}{}!", "a".repeat(1 << 20), "-".repeat(MAX_VARIABLES - 2));
        assert!(timed(&separated, &one_separator_short).is_none());
        assert!(timed(&simple_last, &format!("x://{dashes}/")).is_none());
        assert!(timed(&adjacent, &format!("x://{dashes}/")).is_none());

        let vars = timed(&separated, &format!("x://{dashes}!")).unwrap();
        assert_eq!((vars.get("v1"), vars.get("v31")), (Some("-"), Some("-")));
        assert_eq!(vars.get("v32").map(str::len), Some((1 << 20) - 31 * 2));
        let vars = timed(&adjacent, &format!("x://{dashes}")).unwrap();
        assert_eq!(vars.get("v31"), Some("-"));
        assert_eq!(vars.get("v32").map(str::len), Some((1 << 20) - 31));
    }
}
