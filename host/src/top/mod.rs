//! `capsule top`: what a running server's plugins are doing, read from its `/metrics` (the
//! `--metrics` listener, or the admin one with its token) and shown per plugin: calls a
//! second, p50 and p99 call time, failures by kind and the memory high-water mark, over the
//! last interval.
//!
//! Reading a scrape into figures and comparing two of them is pure ([`Snapshot`], [`View`]);
//! fetching and drawing come after.

mod scrape;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub use scrape::{ParseError, Sample, parse};

/// What one scrape says of one plugin.
#[derive(Debug, Default, Clone, PartialEq)]
struct Figures {
    /// Calls so far, by how they ended.
    outcomes: BTreeMap<String, f64>,
    /// The call-time histogram, summed over the plugin's tools: upper bound (as `f64` bits,
    /// which order like the non-negative bounds) → calls at most that long.
    buckets: BTreeMap<u64, f64>,
    memory: f64,
}

impl Figures {
    /// Whether any counter is lower in `now` than here (a reset).
    fn went_down(&self, now: &Figures) -> bool {
        fn lower<K: Ord>(then: &BTreeMap<K, f64>, now: &BTreeMap<K, f64>) -> bool {
            then.iter().any(|(key, count)| now.get(key).copied().unwrap_or(0.0) < *count)
        }
        lower(&self.outcomes, &now.outcomes) || lower(&self.buckets, &now.buckets)
    }
}

/// What one scrape says: per `(tenant, plugin)`, and the server's own gauges.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    plugins: BTreeMap<(String, String), Figures>,
    in_flight: f64,
    live_instances: f64,
    capacity: f64,
    sessions: f64,
}

impl Snapshot {
    /// The figures in a scrape's samples.
    pub fn of(samples: &[Sample]) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for sample in samples {
            let plugin = || {
                let key = (sample.label("tenant")?.to_owned(), sample.label("plugin")?.to_owned());
                Some(key)
            };
            match sample.name.as_str() {
                "capsule_plugin_calls_total" => {
                    if let (Some(key), Some(outcome)) = (plugin(), sample.label("outcome")) {
                        let figures = snapshot.plugins.entry(key).or_default();
                        *figures.outcomes.entry(outcome.to_owned()).or_default() += sample.value;
                    }
                }
                "capsule_plugin_call_duration_seconds_bucket" => {
                    let bound = sample.label("le").and_then(|le| match le {
                        "+Inf" => Some(f64::INFINITY),
                        le => le.parse::<f64>().ok(),
                    });
                    if let (Some(key), Some(bound)) = (plugin(), bound.filter(|b| *b >= 0.0)) {
                        let figures = snapshot.plugins.entry(key).or_default();
                        *figures.buckets.entry(bound.to_bits()).or_default() += sample.value;
                    }
                }
                "capsule_plugin_memory_high_water_bytes" => {
                    if let Some(key) = plugin() {
                        snapshot.plugins.entry(key).or_default().memory = sample.value;
                    }
                }
                "capsule_calls_in_flight" => snapshot.in_flight += sample.value,
                "capsule_instances_live" => snapshot.live_instances = sample.value,
                "capsule_instances_capacity" => snapshot.capacity = sample.value,
                "capsule_sessions_open" => snapshot.sessions += sample.value,
                _ => {}
            }
        }
        snapshot
    }
}

/// One plugin's row: what happened between two scrapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub tenant: String,
    pub plugin: String,
    pub calls_per_second: f64,
    /// Median and 99th percentile call time over the interval (none without calls).
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    /// Calls since the server started.
    pub total: f64,
    /// Calls over the interval that did not end `ok`, by how they ended.
    pub failures: Vec<(String, f64)>,
    /// The most linear memory one call has used.
    pub memory: f64,
}

/// The difference between two scrapes `elapsed` apart.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub rows: Vec<Row>,
    pub elapsed: Duration,
    pub in_flight: f64,
    pub live_instances: f64,
    pub capacity: f64,
    pub sessions: f64,
}

