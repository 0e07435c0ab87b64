//! W3C Trace Context (Level 1): the `traceparent` and `tracestate` a client sends, in HTTP
//! headers or in `params._meta`, parsed (a value that breaks the rules is ignored, as the
//! recommendation says, and the request starts a trace of its own); and a trace id written
//! as `traceparent` writes it, for the logs.

/// A client's span, as its `traceparent` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's sampled flag.
    pub sampled: bool,
    /// The client's `tracestate`, kept only when it is well formed.
    pub state: Option<std::sync::Arc<str>>,
}

/// Parse `traceparent` (and `tracestate`, dropped alone when malformed).
pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<RemoteParent> {
    let value = traceparent.trim_matches([' ', '\t']);
    let bytes = value.as_bytes();
    // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
    if bytes.len() < 55 || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let version = hex::<1>(&value[..2])?[0];
    // Version ff is invalid; 00 has exactly these fields; a later version may append more,
    // after a dash, and is read as 00.
    if version == 0xff || (version == 0 && bytes.len() != 55) || (bytes.len() > 55 && bytes[55] != b'-') {
        return None;
    }
    let trace_id = hex::<16>(&value[3..35])?;
    let span_id = hex::<8>(&value[36..52])?;
    let flags = hex::<1>(&value[53..55])?[0];
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    let state = tracestate.filter(|s| well_formed_state(s)).map(|s| s.trim_matches([' ', '\t']).into());
    Some(RemoteParent { trace_id, span_id, sampled: flags & 1 == 1, state })
}

/// Lowercase hex into exactly `N` bytes.
fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// A trace id as `traceparent` writes it: 32 lowercase hex digits.
pub fn trace_id_digits(id: &[u8; 16]) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0; 32];
    for (pair, byte) in out.chunks_exact_mut(2).zip(id) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
    out
}

/// At most 32 `key=value` members, comma-separated (empty members and blanks around them
/// allowed), each key once, and 512 characters in all. A key is a simple key (a lowercase
/// letter, then up to 255 of `a-z0-9_-*/`) or `tenant@system` (up to 241 and 14 of those,
/// the tenant starting with a letter or digit, the system with a letter); a value is up to
/// 256 printable ASCII characters other than `,` and `=`, not ending in a space.
fn well_formed_state(state: &str) -> bool {
    let mut keys: Vec<&str> = Vec::new();
    state.len() <= 512
        && state.split(',').map(|m| m.trim_matches([' ', '\t'])).filter(|m| !m.is_empty()).all(|member| {
            let Some((key, value)) = member.split_once('=') else { return false };
            let value_ok = !value.is_empty()
                && value.len() <= 256
                && value.bytes().all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
                && !value.ends_with(' ');
            let fresh = !keys.contains(&key);
            keys.push(key);
            keys.len() <= 32 && fresh && state_key(key) && value_ok
        })
}

fn state_key(key: &str) -> bool {
    let rest = |part: &str, most: usize| {
        part.len() <= most && part.bytes().all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/'))
    };
    match key.split_once('@') {
        None => key.starts_with(|c: char| c.is_ascii_lowercase()) && rest(key, 256),
        Some((tenant, system)) => {
            tenant.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && rest(tenant, 241)
                && system.starts_with(|c: char| c.is_ascii_lowercase())
                && rest(system, 14)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_names_the_client_s_span() {
        let parent = parse(PARENT, Some("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE")).unwrap();
        assert_eq!(parent.trace_id[..4], [0x4b, 0xf9, 0x2f, 0x35]);
        assert_eq!(parent.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert!(parent.sampled);
        assert_eq!(parent.state.as_deref(), Some("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"));
        assert!(!parse(&PARENT.replace("-01", "-00"), None).unwrap().sampled);
        // A later version with more fields is read as version 00.
        assert!(parse(&format!("cc{}-what-comes-next", &PARENT[2..]), None).is_some());
    }

    #[test]
    fn a_malformed_traceparent_is_ignored_and_a_malformed_tracestate_dropped() {
        for bad in [
            String::new(),
            PARENT[..54].to_owned(),
            format!("{PARENT}-"),
            PARENT.to_uppercase(),
            PARENT.replace("4bf92f3577b34da6a3ce929d0e0e4736", &"0".repeat(32)),
            PARENT.replace("00f067aa0ba902b7", &"0".repeat(16)),
            format!("ff{}", &PARENT[2..]),
            format!("cc{}x", &PARENT[2..]),
            PARENT.replace('-', "_"),
        ] {
            assert_eq!(parse(&bad, None), None, "{bad:?}");
        }
        let long = format!("k={}", "v".repeat(300));
        let many = (0..33).map(|n| format!("k{n}=v")).collect::<Vec<_>>().join(",");
        let bad_states = ["k", "=v", "K=v", "k=a,b=c=d", &many, &long, "a=1,a=2", "_k=v", "*k=v", "@k=v", "1k=v"];
        let bad_tenants = ["a@b@c=v", "t@fifteen-chars-x=v", "t@1sys=v", "_t@sys=v", "t@=v"];
        for bad in bad_states.iter().chain(&bad_tenants) {
            assert_eq!(parse(PARENT, Some(bad)).unwrap().state, None, "{bad:?}");
        }
        for good in ["a=1,b=2", "1tenant@sys=v", "t@fourteen-chars=v", "k0=v, k1=w"] {
            assert_eq!(parse(PARENT, Some(good)).unwrap().state.as_deref(), Some(good), "{good:?}");
        }
    }
}
