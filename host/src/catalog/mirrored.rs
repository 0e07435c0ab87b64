//! The arguments a tool asks 2026-07-28 HTTP clients to mirror into `Mcp-Param-*` headers
//! (SEP-2243's `x-mcp-header`), read and checked once when the tool loads. Clients must drop
//! a tool whose annotations break the rules, so such a tool is refused here, with the
//! reason, rather than served and silently missing from every client's list.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// One mirrored argument: where it sits in the arguments, and its header's name suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirroredParam {
    /// Property names from the arguments object down to the value.
    pub path: Box<[Box<str>]>,
    /// The `{name}` of `Mcp-Param-{name}`, as the schema spells it.
    pub header: Box<str>,
}

impl MirroredParam {
    /// The property's dotted path, for messages.
    pub fn property(&self) -> String {
        self.path.join(".")
    }
}

/// The `x-mcp-header` annotations of an input schema, reached from its root through
/// `properties` alone (the only way a client can find them without evaluating the schema).
/// `Err` says which annotation breaks which rule.
pub fn mirrored_params(schema: &Map<String, Value>) -> Result<Box<[MirroredParam]>, String> {
    stray(schema, (false, true), &mut String::new())?;
    let mut found = Vec::new();
    collect(schema.get("properties"), &mut Vec::new(), &mut found)?;
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(found.len());
    for (i, param) in found.iter().enumerate() {
        let folded = param.header.to_ascii_lowercase();
        if let Some(&earlier) = seen.get(&folded) {
            let earlier = &found[earlier];
            return Err(format!(
                "x-mcp-header {:?} of `{}` repeats that of `{}` (names are compared without case)",
                param.header,
                param.property(),
                earlier.property()
            ));
        }
        seen.insert(folded, i);
    }
    Ok(found.into())
}

/// Keywords whose values are data, not schemas: a key `x-mcp-header` in them is no annotation.
const DATA: [&str; 4] = ["const", "enum", "default", "examples"];

/// Refuse an annotation where a client would not look for it: on the root, or reached through
/// anything but `properties` (`items`, `anyOf`, `$defs`, ...). Clients drop such a tool.
/// `reachable`: whether `schema` is a property reached through `properties` alone; `chain`:
/// whether its own properties are.
fn stray(schema: &Map<String, Value>, (reachable, chain): (bool, bool), at: &mut String) -> Result<(), String> {
    if !reachable && schema.contains_key("x-mcp-header") {
        let place = if at.is_empty() { "the schema's root".to_owned() } else { format!("`{at}`") };
        return Err(format!(
            "x-mcp-header at {place} is not on a property reached through \"properties\" alone; clients look \
             for it nowhere else, and drop a tool that has one there"
        ));
    }
    for (key, value) in schema {
        if DATA.contains(&key.as_str()) {
            continue;
        }
        let len = at.len();
        at.push('/');
        at.push_str(key);
        match (key.as_str(), value) {
            // Maps of names to schemas: each entry is a schema, whatever its name.
            (
                "$defs" | "definitions" | "patternProperties" | "dependentSchemas" | "dependencies",
                Value::Object(map),
            ) => {
                for (name, schema) in map {
                    let len = at.len();
                    at.push('/');
                    at.push_str(name);
                    stray_in(schema, at)?;
                    at.truncate(len);
                }
            }
            ("properties", Value::Object(properties)) => {
                for (name, property) in properties {
                    let len = at.len();
                    at.push('/');
                    at.push_str(name);
                    if let Value::Object(property) = property {
                        stray(property, (chain, chain), at)?;
                    }
                    at.truncate(len);
                }
            }
            _ => stray_in(value, at)?,
        }
        at.truncate(len);
    }
    Ok(())
}

/// [`stray`] for a value off the `properties` chain: every schema in it is unreachable.
fn stray_in(value: &Value, at: &mut String) -> Result<(), String> {
    match value {
        Value::Object(schema) => stray(schema, (false, false), at),
        Value::Array(items) => items.iter().try_for_each(|item| stray_in(item, at)),
        _ => Ok(()),
    }
}

fn collect(properties: Option<&Value>, path: &mut Vec<Box<str>>, out: &mut Vec<MirroredParam>) -> Result<(), String> {
    let Some(Value::Object(properties)) = properties else { return Ok(()) };
    for (name, schema) in properties {
        path.push(name.as_str().into());
        if let Some(header) = schema.get("x-mcp-header") {
            let property = path.join(".");
            let header = checked_header(header).map_err(|reason| format!("x-mcp-header of `{property}` {reason}"))?;
            if !is_primitive(schema.get("type")) {
                return Err(format!(
                    "x-mcp-header of `{property}` is on a property whose \"type\" is not \"string\", \
                     \"integer\" or \"boolean\" (or one of them and \"null\"); 2026-07-28 allows no other"
                ));
            }
            out.push(MirroredParam { path: path.clone().into(), header: header.into() });
        }
        collect(schema.get("properties"), path, out)?;
        path.pop();
    }
    Ok(())
}