impl View {
    pub fn between(before: &Snapshot, after: &Snapshot, elapsed: Duration) -> View {
        let seconds = elapsed.as_secs_f64().max(1e-3);
        let empty = Figures::default();
        let mut rows: Vec<Row> = after
            .plugins
            .iter()
            .map(|((tenant, plugin), now)| {
                let then = before.plugins.get(&(tenant.clone(), plugin.clone())).unwrap_or(&empty);
                // A counter that went down was reset (the server restarted): it counts from
                // zero since, as Prometheus' rate() takes it.
                let then = if then.went_down(now) { &empty } else { then };
                let delta = |outcome: &str, count: &f64| count - then.outcomes.get(outcome).copied().unwrap_or(0.0);
                let calls: f64 = now.outcomes.iter().map(|(o, c)| delta(o, c)).sum();
                let failures = now
                    .outcomes
                    .iter()
                    .filter(|(outcome, _)| *outcome != "ok")
                    .map(|(outcome, count)| (outcome.clone(), delta(outcome, count)))
                    .filter(|(_, count)| *count > 0.0)
                    .collect();
                let buckets: Vec<(f64, f64)> = now
                    .buckets
                    .iter()
                    .map(|(bits, count)| {
                        (f64::from_bits(*bits), count - then.buckets.get(bits).copied().unwrap_or(0.0))
                    })
                    .collect();
                Row {
                    tenant: tenant.clone(),
                    plugin: plugin.clone(),
                    calls_per_second: calls / seconds,
                    p50: quantile(0.5, &buckets),
                    p99: quantile(0.99, &buckets),
                    total: now.outcomes.values().sum(),
                    failures,
                    memory: now.memory,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.calls_per_second
                .total_cmp(&a.calls_per_second)
                .then_with(|| (&a.tenant, &a.plugin).cmp(&(&b.tenant, &b.plugin)))
        });
        View {
            rows,
            elapsed,
            in_flight: after.in_flight,
            live_instances: after.live_instances,
            capacity: after.capacity,
            sessions: after.sessions,
        }
    }

    /// The view as a table.
    pub fn render(&self, source: &str) -> String {
        let mut out = format!(
            "capsule top: {source}, over {:.1} s\ncalls in flight {}, instances {}/{}, sessions {}\n\n",
            self.elapsed.as_secs_f64(),
            self.in_flight,
            self.live_instances,
            self.capacity,
            self.sessions
        );
        let _ = writeln!(
            out,
            "{:<12} {:<20} {:>9} {:>9} {:>9} {:>9} {:>9}  FAILED",
            "TENANT", "PLUGIN", "CALLS/S", "P50", "P99", "CALLS", "MEM-HW"
        );
        for row in &self.rows {
            let failures: Vec<String> =
                row.failures.iter().map(|(kind, n)| format!("{} {n}", printable(kind))).collect();
            let _ = writeln!(
                out,
                "{:<12} {:<20} {:>9.1} {:>9} {:>9} {:>9} {:>9}  {}",
                printable(&row.tenant),
                printable(&row.plugin),
                row.calls_per_second,
                row.p50.map_or("-".into(), time),
                row.p99.map_or("-".into(), time),
                row.total,
                bytes(row.memory),
                if failures.is_empty() { "-".to_owned() } else { failures.join(", ") }
            );
        }
        if self.rows.is_empty() {
            out.push_str("(no plugin has been called yet)\n");
        }
        out
    }
}

/// A label value as the terminal shows it: control characters escaped (`\u{1b}`), so that a
/// metrics endpoint cannot move the cursor, clear the screen or retitle the window.
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    // Control characters, and the bidirectional overrides that would reorder the columns.
    let unsafe_ = |c: char| {
        c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_) {
        return text.into();
    }
    text.chars()
        .map(|c| if unsafe_(c) { c.escape_default().to_string() } else { c.to_string() })
        .collect::<String>()
        .into()
}

/// The most bytes of one scrape read: Capsule's own `/metrics` is kilobytes a plugin, and an
/// endpoint that never ends must not fill the operator's memory.
const MAX_SCRAPE: usize = 64 << 20;

