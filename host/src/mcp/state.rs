//! Integrity protection for plugin state that travels through a 2026-07-28 client as
//! `requestState`: HMAC-sealed, bound to the tenant and the request it belongs to (method,
//! tool, prompt or resource, caller, and a digest of the arguments), short-lived, and opened
//! once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{RequestStateCodec, SealOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How long a client may take between an `input_required` answer and its retry.
const STATE_TTL: Duration = Duration::from_secs(15 * 60);

/// The most states of one scope (tenant) held as spent at once: a scope that retries faster
/// than this within [`STATE_TTL`] (about 70 a second) has its further retries refused until
/// older ones expire, rather than letting any state open twice. A few MiB when full.
const MAX_SPENT: usize = 1 << 16;

/// Seals and opens `requestState`. Cheap to clone.
#[derive(Clone)]
pub struct StateCodec {
    codec: Arc<RequestStateCodec>,
    /// Whose state this codec seals (a tenant): state sealed for one scope opens in no other.
    scope: Arc<str>,
    /// The states opened within their lifetime, shared by every scope of the process, so
    /// that a tenant started again does not forget what its states were.
    spent: Arc<Spent>,
}

/// Why sealed state does not open.
#[derive(Debug, PartialEq, Eq)]
pub enum InvalidState {
    /// Forged, tampered with, expired, or belonging to another request.
    Rejected,
    /// Opened before: a retry's state is good for one retry (SEP-2322's single use).
    Used,
    /// The scope has too many states held as spent to take another yet.
    Busy,
}

impl StateCodec {
    /// A codec with the given key (at least 32 bytes; replicas must share it).
    pub fn new(key: Vec<u8>) -> Result<Self, String> {
        RequestStateCodec::try_new(key)
            .map(|codec| StateCodec { codec: Arc::new(codec), scope: "".into(), spent: Arc::default() })
            .map_err(|e| e.to_string())
    }

    /// A codec with a fresh random key: state then only survives within this process.
    pub fn random() -> Self {
        let key: [u8; 32] = rand::random();
        StateCodec::new(key.to_vec()).expect("a 32-byte key is long enough")
    }

    /// The same key, sealing for `scope` alone.
    pub fn scoped(&self, scope: &str) -> StateCodec {
        StateCodec { codec: self.codec.clone(), scope: scope.into(), spent: self.spent.clone() }
    }

    /// Seal plugin state, bound to this codec's scope and to the request `to`.
    pub fn seal(&self, state: &[u8], to: &Binding<'_>) -> String {
        let bound = self.bound(to);
        self.codec.seal_with(state, &SealOptions::new().associated_data(&bound).ttl(STATE_TTL))
    }

    /// Open sealed state, checking integrity, binding and expiry, and that it was not opened
    /// before. Only state that opens is spent: a forgery or a stolen state retried by
    /// another caller cannot use up its owner's.
    pub fn open(&self, sealed: &str, to: &Binding<'_>) -> Result<Vec<u8>, InvalidState> {
        let state = self.codec.open_with(sealed, &self.bound(to)).map_err(|_| InvalidState::Rejected)?;
        self.spent.spend(&self.scope, sealed, Instant::now())?;
        Ok(state)
    }

    /// The associated data: each part length-prefixed, so that no two bindings read alike.
    fn bound(&self, to: &Binding<'_>) -> Vec<u8> {
        let mut bound = Vec::new();
        for part in [&*self.scope, to.method, to.target, to.caller, to.plugin] {
            bound.extend_from_slice(format!("{}:", part.len()).as_bytes());
            bound.extend_from_slice(part.as_bytes());
        }
        bound.extend_from_slice(&to.arguments.digest());
        bound
    }
}

/// The digests of states opened in the last [`STATE_TTL`], by scope. A state opened now was
/// sealed at most that long ago, so it has expired by the time its digest is let go.
#[derive(Default)]
struct Spent {
    scopes: Mutex<HashMap<Arc<str>, Ledger>>,
}

/// One scope's spent states, oldest first.
#[derive(Default)]
struct Ledger {
    order: VecDeque<(Instant, [u8; 16])>,
    digests: HashSet<[u8; 16]>,
}

