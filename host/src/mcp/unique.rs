//! Tool arguments read with every object's keys unique. A guest receives the client's own
//! bytes, so a key given twice would be validated as one value (serde_json keeps the last)
//! and read by the plugin's parser as another (many keep the first, some refuse): such
//! arguments are refused rather than handed on past their schema.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why arguments could not be read.
pub enum Unreadable {
    /// Not JSON.
    Syntax(serde_json::Error),
    /// JSON, with a key twice in one object.
    Duplicate(serde_json::Error),
}

/// `text` as a JSON value, refused if any object in it names a key twice.
pub fn parse(text: &str) -> Result<Value, Unreadable> {
    serde_json::from_str::<Unique>(text).map(|unique| unique.0).map_err(|e| match e.classify() {
        // The only data error a value of any shape can have is the visitor's own.
        serde_json::error::Category::Data => Unreadable::Duplicate(e),
        _ => Unreadable::Syntax(e),
    })
}

struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Unique, E> {
        Ok(Unique(Value::Bool(value)))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Unique, E> {
        Ok(Unique(Value::Number(value.into())))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Unique, E> {
        Ok(Unique(Value::Number(value.into())))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Unique, E> {
        Ok(Unique(Number::from_f64(value).map_or(Value::Null, Value::Number)))
    }

    fn visit_str<E>(self, value: &str) -> Result<Unique, E> {
        Ok(Unique(Value::String(value.to_owned())))
    }

    fn visit_string<E>(self, value: String) -> Result<Unique, E> {
        Ok(Unique(Value::String(value)))
    }

    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Unique(Value::Array(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Unique, A::Error> {
        let mut map = Map::new();
        while let Some(key) = entries.next_key::<String>()? {
            let Unique(value) = entries.next_value()?;
            if let Some((key, _)) = map.get_key_value(&key) {
                return Err(de::Error::custom(format_args!(
                    "key {:?} appears twice in one object",
                    super::excerpt(key)
                )));
            }
            map.insert(key, value);
        }
        Ok(Unique(Value::Object(map)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duplicate(text: &str) -> String {
        match parse(text) {
            Err(Unreadable::Duplicate(e)) => e.to_string(),
            Err(Unreadable::Syntax(e)) => panic!("{text}: a syntax error: {e}"),
            Ok(value) => panic!("{text}: read as {value}"),
        }
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let text = r#"{"a":[1,-2,3.5,1e2,"x",null,true,{"b":{}}],"c":{"a":1},"d":18446744073709551615}"#;
        assert_eq!(parse(text).ok(), serde_json::from_str::<Value>(text).ok());
    }

    #[test]
    fn refuses_a_key_twice_at_any_depth() {
        assert!(duplicate(r#"{"a":1,"a":"two"}"#).contains(r#"key "a" appears twice"#));
        assert!(duplicate(r#"{"x":[{"b":1,"c":2,"b":3}]}"#).contains(r#""b""#));
        assert!(duplicate(r#"{"\u0061":1,"a":2}"#).contains(r#""a""#), "escapes decode to the same key");
    }

    #[test]
    fn not_json_is_a_syntax_error() {
        for text in [r#"{"a":1"#, "{'a':1}", "1e999", r#"{"a":1} x"#] {
            assert!(matches!(parse(text), Err(Unreadable::Syntax(_))), "{text}");
        }
    }
}
