//! How much work a plugin's JSON Schema can make one validation do, bounded before the schema
//! is accepted.
//!
//! Schemas come from untrusted plugins and are applied on the host, outside any plugin's CPU
//! deadline. Without `$ref` a schema's work per instance node is at most its size; with it, a
//! chain of definitions each referring twice to the next (`aK = allOf[aK-1, aK-1]`) doubles
//! at every step, so a kilobyte of schema would hold a thread for hours on `{}`. The weight
//! here is the schema's size with every reference expanded in place: what one instance node
//! may cost at most. A reference back into a definition being expanded counts one: recursion
//! is bounded by the instance's own depth, and when it checks validity jsonschema remembers a
//! recursive reference's result per object and array. It does not when it describes an
//! error, so the violations of a value a recursive schema refuses are not described.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// The most expanded schema objects a tool's schema may weigh: ~1 ms of validation for an
/// empty instance, and orders of magnitude above what generated schemas weigh (a large
/// OpenAPI-derived schema weighs a few thousand).
pub const MAX_WEIGHT: u64 = 100_000;

/// The most schema objects weighing a schema may visit.
const MAX_VISITS: u64 = 4 * MAX_WEIGHT;

/// How deep expansion may nest (objects and references together). Generated schemas nest a
/// few dozen levels; a chain of tens of thousands of references is refused here, before
/// jsonschema spends seconds compiling it.
const MAX_DEPTH: usize = 256;

/// The weight of `root` (see the module doc) and whether it refers back into itself, or why
/// it cannot be bounded.
pub fn weigh(root: &Map<String, Value>) -> Result<Weight, String> {
    let mut scale = Scale::new(root);
    scale.collect(root, 0, true)?;
    let weight = scale.object(root, 0)?;
    if weight > MAX_WEIGHT {
        return Err(too_heavy());
    }
    Ok(Weight { weight, recursive: scale.back_edges > 0 })
}

/// What [`weigh`] finds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Weight {
    /// Expanded schema objects.
    pub weight: u64,
    /// Whether a reference leads back into a definition being expanded. jsonschema remembers
    /// such a reference's result only when it checks validity, not when it describes an
    /// error, so an invalid value is then described without its violation.
    pub recursive: bool,
}

fn too_heavy() -> String {
    format!(
        "expanding its $refs gives more than {MAX_WEIGHT} schema objects, which would make validating one value \
         that costly; define shared parts once and refer to them fewer times"
    )
}

struct Scale<'a> {
    root: &'a Map<String, Value>,
    /// The root's `$id`: a reference naming it names the root.
    base: Option<&'a str>,
    /// Subschemas by their `$anchor` or `$dynamicAnchor`.
    anchors: HashMap<&'a str, &'a Map<String, Value>>,
    /// The weights of reference targets already expanded, by address.
    weights: HashMap<*const Map<String, Value>, u64>,
    /// Reference targets being expanded: a reference to one of them is recursion.
    open: Vec<*const Map<String, Value>>,
    /// References met that led back into an open target.
    back_edges: u64,
    /// Schema objects visited so far.
    visits: u64,
}

impl<'a> Scale<'a> {
    fn new(root: &'a Map<String, Value>) -> Scale<'a> {
        Scale {
            root,
            base: root.get("$id").and_then(Value::as_str).map(|id| id.trim_end_matches('#')),
            anchors: HashMap::new(),
            weights: HashMap::new(),
            open: Vec::new(),
            back_edges: 0,
            visits: 0,
        }
    }

    /// Collect the anchors, and refuse what would make a reference mean something else to
    /// jsonschema than here: an `$id` below the root starts a schema resource of its own,
    /// against which its `#…` references resolve, and an anchor declared twice is ambiguous.
    /// Every member is walked, whatever its key: under `properties` a key is a name, not a
    /// keyword, so no key can hide a subschema.
    fn collect(&mut self, object: &'a Map<String, Value>, depth: usize, root: bool) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("it nests deeper than {MAX_DEPTH} levels"));
        }
        if !root && object.get("$id").is_some_and(Value::is_string) {
            return Err("an $id below the root (a schema resource inside the schema) is not supported; \
                        put shared parts in $defs and refer to them with \"#/$defs/...\""
                .into());
        }
        for key in ["$anchor", "$dynamicAnchor"] {
            if let Some(Value::String(anchor)) = object.get(key)
                && let Some(earlier) = self.anchors.insert(anchor, object)
                && !std::ptr::eq(earlier, object)
            {
                return Err(format!("the anchor {:?} is declared twice", anchor.chars().take(100).collect::<String>()));
            }
        }
        for value in object.values() {
            for child in children(value) {
                self.collect(child, depth + 1, false)?;
            }
        }
        Ok(())
    }

