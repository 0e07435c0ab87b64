//! Misbehaves on purpose so the tests can prove the host contains it. Never bundle it.

use std::hint::black_box;
use std::time::Duration;

use capsule_sdk::prelude::*;

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

capsule_sdk::plugin!(|p| {
    p.tool("crash", "Panics", crash);
    p.tool("spin", "Loops forever", spin);
    p.tool("hog", "Allocates memory until stopped", hog);
    p.tool("recurse", "Recurses without bound", recurse);
    p.tool("stall", "Sleeps for a day", stall);
    p.tool("echo", "Returns its text (proves the plugin still works)", echo);
});