impl Spent {
    fn spend(&self, scope: &Arc<str>, sealed: &str, now: Instant) -> Result<(), InvalidState> {
        let digest: [u8; 32] = Sha256::digest(sealed.as_bytes()).into();
        let mut key = [0; 16];
        key.copy_from_slice(&digest[..16]);
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        // Expired entries go first, in every scope, so that a scope no longer used does
        // not keep its ledger.
        scopes.retain(|_, ledger| {
            while let Some(&(at, old)) = ledger.order.front() {
                if now.saturating_duration_since(at) < STATE_TTL {
                    break;
                }
                ledger.order.pop_front();
                ledger.digests.remove(&old);
            }
            !ledger.order.is_empty()
        });
        let ledger = scopes.entry(scope.clone()).or_default();
        if ledger.digests.contains(&key) {
            return Err(InvalidState::Used);
        }
        if ledger.order.len() >= MAX_SPENT {
            return Err(InvalidState::Busy);
        }
        ledger.digests.insert(key);
        ledger.order.push_back((now, key));
        Ok(())
    }
}

/// The request a `requestState` belongs to. A retry must be the same request: the same
/// method, tool, prompt or resource, caller and arguments (SEP-2322: state is
/// attacker-controlled, so a digest of the salient params is bound into it). Nothing is
/// computed until state is sealed or opened, which few calls do.
pub struct Binding<'a> {
    pub method: &'static str,
    /// The tool's or prompt's name, or the resource's URI.
    pub target: &'a str,
    /// The principal's id (empty for anonymous callers).
    pub caller: &'a str,
    /// The plugin that serves the target: a state one plugin sealed never reaches another
    /// that took over the name or URI since. A newer version of the same plugin gets it.
    pub plugin: &'a str,
    pub arguments: Arguments<'a>,
}

/// A request's arguments, as far as a binding needs them.
pub enum Arguments<'a> {
    /// None (`resources/read`).
    None,
    /// A tool call's arguments, the client's JSON text (an object, already checked).
    Json(&'a str),
    /// A prompt's arguments, by name.
    Strings(&'a [(String, String)]),
}

impl Arguments<'_> {
    /// A digest of the arguments' meaning rather than their spelling: a client may send the
    /// same object again with its keys in another order or other white space.
    fn digest(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        match self {
            Arguments::None => hash.update(b"-"),
            Arguments::Json(text) => match serde_json::from_str::<Value>(text) {
                Ok(value) => canonical(&mut hash, &value),
                Err(_) => hash.update(text.as_bytes()),
            },
            Arguments::Strings(pairs) => {
                let mut pairs: Vec<_> = pairs.iter().collect();
                pairs.sort();
                hash.update(format!("o{}", pairs.len()));
                for (name, value) in pairs {
                    string(&mut hash, name);
                    string(&mut hash, value);
                }
            }
        }
        hash.finalize().into()
    }
}

/// Feed `value` to `hash` in one spelling: object keys sorted, every item tagged and
/// length-prefixed, integers by value (`1` and `1.0` alike).
fn canonical(hash: &mut Sha256, value: &Value) {
    match value {
        Value::Null => hash.update(b"n"),
        Value::Bool(b) => hash.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            // Integral floats within f64's exact range read as the integer they are.
            const EXACT: f64 = 9_007_199_254_740_992.0;
            let integral = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() <= EXACT).map(|f| f as i64);
            match (n.as_i64(), n.as_u64(), integral) {
                (Some(i), _, _) | (None, None, Some(i)) => hash.update(format!("i{i};")),
                (None, Some(u), _) => hash.update(format!("u{u};")),
                (None, None, None) => hash.update(format!("f{};", n.as_f64().unwrap_or(f64::NAN).to_bits())),
            }
        }
        Value::String(s) => string(hash, s),
        Value::Array(items) => {
            hash.update(format!("a{}", items.len()));
            items.iter().for_each(|item| canonical(hash, item));
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            hash.update(format!("o{}", entries.len()));
            for (key, value) in entries {
                string(hash, key);
                canonical(hash, value);
            }
        }
    }
}

