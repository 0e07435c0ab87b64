//! Reading the Prometheus text format (and its OpenMetrics flavour, which Capsule writes):
//! samples with their labels, comments and `# EOF` skipped.
//!
//! Written here rather than taken from `prometheus-parse`, which keys a histogram's buckets by
//! metric name alone (every labelled series of one histogram merged into one) and splits label
//! values at commas.

use thiserror::Error;

/// A sample's labels, names with values, in order.
pub type Labels = Vec<(String, String)>;

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A line that is not a sample, a comment or empty.
#[derive(Debug, Error, PartialEq)]
#[error("line {line} of the metrics is not in the Prometheus text format: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub reason: &'static str,
}

/// Every sample in `text`, in order.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let error = |reason| ParseError { line: at + 1, reason };
        let name_end = line.find(|c: char| c == '{' || c.is_whitespace()).ok_or(error("a sample without a value"))?;
        let (name, mut rest) = line.split_at(name_end);
        if name.is_empty() {
            return Err(error("a sample without a name"));
        }
        let mut labels = Vec::new();
        if let Some(inside) = rest.strip_prefix('{') {
            let (read, after) = read_labels(inside).map_err(error)?;
            labels = read;
            rest = after;
        }
        // A timestamp may follow the value.
        let value = rest.split_whitespace().next().ok_or(error("a sample without a value"))?;
        let value = match value {
            "+Inf" | "Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            number => number.parse().map_err(|_| error("a value that is not a number"))?,
        };
        samples.push(Sample { name: name.to_owned(), labels, value });
    }
    Ok(samples)
}

/// The labels of `text` (what follows a sample's `{`), and what follows its `}`.
fn read_labels(mut text: &str) -> Result<(Labels, &str), &'static str> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start();
        if let Some(after) = text.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = text.split_once('=').ok_or("a label without a value")?;
        let mut chars = after.strip_prefix('"').ok_or("a label value without quotes")?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next().ok_or("an unterminated label value")? {
                (at, '"') => break at,
                (_, '\\') => match chars.next().ok_or("an unterminated label value")?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((name.trim().to_owned(), value));
        text = after[1 + end + 1..].trim_start();
        text = text.strip_prefix(',').unwrap_or(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_with_escaped_labels_and_skips_comments() {
        let text = "# HELP x the x\n# TYPE x counter\nx_total{a=\"1,2\",b=\"q\\\"uote\\\\\\n\"} 3 1700000000\n\
                    plain 2.5\nh_bucket{t=\"x\",le=\"+Inf\"} +Inf\n# EOF\n";
        let samples = parse(text).unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].name, "x_total");
        assert_eq!(samples[0].label("a"), Some("1,2"));
        assert_eq!(samples[0].label("b"), Some("q\"uote\\\n"));
        assert_eq!(samples[0].value, 3.0);
        assert_eq!((samples[1].name.as_str(), samples[1].value), ("plain", 2.5));
        assert_eq!(samples[2].label("le"), Some("+Inf"));
        assert!(samples[2].value.is_infinite());
    }

    #[test]
    fn refuses_what_is_not_the_format() {
        assert_eq!(parse("ok 1\nbroken{a=1} 2").unwrap_err().line, 2);
        assert!(parse("x{a=\"open} 1").is_err());
        assert!(parse("x nope").is_err());
        assert!(parse("lonely").is_err());
    }
}
