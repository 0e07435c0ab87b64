//! Text and JSON tools a model reaches for daily: JSON pointer queries and formatting,
//! regular-expression search and replace, hashing, base64 and text statistics.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use capsule_sdk::prelude::*;
use capsule_sdk::serde_json;
use regex::RegexBuilder;
use sha2::{Digest, Sha256, Sha512};

/// Regexes are compiled with a size cap so a hostile pattern cannot eat the memory budget.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Deserialize, JsonSchema)]
struct QueryArgs {
    /// A JSON document.
    json: String,
    /// An RFC 6901 JSON pointer, e.g. `/items/0/name`; empty for the whole document.
    #[serde(default)]
    pointer: String,
}

fn json_query(args: QueryArgs) -> Result<String, String> {
    let doc: Value = serde_json::from_str(&args.json).map_err(|e| format!("the document is not valid JSON: {e}"))?;
    let found = doc.pointer(&args.pointer).ok_or_else(|| format!("nothing at pointer {:?}", args.pointer))?;
    serde_json::to_string_pretty(found).map_err(|e| e.to_string())
}

#[derive(Deserialize, JsonSchema)]
struct FormatArgs {
    /// A JSON document.
    json: String,
    /// Minify instead of pretty-printing.
    #[serde(default)]
    minify: bool,
}

fn json_format(args: FormatArgs) -> Result<String, String> {
    let doc: Value = serde_json::from_str(&args.json).map_err(|e| format!("the document is not valid JSON: {e}"))?;
    if args.minify { Ok(doc.to_string()) } else { serde_json::to_string_pretty(&doc).map_err(|e| e.to_string()) }
}

#[derive(Deserialize, JsonSchema)]
struct FindArgs {
    /// A regular expression (Rust `regex` syntax: no look-around or backreferences).
    pattern: String,
    /// The text to search.
    text: String,
    /// Match case-insensitively.
    #[serde(default)]
    ignore_case: bool,
    /// At most this many matches (default 100).
    max_matches: Option<usize>,
}

#[derive(Serialize, JsonSchema)]
struct Match {
    /// Byte offset of the match.
    start: usize,
    /// Byte offset just past the match.
    end: usize,
    /// The matched text.
    text: String,
    /// Capture groups (null for groups that did not participate).
    groups: Vec<Option<String>>,
}

#[derive(Serialize, JsonSchema)]
struct Matches {
    matches: Vec<Match>,
    /// Whether more matches exist than were returned.
    truncated: bool,
}

fn compile(pattern: &str, ignore_case: bool) -> Result<regex::Regex, String> {
    RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid pattern: {e}"))
}

fn regex_find(args: FindArgs) -> Result<Json<Matches>, String> {
    let re = compile(&args.pattern, args.ignore_case)?;
    let max = args.max_matches.unwrap_or(100);
    let mut matches = Vec::new();
    let mut truncated = false;
    for caps in re.captures_iter(&args.text) {
        if matches.len() == max {
            truncated = true;
            break;
        }
        let whole = caps.get(0).expect("group 0 always matches");
        matches.push(Match {
            start: whole.start(),
            end: whole.end(),
            text: whole.as_str().to_owned(),
            groups: caps.iter().skip(1).map(|g| g.map(|m| m.as_str().to_owned())).collect(),
        });
    }
    Ok(Json(Matches { matches, truncated }))
}

#[derive(Deserialize, JsonSchema)]
struct ReplaceArgs {
    /// A regular expression.
    pattern: String,
    /// The text to change.
    text: String,
    /// The replacement; `$1` or `${name}` insert capture groups.
    replacement: String,
    /// Match case-insensitively.
    #[serde(default)]
    ignore_case: bool,
}

fn regex_replace(args: ReplaceArgs) -> Result<String, String> {
    let re = compile(&args.pattern, args.ignore_case)?;
    Ok(re.replace_all(&args.text, args.replacement.as_str()).into_owned())
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Algorithm {
    Sha256,
    Sha512,
}

#[derive(Deserialize, JsonSchema)]
struct HashArgs {
    /// The text to hash (as UTF-8).
    text: String,
    /// The hash function (default sha256).
    algorithm: Option<Algorithm>,
}

fn hash(args: HashArgs) -> String {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    match args.algorithm.unwrap_or(Algorithm::Sha256) {
        Algorithm::Sha256 => hex(&Sha256::digest(args.text.as_bytes())),
        Algorithm::Sha512 => hex(&Sha512::digest(args.text.as_bytes())),
    }
}

#[derive(Deserialize, JsonSchema)]
struct Base64Args {
    /// The text to encode, or the base64 to decode.
    text: String,
    /// Decode instead of encoding.
    #[serde(default)]
    decode: bool,
}

fn base64(args: Base64Args) -> Result<String, String> {
    if !args.decode {
        return Ok(B64.encode(args.text.as_bytes()));
    }
    let bytes = B64.decode(args.text.trim()).map_err(|e| format!("not valid base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "the decoded bytes are not UTF-8 text".to_string())
}

#[derive(Deserialize, JsonSchema)]
struct StatsArgs {
    /// The text to measure.
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct TextStats {
    bytes: usize,
    characters: usize,
    words: usize,
    lines: usize,
}

fn text_stats(args: StatsArgs) -> Json<TextStats> {
    Json(TextStats {
        bytes: args.text.len(),
        characters: args.text.chars().count(),
        words: args.text.split_whitespace().count(),
        lines: args.text.lines().count(),
    })
}

#[derive(Deserialize, JsonSchema)]
struct SummarizeArgs {
    /// The text to summarize.
    text: String,
    /// brief, detailed or bullets (default brief).
    style: Option<String>,
}

fn summarize(args: SummarizeArgs) -> String {
    let style = match args.style.as_deref() {
        Some("detailed") => "a detailed summary covering every main point",
        Some("bullets") => "a bulleted list of the key points",
        _ => "a summary of two or three sentences",
    };
    format!("Write {style} of the following text.\n\n{}", args.text)
}

capsule_sdk::plugin!(|p| {
    p.tool("json_query", "Extract part of a JSON document with an RFC 6901 JSON pointer", json_query)
        .read_only()
        .idempotent();
    p.tool("json_format", "Pretty-print or minify a JSON document", json_format).read_only().idempotent();
    p.tool("regex_find", "Find matches of a regular expression in text, with positions and capture groups", regex_find)
        .read_only()
        .idempotent();
    p.tool("regex_replace", "Replace every match of a regular expression in text", regex_replace)
        .read_only()
        .idempotent();
    p.tool("hash", "SHA-256 or SHA-512 digest of text, in hex", hash).read_only().idempotent();
    p.tool("base64", "Encode text as base64, or decode base64 to text", base64).read_only().idempotent();
    p.tool("text_stats", "Count the bytes, characters, words and lines of a text", text_stats).read_only().idempotent();
    p.prompt("summarize", "Ask the model to summarize a text", summarize);
    p.complete_prompt("summarize", "style", |prefix| {
        ["brief", "detailed", "bullets"].iter().filter(|s| s.starts_with(prefix)).map(|s| s.to_string()).collect()
    });
});