/// A response's body as text, refused past `limit` bytes.
async fn read_within(mut response: reqwest::Response, limit: usize) -> Result<String> {
    let Some(body) = crate::bounded::body(&mut response, limit).await? else {
        bail!("the answer is longer than {} MiB", limit >> 20);
    };
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The `q` quantile of a cumulative histogram, interpolated within its bucket as Prometheus's
/// `histogram_quantile` does; none without observations. Falling in the `+Inf` bucket gives
/// the largest finite bound.
fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<Duration> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Duration::try_from_secs_f64(lower).ok();
            }
            let within = if count > below { (rank - below) / (count - below) } else { 1.0 };
            // A bound no duration can hold (a hostile or broken endpoint's) gives none.
            return Duration::try_from_secs_f64(lower + (bound - lower) * within).ok();
        }
        (lower, below) = (bound, count);
    }
    None
}

fn time(d: Duration) -> String {
    match d.as_secs_f64() {
        s if s < 1e-3 => format!("{:.0}µs", s * 1e6),
        s if s < 1.0 => format!("{:.1}ms", s * 1e3),
        s => format!("{s:.2}s"),
    }
}

fn bytes(b: f64) -> String {
    if b <= 0.0 { "-".into() } else { format!("{:.1}MiB", b / f64::from(1 << 20)) }
}

/// What `capsule top` is asked to do.
pub struct TopArgs {
    /// The metrics URL (`http://HOST:PORT/metrics`).
    pub url: String,
    /// A file holding the admin token, for the admin listener's `/metrics`.
    pub token_file: Option<PathBuf>,
    pub interval: Duration,
    /// Print one view (over one interval) and stop.
    pub once: bool,
}

