//! Misbehaves on purpose so the tests can prove the host contains it. Never bundle it.
//!
//! The escape tools go straight to WASI through `std` (no SDK helper that might explain or
//! refuse), so what they report is exactly what the sandbox let through.

use std::hint::black_box;
use std::io::{Read, Write};
use std::time::Duration;

use capsule_sdk::prelude::*;

/// Lives as long as the instance: a reused instance would count past one.
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn remember(_: NoArgs) -> String {
    (CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1).to_string()
}

fn crash(_: NoArgs) -> String {
    panic!("this plugin panics on purpose")
}

fn spin(_: NoArgs) -> String {
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

fn hog(_: NoArgs) -> String {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        chunks.push(black_box(vec![1u8; 1 << 20]));
    }
}

fn depth(n: u64) -> u64 {
    if black_box(n) == u64::MAX { 0 } else { depth(n + 1) + 1 }
}

fn recurse(_: NoArgs) -> String {
    depth(0).to_string()
}

fn stall(_: NoArgs) -> String {
    std::thread::sleep(Duration::from_secs(24 * 3600));
    "woke up".into()
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to return.
    text: String,
}

fn echo(args: EchoArgs) -> String {
    args.text
}

#[derive(Deserialize, JsonSchema)]
struct PathArgs {
    /// Any path: absolute, relative, with `..`, through a symlink.
    path: String,
}

fn read_path(args: PathArgs) -> Result<String, String> {
    std::fs::read_to_string(&args.path).map_err(|e| format!("read {}: {e}", args.path))
}

fn list_path(args: PathArgs) -> Result<String, String> {
    let entries = std::fs::read_dir(&args.path).map_err(|e| format!("list {}: {e}", args.path))?;
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into()).collect();
    names.sort();
    Ok(names.join("\n"))
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// Any path.
    path: String,
    /// What to write.
    content: String,
}

fn write_path(args: WriteArgs) -> Result<String, String> {
    std::fs::write(&args.path, &args.content).map_err(|e| format!("write {}: {e}", args.path))?;
    Ok(format!("wrote {}", args.path))
}

fn environment(_: NoArgs) -> String {
    std::env::vars().map(|(k, v)| format!("{k}={v}\n")).collect()
}

#[derive(Deserialize, JsonSchema)]
struct SymlinkArgs {
    /// A mount, as the plugin sees it.
    dir: String,
    /// A directory directly inside it, to move aside.
    name: String,
    /// What the symlink put in its place points to (relative, e.g. `../outside`).
    target: String,
}

/// Replace a directory inside a writable mount with a relative symlink: if the host reopened
/// the directory by path on a later call, it would follow the link out of the grant.
fn plant_symlink(args: SymlinkArgs) -> Result<String, String> {
    // Through the outer mount's own descriptor: a path would resolve to the inner mount.
    let (mount, _) = wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find(|(_, guest)| *guest == args.dir)
        .ok_or_else(|| format!("no mount at {}", args.dir))?;
    let path = format!("{}/{}", args.dir, args.name);
    let moved = format!("{}.moved", args.name);
    mount.rename_at(&args.name, &mount, &moved).map_err(|e| format!("rename {path}: {e}"))?;
    mount.symlink_at(&args.target, &args.name).map_err(|e| format!("symlink {path}: {e}"))?;
    Ok(format!("{path} -> {}", args.target))
}

#[derive(Deserialize, JsonSchema)]
struct UrlArgs {
    /// Where to send a GET request.
    url: String,
}

fn http_get(args: UrlArgs) -> Result<String, String> {
    let response = capsule_sdk::http::get(&args.url).map_err(|e| e.to_string())?;
    Ok(format!("{} {}", response.status, response.text()))
}

#[derive(Deserialize, JsonSchema)]
struct ConnectArgs {
    /// `host:port` to open a raw TCP connection to.
    address: String,
}

fn connect(args: ConnectArgs) -> Result<String, String> {
    let mut stream =
        std::net::TcpStream::connect(&args.address).map_err(|e| format!("connect {}: {e}", args.address))?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer)
}

#[derive(Deserialize, JsonSchema)]
struct SizeArgs {
    /// How many MiB of text to return.
    mib: usize,
}

fn big(args: SizeArgs) -> String {
    "x".repeat(args.mib << 20)
}

#[derive(Deserialize, JsonSchema)]
struct CountArgs {
    /// How many log messages and progress notifications to send.
    count: u64,
}

fn flood(args: CountArgs, cx: &Context) -> String {
    for i in 0..args.count {
        cx.warn(format!("flood message {i}"));
        cx.progress(i as f64, Some(args.count as f64), Some("flooding"));
    }
    eprint!("{}", "stderr flood\n".repeat(100_000));
    format!("sent {} messages", args.count)
}

capsule_sdk::plugin!(|p| {
    p.tool("crash", "Panics", crash);
    p.tool("spin", "Loops forever", spin);
    p.tool("hog", "Allocates memory until stopped", hog);
    p.tool("recurse", "Recurses without bound", recurse);
    p.tool("stall", "Sleeps for a day", stall);
    p.tool("read_path", "Reads any path with std::fs", read_path);
    p.tool("list_path", "Lists any directory with std::fs", list_path);
    p.tool("write_path", "Writes any path with std::fs", write_path);
    p.tool("plant_symlink", "Swaps a directory in a mount for a relative symlink", plant_symlink);
    p.tool("environment", "Returns every environment variable it can see", environment);
    p.tool("http_get", "Sends a GET request anywhere", http_get);
    p.tool("connect", "Opens a raw TCP connection anywhere", connect);
    p.tool("big", "Returns a result of the given size", big);
    p.tool("flood", "Floods the client with logs and progress, and stderr with lines", flood);
    p.tool("echo", "Returns its text (proves the plugin still works)", echo);
    p.tool("remember", "Counts the calls its instance has served (proves each call gets a fresh one)", remember);
});
