//! {{name}}: a Capsule plugin.

use capsule_sdk::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct StatsArgs {
    /// The text to measure.
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Stats {
    words: usize,
    lines: usize,
}

fn stats(args: StatsArgs) -> Json<Stats> {
    Json(Stats { words: args.text.split_whitespace().count(), lines: args.text.lines().count() })
}

capsule_sdk::plugin!(|p| {
    p.tool("stats", "Count the words and lines of a text", stats).read_only();
});