/// Run `capsule top`: the view goes to stdout, redrawn every interval on a terminal, appended
/// otherwise.
pub async fn run(args: TopArgs) -> Result<()> {
    use std::io::{IsTerminal, Write};
    let token = match &args.token_file {
        Some(file) => Some(
            crate::files::read_text(file, 64 << 10)
                .with_context(|| format!("cannot read the token file {}", file.display()))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    // No redirect is followed: the admin token goes only to the URL given. reqwest's default
    // would carry it on an `https` to `http` hop on one host, and `/metrics` never redirects.
    // Nor is a connection kept between scrapes: a server closes one idle for its header
    // timeout, which may be the very moment the next scrape reuses it.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .build()?;
    let fetch = || async {
        let mut request = client.get(&args.url);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.with_context(|| format!("cannot reach {}", args.url))?;
        let status = response.status();
        if status.is_redirection() {
            let to = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()).unwrap_or("?");
            bail!("{} answered {status}, a redirect to {to}: not followed; give that URL itself", args.url);
        }
        let text = read_within(response, MAX_SCRAPE).await.with_context(|| format!("reading {}", args.url))?;
        if !status.is_success() {
            bail!("{} answered {status}: {}", args.url, text.trim());
        }
        let samples = parse(&text)?;
        Ok::<_, anyhow::Error>((Instant::now(), Snapshot::of(&samples)))
    };
    let terminal = std::io::stdout().is_terminal();
    let mut before = fetch().await?;
    // Whether a scrape failed since `before`: the next that succeeds starts a view afresh.
    let mut failed = false;
    loop {
        tokio::time::sleep(args.interval).await;
        // Once running, a scrape that fails (the server restarting, say) is told and tried
        // again at the next interval.
        let after = match fetch().await {
            Ok(after) => after,
            Err(e) if !args.once => {
                eprintln!("capsule top: {e:#}; trying again in {:?}", args.interval);
                failed = true;
                continue;
            }
            Err(e) => return Err(e),
        };
        if std::mem::take(&mut failed) {
            before = after;
            continue;
        }
        let view = View::between(&before.1, &after.1, after.0 - before.0);
        let mut out = std::io::stdout().lock();
        if terminal && !args.once {
            // Clear the screen and go home: the view is redrawn in place.
            write!(out, "\x1b[2J\x1b[H")?;
        }
        write!(out, "{}", view.render(&args.url))?;
        out.flush()?;
        if args.once {
            return Ok(());
        }
        if !terminal {
            writeln!(out)?;
        }
        before = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{Metrics, Outcome};

    fn snapshot(metrics: &Metrics) -> Snapshot {
        Snapshot::of(&parse(&metrics.render()).expect("Capsule's own metrics parse"))
    }

    #[test]
    fn a_view_of_two_scrapes_of_capsule_metrics() {
        let metrics = Metrics::new();
        let add = metrics.tool("acme", "calc", "add");
        add.call(Outcome::Ok, Duration::from_micros(300));
        let before = snapshot(&metrics);
        for _ in 0..98 {
            add.call(Outcome::Ok, Duration::from_micros(300));
        }
        metrics.tool("acme", "calc", "mul").call(Outcome::Ok, Duration::from_millis(40));
        add.call(Outcome::Deadline, Duration::from_millis(900));
        metrics.tool("acme", "hostile", "spin").call(Outcome::Memory, Duration::from_millis(3));
        metrics.plugin("acme", "hostile").sandbox(Duration::from_micros(9), Duration::from_micros(3), 3 << 20, false);
        let _running = add.running();
        let view = View::between(&before, &snapshot(&metrics), Duration::from_secs(2));

        assert_eq!(view.in_flight, 1.0);
        let calc = &view.rows[0];
        assert_eq!((calc.tenant.as_str(), calc.plugin.as_str()), ("acme", "calc"));
        assert_eq!(calc.calls_per_second, 50.0);
        assert_eq!(calc.total, 101.0);
        assert_eq!(calc.failures, vec![("deadline".to_owned(), 1.0)]);
        // 98 of the 100 calls took 300 µs: the median is in the (200, 400] µs bucket, the
        // 99th percentile in the 40 ms call's.
        let p50 = calc.p50.unwrap();
        assert!(p50 > Duration::from_micros(200) && p50 <= Duration::from_micros(400), "{p50:?}");
        let p99 = calc.p99.unwrap();
        assert!(p99 > Duration::from_millis(25) && p99 <= Duration::from_millis(52), "{p99:?}");
        let hostile = &view.rows[1];
        assert_eq!(hostile.failures, vec![("memory".to_owned(), 1.0)]);
        assert_eq!(hostile.memory, f64::from(3 << 20));
        let table = view.render("http://127.0.0.1:9464/metrics");
        assert!(table.contains("calc") && table.contains("deadline 1") && table.contains("3.0MiB"), "{table}");
    }

    #[test]
    fn a_server_restarted_between_two_scrapes_counts_from_zero() {
        let old = Metrics::new();
        for _ in 0..200 {
            old.tool("acme", "calc", "add").call(Outcome::Ok, Duration::from_micros(300));
        }
        let before = snapshot(&old);
        let restarted = Metrics::new();
        for _ in 0..10 {
            restarted.tool("acme", "calc", "add").call(Outcome::Ok, Duration::from_micros(300));
        }
        let view = View::between(&before, &snapshot(&restarted), Duration::from_secs(2));
        assert_eq!(view.rows[0].calls_per_second, 5.0);
        assert!(view.rows[0].p50.is_some());
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket() {
        let buckets = [(0.1, 0.0), (0.2, 10.0), (f64::INFINITY, 10.0)];
        let median = quantile(0.5, &buckets).unwrap().as_secs_f64();
        assert!((median - 0.15).abs() < 1e-9, "{median}");
        let beyond = quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 4.0)]).unwrap().as_secs_f64();
        assert!((beyond - 0.1).abs() < 1e-9, "{beyond}");
        assert_eq!(quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(quantile(0.5, &[]), None);
        // Bounds no duration holds, as a hostile endpoint may send, give none and no panic.
        assert_eq!(quantile(0.5, &[(1e300, 4.0), (f64::INFINITY, 4.0)]), None);
        assert_eq!(quantile(0.5, &[(1e20, 0.0), (f64::INFINITY, 4.0)]), None);
        assert_eq!(quantile(0.5, &[(-5.0, 4.0), (f64::INFINITY, 4.0)]), None);
    }

    #[test]
    fn label_values_reach_the_terminal_without_control_characters() {
        assert!(matches!(printable("calc"), std::borrow::Cow::Borrowed("calc")));
        assert_eq!(printable("tk\u{1b}]0;PWNED\u{7}\u{1b}[2J"), "tk\\u{1b}]0;PWNED\\u{7}\\u{1b}[2J");
        assert_eq!(printable("add\u{202e}lave"), "add\\u{202e}lave");
        assert!(matches!(printable("café"), std::borrow::Cow::Borrowed("café")));
    }
}