/// An annotation's value, if it can name a header: non-empty ASCII without space or `:`
/// (SEP-2243), and an HTTP token, since nothing else can be sent as part of a header name.
fn checked_header(value: &Value) -> Result<&str, &'static str> {
    let Value::String(header) = value else { return Err("must be a string") };
    if header.is_empty() {
        return Err("must not be empty");
    }
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if !header.bytes().all(token) {
        return Err("may only contain letters, digits and !#$%&'*+-.^_`|~ (it becomes part of an HTTP header name)");
    }
    Ok(header)
}

/// Whether a schema's `type` admits one of 2026-07-28's header types (`string`, `integer`,
/// `boolean`; not `number`), a `null` beside it being the absent header.
fn is_primitive(ty: Option<&Value>) -> bool {
    let primitive = |t: &str| matches!(t, "string" | "integer" | "boolean");
    match ty {
        Some(Value::String(t)) => primitive(t),
        Some(Value::Array(types)) => {
            let names: Option<Vec<&str>> = types.iter().map(Value::as_str).collect();
            names.is_some_and(|names| {
                names.iter().any(|t| primitive(t)) && names.iter().all(|t| primitive(t) || *t == "null")
            })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn params(schema: Value) -> Result<Box<[MirroredParam]>, String> {
        mirrored_params(schema.as_object().unwrap())
    }

    #[test]
    fn annotations_are_found_through_properties_alone() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "query": {"type": "string"},
            "target": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}},
            "list": {"type": "array", "items": {"type": "string"}, "default": [{"x-mcp-header": "data"}]},
            "x-mcp-header": {"type": "boolean"}
        }});
        let found = params(schema).unwrap();
        let found: Vec<(String, &str)> = found.iter().map(|p| (p.property(), &*p.header)).collect();
        assert_eq!(found, [("region".to_owned(), "Region"), ("target.n".to_owned(), "N")]);
        assert!(params(json!({"type": "object"})).unwrap().is_empty());
    }

    #[test]
    fn annotations_that_break_the_rules_are_refused() {
        let with = |annotation: Value, ty: Value| {
            params(json!({"type": "object", "properties": {"p": {"type": ty, "x-mcp-header": annotation}}}))
                .unwrap_err()
        };
        assert!(with(json!(""), json!("string")).contains("must not be empty"));
        assert!(with(json!("Re gion"), json!("string")).contains("may only contain"));
        assert!(with(json!("Re:gion"), json!("string")).contains("may only contain"));
        assert!(with(json!("Régión"), json!("string")).contains("may only contain"));
        assert!(with(json!(5), json!("string")).contains("must be a string"));
        for ty in [json!("object"), json!("number"), json!(["null"]), json!(["number", "null"])] {
            assert!(with(json!("P"), ty.clone()).contains("2026-07-28 allows no other"), "{ty}");
        }
        let untyped = json!({"type": "object", "properties": {"p": {"x-mcp-header": "P"}}});
        assert!(params(untyped).unwrap_err().contains("allows no other"));
        let optional =
            json!({"type": "object", "properties": {"p": {"type": ["string", "null"], "x-mcp-header": "P"}}});
        assert_eq!(params(optional).unwrap().len(), 1);
        let elsewhere = |schema: Value, at: &str| {
            let error = params(schema).unwrap_err();
            assert!(error.contains(&format!("x-mcp-header at {at} is not on a property")), "{error}");
        };
        let item = json!({"type": "string", "x-mcp-header": "Item"});
        elsewhere(json!({"type": "object", "x-mcp-header": "Root"}), "the schema's root");
        elsewhere(
            json!({"type": "object", "properties": {"l": {"type": "array", "items": item}}}),
            "`/properties/l/items`",
        );
        elsewhere(json!({"type": "object", "properties": {"u": {"anyOf": [item]}}}), "`/properties/u/anyOf`");
        elsewhere(json!({"type": "object", "$defs": {"d": item}}), "`/$defs/d`");
        elsewhere(json!({"type": "object", "$defs": {"default": item}}), "`/$defs/default`");
        let named = json!({"type": "object", "$defs": {"x-mcp-header": {"type": "string"}}});
        assert!(params(named).unwrap().is_empty(), "a definition may be named x-mcp-header");
        elsewhere(
            json!({"type": "object", "properties": {"o": {"additionalProperties": item}}}),
            "`/properties/o/additionalProperties`",
        );
        let twice = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "Region"},
            "b": {"type": "string", "x-mcp-header": "region"}
        }});
        assert!(params(twice).unwrap_err().contains("repeats that of `a`"));
    }
}
