//! Calculator tools: a safe expression evaluator, unit conversion and descriptive statistics.

mod expr;
mod units;

use capsule_sdk::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: f64,
    /// The second addend.
    b: f64,
}

fn add(args: AddArgs) -> String {
    (args.a + args.b).to_string()
}

#[derive(Deserialize, JsonSchema)]
struct EvaluateArgs {
    /// An arithmetic expression, e.g. `2 * (3 + 4) ^ 2 / sqrt(16)`. Supports + - * / % ^,
    /// parentheses, pi, e, and sqrt, abs, ln, log10, log2, exp, sin, cos, tan, asin, acos,
    /// atan, floor, ceil, round, min(a, b), max(a, b).
    expression: String,
}

#[derive(Serialize, JsonSchema)]
struct Evaluation {
    /// The expression as given.
    expression: String,
    /// Its value.
    result: f64,
}

fn evaluate(args: EvaluateArgs) -> Result<Json<Evaluation>, String> {
    let result = expr::evaluate(&args.expression)?;
    Ok(Json(Evaluation { expression: args.expression, result }))
}

#[derive(Deserialize, JsonSchema)]
struct ConvertArgs {
    /// The quantity to convert.
    value: f64,
    /// The unit it is in, e.g. `km`, `lb`, `degF`, `MiB`, `h`.
    from: String,
    /// The unit to convert to (same category as `from`).
    to: String,
}

fn convert(args: ConvertArgs) -> Result<String, String> {
    let result = units::convert(args.value, &args.from, &args.to)?;
    Ok(format!("{} {} = {} {}", args.value, args.from, result, args.to))
}

#[derive(Deserialize, JsonSchema)]
struct StatsArgs {
    /// The numbers to describe (at least one).
    values: Vec<f64>,
}

#[derive(Serialize, JsonSchema)]
struct Stats {
    count: usize,
    sum: f64,
    mean: f64,
    median: f64,
    min: f64,
    max: f64,
    /// Population standard deviation.
    stddev: f64,
}

fn statistics(args: StatsArgs) -> Result<Json<Stats>, String> {
    let mut values = args.values;
    if values.is_empty() {
        return Err("statistics needs at least one value".into());
    }
    if values.iter().any(|v| !v.is_finite()) {
        return Err("values must be finite numbers".into());
    }
    values.sort_by(f64::total_cmp);
    let count = values.len();
    let sum: f64 = values.iter().sum();
    let mean = sum / count as f64;
    let median = if count % 2 == 1 { values[count / 2] } else { (values[count / 2 - 1] + values[count / 2]) / 2.0 };
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / count as f64;
    Ok(Json(Stats { count, sum, mean, median, min: values[0], max: values[count - 1], stddev: variance.sqrt() }))
}

capsule_sdk::plugin!(|p| {
    p.tool("add", "Add two numbers", add).read_only().idempotent();
    p.tool("evaluate", "Evaluate an arithmetic expression exactly as written, without running any code", evaluate)
        .title("Evaluate expression")
        .read_only()
        .idempotent();
    p.tool(
        "convert_units",
        "Convert a quantity between units of length, mass, temperature, time, speed or data size",
        convert,
    )
    .title("Convert units")
    .read_only()
    .idempotent();
    p.tool("statistics", "Count, sum, mean, median, min, max and standard deviation of a list of numbers", statistics)
        .read_only()
        .idempotent();
    p.template("calc://units/{category}", "Units of a category", Some("text/plain"), |vars: UriVariables| {
        units::list(vars.get("category").unwrap_or_default())
    })
    .description("The units convert_units knows in one category: length, mass, temperature, time, speed or data");
    p.complete_template("calc://units/{category}", "category", |prefix| {
        units::CATEGORIES.iter().filter(|c| c.starts_with(prefix)).map(|c| c.to_string()).collect()
    });
});