    fn object(&mut self, object: &'a Map<String, Value>, depth: usize) -> Result<u64, String> {
        if depth > MAX_DEPTH {
            return Err(format!("it nests (counting $refs) deeper than {MAX_DEPTH} levels"));
        }
        // Visits are what the weighing costs: a target inside a cycle is expanded again at
        // each reference (its weight holds only there), so they are bounded apart from the
        // weight, and the weight is checked after every child rather than every key (an
        // `allOf` of 300,000 such references once took the weighing tens of minutes).
        self.visits += 1;
        if self.visits > MAX_VISITS {
            return Err(too_heavy());
        }
        let mut weight: u64 = 1;
        for (key, value) in object {
            if let ("$ref" | "$dynamicRef" | "$recursiveRef", Value::String(reference)) = (key.as_str(), value) {
                weight = weight.saturating_add(self.reference(reference, depth)?);
            } else {
                for child in children(value) {
                    weight = weight.saturating_add(self.object(child, depth + 1)?);
                    if weight > MAX_WEIGHT {
                        return Err(too_heavy());
                    }
                }
            }
            if weight > MAX_WEIGHT {
                return Err(too_heavy());
            }
        }
        Ok(weight)
    }

    fn reference(&mut self, reference: &str, depth: usize) -> Result<u64, String> {
        let Some(target) = self.resolve(reference) else {
            // The bundled meta-schemas: their cost does not depend on the plugin.
            if reference.starts_with("https://json-schema.org/") || reference.starts_with("http://json-schema.org/") {
                return Ok(1);
            }
            return Err(format!(
                "$ref {:?} does not name a part of this schema by \"#\", a JSON pointer, an anchor or the root's $id",
                reference.chars().take(100).collect::<String>()
            ));
        };
        let key = target as *const Map<String, Value>;
        if self.open.contains(&key) {
            self.back_edges += 1;
            return Ok(1);
        }
        if let Some(&weight) = self.weights.get(&key) {
            return Ok(weight);
        }
        let back_edges = self.back_edges;
        self.open.push(key);
        let weight = self.object(target, depth + 1);
        self.open.pop();
        let weight = weight?;
        // A weight that counted a way back into an open target as one holds only inside
        // that cycle: elsewhere the target is expanded again.
        if self.back_edges == back_edges {
            self.weights.insert(key, weight);
        }
        Ok(weight)
    }

    /// The subschema `reference` names inside this document, if it names one.
    fn resolve(&self, reference: &str) -> Option<&'a Map<String, Value>> {
        let (base, fragment) = reference.split_once('#').unwrap_or((reference, ""));
        if !base.is_empty() && Some(base) != self.base {
            return None;
        }
        if fragment.is_empty() {
            return Some(self.root);
        }
        if !fragment.starts_with('/') {
            return self.anchors.get(fragment).copied();
        }
        // Each step goes into an object's member or an array's element (`allOf/0`).
        let mut node: Option<&'a Value> = None;
        for token in fragment[1..].split('/') {
            let token = percent_decode(token)?.replace("~1", "/").replace("~0", "~");
            node = Some(match node {
                None => self.root.get(&token)?,
                Some(Value::Object(map)) => map.get(&token)?,
                Some(Value::Array(items)) => items.get(token.parse::<usize>().ok()?)?,
                Some(_) => return None,
            });
        }
        node.and_then(Value::as_object)
    }
}

/// The schema objects directly inside `value`: itself, or the objects of an array.
fn children(value: &Value) -> impl Iterator<Item = &Map<String, Value>> {
    let (one, many) = match value {
        Value::Object(map) => (Some(map), None),
        Value::Array(items) => (None, Some(items.iter().filter_map(Value::as_object))),
        _ => (None, None),
    };
    one.into_iter().chain(many.into_iter().flatten())
}

