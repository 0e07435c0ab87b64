//! Aggregating repetitions and printing the table and ratios.

use crate::load::Sample;

/// Repetitions of one configuration.
pub struct Row {
    pub name: String,
    pub samples: Vec<Sample>,
}

pub fn min_median_max(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => (f64::NAN, f64::NAN, f64::NAN),
        n => (values[0], values[n / 2], values[n - 1]),
    }
}

impl Row {
    pub fn throughput(&self) -> (f64, f64, f64) {
        min_median_max(self.samples.iter().map(Sample::throughput).collect())
    }

    pub fn errors(&self) -> u64 {
        self.samples.iter().map(|s| s.errors).sum()
    }

    pub fn latency(&self, p: f64) -> (f64, f64, f64) {
        min_median_max(self.samples.iter().map(|s| s.percentile(p)).collect())
    }

    /// The server's median CPU time per call, in microseconds.
    pub fn cpu_per_call(&self) -> Option<f64> {
        let values: Vec<f64> = self.samples.iter().filter_map(Sample::cpu_per_call).collect();
        (!values.is_empty()).then(|| min_median_max(values).1)
    }

    pub fn line(&self) -> String {
        let (t_min, t_med, t_max) = self.throughput();
        let cpu = self.cpu_per_call().map_or_else(|| "-".to_owned(), |cpu| format!("{cpu:.1}"));
        let (_, p50, _) = self.latency(50.0);
        let (p99_min, p99_med, p99_max) = self.latency(99.0);
        let stalls: usize = self.samples.iter().map(Sample::stalls).sum();
        let calls: u64 = self.samples.iter().map(|s| s.calls).sum();
        format!(
            "| {:<34} | {:>8.0} / {:>8.0} / {:>8.0} | {:>8.0} | {:>7.0} / {:>7.0} / {:>7.0} | {:>9} | {:>6} | {:>6} | {:>8} |",
            self.name,
            t_min,
            t_med,
            t_max,
            p50,
            p99_min,
            p99_med,
            p99_max,
            cpu,
            stalls,
            self.errors(),
            calls
        )
    }
}

pub const HEADER: &str = "| configuration                      | calls/s min / median / max     | p50 µs   | p99 µs min / median / max | server CPU µs/call | stalls | errors | calls    |\n|---|---|---|---|---|---|---|---|";

/// Ratio of medians, `a / b`.
pub fn ratio(a: &Row, b: &Row) -> f64 {
    a.throughput().1 / b.throughput().1
}

pub fn stat_line(name: &str, unit: &str, values: Vec<f64>) -> String {
    let (min, median, max) = min_median_max(values);
    format!("| {name:<48} | {min:>10.2} | {median:>10.2} | {max:>10.2} | {unit} |")
}

pub const STAT_HEADER: &str = "| measurement                                      | min        | median     | max        | unit |\n|---|---|---|---|---|";