fn string(hash: &mut Sha256, s: &str) {
    hash.update(format!("s{}:", s.len()));
    hash.update(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(tool: &'a str, caller: &'a str, arguments: &'a str) -> Binding<'a> {
        Binding { method: "tools/call", target: tool, caller, plugin: "p", arguments: Arguments::Json(arguments) }
    }

    #[test]
    fn state_opens_only_where_it_was_sealed() {
        let codec = StateCodec::random();
        let (a, b) = (codec.scoped("a"), codec.scoped("b"));
        let sealed = a.seal(b"state", &call("t", "", r#"{"x":1}"#));
        assert_eq!(a.open(&sealed, &call("t", "", r#"{"x":1}"#)).unwrap(), b"state");
        assert!(b.open(&sealed, &call("t", "", r#"{"x":1}"#)).is_err(), "another tenant");
        assert!(a.open(&sealed, &call("u", "", r#"{"x":1}"#)).is_err(), "another tool");
        assert!(a.open(&sealed, &call("t", "\"bob\"", r#"{"x":1}"#)).is_err(), "another caller");
        assert!(a.open(&sealed, &call("t", "", r#"{"x":2}"#)).is_err(), "other arguments");
        let prompt = Binding {
            method: "prompts/get",
            target: "t",
            caller: "",
            plugin: "p",
            arguments: Arguments::Json(r#"{"x":1}"#),
        };
        assert!(a.open(&sealed, &prompt).is_err(), "another method");
        let elsewhere = Binding { plugin: "q", ..call("t", "", r#"{"x":1}"#) };
        assert!(a.open(&sealed, &elsewhere).is_err(), "another plugin");
    }

    #[test]
    fn arguments_bind_by_meaning_not_spelling() {
        let codec = StateCodec::random();
        let sealed = codec.seal(b"s", &call("t", "", r#"{"a": 1, "b": [true, null, "x"], "c": {"d": 2.5}}"#));
        let respelled = r#"{ "c":{"d":2.5},"b":[true,null,"x"], "a":1.0 }"#;
        assert_eq!(codec.open(&sealed, &call("t", "", respelled)).unwrap(), b"s");
        for other in
            [r#"{"a":1,"b":[true,null,"x"],"c":{"d":2.5},"e":0}"#, r#"{"a":1,"b":[null,true,"x"],"c":{"d":2.5}}"#]
        {
            assert!(codec.open(&sealed, &call("t", "", other)).is_err(), "{other}");
        }
        let pairs = [("b".to_owned(), "2".to_owned()), ("a".to_owned(), "1".to_owned())];
        let swapped = [pairs[1].clone(), pairs[0].clone()];
        let prompt = |p| Binding {
            method: "prompts/get",
            target: "p",
            caller: "",
            plugin: "p",
            arguments: Arguments::Strings(p),
        };
        let sealed = codec.seal(b"s", &prompt(&pairs));
        assert!(codec.open(&sealed, &prompt(&swapped)).is_ok());
        assert!(codec.open(&sealed, &prompt(&pairs[..1])).is_err());
    }

    #[test]
    fn state_opens_once() {
        let codec = StateCodec::random();
        let sealed = codec.seal(b"s", &call("t", "", "{}"));
        // A failed open spends nothing.
        assert_eq!(codec.open(&sealed, &call("t", "\"eve\"", "{}")), Err(InvalidState::Rejected));
        assert_eq!(codec.open(&sealed, &call("t", "", "{}")).unwrap(), b"s");
        assert_eq!(codec.open(&sealed, &call("t", "", "{}")), Err(InvalidState::Used));
        // Another scope's codec shares the ledger, not the key's binding.
        assert_eq!(codec.scoped("a").open(&sealed, &call("t", "", "{}")), Err(InvalidState::Rejected));
    }

    #[test]
    fn spent_states_are_let_go_once_expired_and_each_scope_is_capped() {
        let spent = Spent::default();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let start = Instant::now();
        spent.spend(&a, "x", start).unwrap();
        assert_eq!(spent.spend(&a, "x", start + STATE_TTL / 2), Err(InvalidState::Used));
        spent.spend(&b, "x", start).unwrap();
        spent.spend(&a, "x", start + STATE_TTL).unwrap();
        assert_eq!(spent.scopes.lock().unwrap().len(), 1, "b's ledger was dropped once empty");
        for n in 1..MAX_SPENT {
            spent.spend(&a, &n.to_string(), start + STATE_TTL).unwrap();
        }
        assert_eq!(spent.spend(&a, "full", start + STATE_TTL), Err(InvalidState::Busy));
        spent.spend(&b, "full", start + STATE_TTL).unwrap();
    }

    #[test]
    fn parts_cannot_run_into_each_other() {
        let codec = StateCodec::random();
        let sealed = codec.seal(b"s", &call("a\0b", "c", "{}"));
        assert!(codec.open(&sealed, &call("a", "b\0c", "{}")).is_err());
    }
}