fn percent_decode(token: &str) -> Option<String> {
    if !token.contains('%') {
        return Some(token.to_owned());
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = token.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn weight(schema: Value) -> Result<u64, String> {
        weigh(schema.as_object().expect("an object")).map(|w| w.weight)
    }

    /// `a0 = {type: string}`, `aK = allOf[aK-1, aK-1]`: 2^K expansions of `a0`.
    fn doubling(levels: usize) -> Value {
        let mut defs = Map::new();
        defs.insert("a0".into(), json!({"type": "string"}));
        for k in 1..=levels {
            let below = format!("#/$defs/a{}", k - 1);
            defs.insert(format!("a{k}"), json!({"allOf": [{"$ref": below}, {"$ref": below}]}));
        }
        json!({"type": "object", "properties": {"x": {"$ref": format!("#/$defs/a{levels}")}}, "$defs": defs})
    }

    #[test]
    fn a_reference_doubling_at_every_step_is_refused() {
        assert!(weight(doubling(8)).is_ok());
        let refused = weight(doubling(20)).unwrap_err();
        assert!(refused.contains("more than 100000 schema objects"), "{refused}");
        // The same refusal when the chain closes into a cycle.
        let mut cyclic = doubling(20);
        cyclic["$defs"]["a0"] = json!({"anyOf": [{"type": "string"}, {"$ref": "#/$defs/a20"}]});
        assert!(weight(cyclic).is_err());
    }

    /// A target inside a cycle is expanded again at each reference, so weighing is bounded
    /// by what it visits too: `top` refers 2,000 times to `a13`, which weighs ~49,000 and
    /// leads back to `top` (~80 million visits before, and hours at 300,000 references).
    #[test]
    fn many_references_into_a_cycle_are_refused_after_few_visits() {
        let mut defs = Map::new();
        defs.insert("a0".into(), json!({"anyOf": [{"$ref": "#/$defs/top"}]}));
        for k in 1..=13 {
            let below = format!("#/$defs/a{}", k - 1);
            defs.insert(format!("a{k}"), json!({"allOf": [{"$ref": below}, {"$ref": below}]}));
        }
        defs.insert("top".into(), json!({"allOf": vec![json!({"$ref": "#/$defs/a13"}); 2_000]}));
        let schema = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/top"}}, "$defs": defs});
        let root = schema.as_object().unwrap();
        let mut scale = Scale::new(root);
        assert!(scale.object(root, 0).unwrap_err().contains("more than 100000"));
        assert!(scale.visits <= 2 * MAX_WEIGHT, "{} visits", scale.visits);
    }

    #[test]
    fn generated_and_recursive_schemas_weigh_little() {
        let tree = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}, "other": {"$ref": "#/definitions/Leaf"}},
            "$defs": {"Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                "label": {"type": "string", "enum": ["a", "b"], "default": {"deep": {"not": "a schema"}}}
            }}},
            "definitions": {"Leaf": {"type": "integer"}}
        });
        let weighed = weight(tree).unwrap();
        assert!(weighed < 40, "{weighed}");
        let anchored = json!({"type": "object", "properties": {"a": {"$ref": "#leaf"}, "b": {"$ref": "#/allOf/0"}},
            "allOf": [{"type": "object"}], "$defs": {"x": {"$anchor": "leaf", "type": "string"}}});
        assert!(weight(anchored).is_ok());
        let by_id = json!({"$id": "https://example.com/tool.json", "type": "object",
            "properties": {"a": {"$ref": "https://example.com/tool.json#/$defs/s"}, "b": {"$ref": "#"}},
            "$defs": {"s": {"type": "string"}}});
        assert!(weight(by_id).is_ok());
        let escaped = json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/a~1b%20c"}},
            "$defs": {"a/b c": {"type": "string"}}});
        assert!(weight(escaped).is_ok());
        let meta =
            json!({"type": "object", "properties": {"s": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}});
        assert!(weight(meta).is_ok());
        let weigh_of = |schema: Value| weigh(schema.as_object().unwrap()).unwrap();
        assert!(
            weigh_of(json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}},
            "$defs": {"N": {"properties": {"next": {"$ref": "#/$defs/N"}}}}}))
            .recursive
        );
        assert!(!weigh_of(doubling(3)).recursive);
    }

    /// What jsonschema would follow otherwise than this weighing is refused, and no key hides
    /// a subschema: under `properties` a key is a name, even `description`.
    #[test]
    fn nothing_hides_a_heavy_part() {
        let mut hidden = doubling(30);
        let defs = hidden["$defs"].take();
        hidden["$defs"] = json!({"description": {"$defs": defs}});
        hidden["properties"] = json!({"description": {"$ref": "#/$defs/description/$defs/a30"}});
        for (k, def) in hidden["$defs"]["description"]["$defs"].as_object_mut().unwrap() {
            if k != "a0" {
                let below = format!("#/$defs/description/$defs/a{}", k[1..].parse::<u32>().unwrap() - 1);
                *def = json!({"allOf": [{"$ref": below}, {"$ref": below}]});
            }
        }
        assert!(weight(hidden).unwrap_err().contains("more than 100000"));
        // An embedded resource's `#…` references resolve against it, not the root.
        let mut embedded = doubling(30);
        let defs = embedded["$defs"].clone();
        embedded["$defs"] = json!({"a30": {"type": "string"}});
        embedded["properties"]["x"] = json!({"$id": "https://e.example/x.json", "$ref": "#/$defs/a30", "$defs": defs});
        assert!(weight(embedded).unwrap_err().contains("$id below the root"));
        let twice = json!({"type": "object", "properties": {"a": {"$ref": "#n"}},
            "$defs": {"x": {"$anchor": "n"}, "y": {"$anchor": "n", "type": "string"}}});
        assert!(weight(twice).unwrap_err().contains("declared twice"));
    }

    #[test]
    fn references_it_cannot_follow_are_refused() {
        for missing in ["#/$defs/nowhere", "other.json", "#nowhere", "#/properties/a/type"] {
            let schema = json!({"type": "object", "properties": {"a": {"type": "string", "$ref": missing}}});
            let refused = weight(schema).unwrap_err();
            assert!(refused.contains("does not name a part of this schema"), "{missing}: {refused}");
        }
    }

    #[test]
    fn a_long_chain_of_references_is_refused_before_it_is_compiled() {
        let mut defs = Map::new();
        defs.insert("d0".into(), json!({"type": "string"}));
        for k in 1..2000 {
            defs.insert(format!("d{k}"), json!({"$ref": format!("#/$defs/d{}", k - 1)}));
        }
        let schema = json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/d1999"}}, "$defs": defs});
        let refused = weight(schema).unwrap_err();
        assert!(refused.contains("deeper than 256"), "{refused}");
    }
}
