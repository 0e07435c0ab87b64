//! Unit conversion by category. Linear units convert through a base unit; temperature has
//! offsets and is handled on its own.

pub const CATEGORIES: &[&str] = &["data", "length", "mass", "speed", "temperature", "time"];

/// (unit, category, size in the category's base unit)
const LINEAR: &[(&str, &str, f64)] = &[
    ("mm", "length", 0.001),
    ("cm", "length", 0.01),
    ("m", "length", 1.0),
    ("km", "length", 1000.0),
    ("in", "length", 0.0254),
    ("ft", "length", 0.3048),
    ("yd", "length", 0.9144),
    ("mi", "length", 1609.344),
    ("nmi", "length", 1852.0),
    ("mg", "mass", 1e-6),
    ("g", "mass", 0.001),
    ("kg", "mass", 1.0),
    ("t", "mass", 1000.0),
    ("oz", "mass", 0.028349523125),
    ("lb", "mass", 0.45359237),
    ("ms", "time", 0.001),
    ("s", "time", 1.0),
    ("min", "time", 60.0),
    ("h", "time", 3600.0),
    ("d", "time", 86400.0),
    ("wk", "time", 604800.0),
    ("m/s", "speed", 1.0),
    ("km/h", "speed", 1000.0 / 3600.0),
    ("mph", "speed", 0.44704),
    ("kn", "speed", 1852.0 / 3600.0),
    ("bit", "data", 0.125),
    ("B", "data", 1.0),
    ("KB", "data", 1e3),
    ("MB", "data", 1e6),
    ("GB", "data", 1e9),
    ("TB", "data", 1e12),
    ("KiB", "data", 1024.0),
    ("MiB", "data", 1048576.0),
    ("GiB", "data", 1073741824.0),
    ("TiB", "data", 1099511627776.0),
];

const TEMPERATURE: &[&str] = &["degC", "degF", "K"];

fn to_kelvin(value: f64, unit: &str) -> Option<f64> {
    match unit {
        "degC" => Some(value + 273.15),
        "degF" => Some((value - 32.0) * 5.0 / 9.0 + 273.15),
        "K" => Some(value),
        _ => None,
    }
}

fn from_kelvin(kelvin: f64, unit: &str) -> Option<f64> {
    match unit {
        "degC" => Some(kelvin - 273.15),
        "degF" => Some((kelvin - 273.15) * 9.0 / 5.0 + 32.0),
        "K" => Some(kelvin),
        _ => None,
    }
}

fn linear(unit: &str) -> Option<(&'static str, f64)> {
    LINEAR.iter().find(|(name, _, _)| *name == unit).map(|&(_, category, size)| (category, size))
}

pub fn convert(value: f64, from: &str, to: &str) -> Result<f64, String> {
    if TEMPERATURE.contains(&from) || TEMPERATURE.contains(&to) {
        let kelvin = to_kelvin(value, from).ok_or_else(|| format!("cannot convert {from} to a temperature"))?;
        if kelvin < 0.0 {
            return Err(format!("{value} {from} is below absolute zero"));
        }
        return from_kelvin(kelvin, to).ok_or_else(|| format!("cannot convert a temperature to {to}"));
    }
    let (from_category, from_size) = linear(from).ok_or_else(|| unknown(from))?;
    let (to_category, to_size) = linear(to).ok_or_else(|| unknown(to))?;
    if from_category != to_category {
        return Err(format!("cannot convert {from} ({from_category}) to {to} ({to_category})"));
    }
    Ok(value * from_size / to_size)
}

fn unknown(unit: &str) -> String {
    format!("unknown unit {unit:?}; read calc://units/{{category}} for the units of a category")
}

pub fn list(category: &str) -> Option<String> {
    if category == "temperature" {
        return Some(TEMPERATURE.join("\n"));
    }
    let units: Vec<&str> = LINEAR.iter().filter(|(_, c, _)| *c == category).map(|(name, _, _)| *name).collect();
    (!units.is_empty()).then(|| units.join("\n"))
}
