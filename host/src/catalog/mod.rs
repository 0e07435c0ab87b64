//! The catalog: what every loaded plugin provides, indexed for the MCP layer.
//!
//! Built in one go from a set of plugins and then immutable, so a later hot swap can replace
//! it atomically. Building it is where cross-plugin rules are enforced: names are unique
//! across plugins (a collision is a load error, never a silent overwrite), tool schemas
//! compile, and tool names follow the MCP naming rules.

use std::collections::HashMap;
use std::sync::Arc;

use capsule_uri_template::UriTemplate;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::runtime::{Plugin, types};

/// Why a set of plugins cannot be served together.
#[derive(Debug, Error)]
pub enum CatalogError {
    /// Two plugins (or one plugin twice) provide the same name.
    #[error(
        "{kind} {name:?} is provided by both plugin {first} and plugin {second}; rename one or load only one of them"
    )]
    Collision { kind: &'static str, name: String, first: String, second: String },
    /// A tool's input or output schema is not a usable JSON Schema.
    #[error("plugin {plugin}: tool {tool}: {which} schema is invalid: {reason}")]
    Schema { plugin: String, tool: String, which: &'static str, reason: String },
    /// A name breaks the MCP naming rules.
    #[error("plugin {plugin}: {kind} name {name:?} is invalid: {reason}")]
    Name { plugin: String, kind: &'static str, name: String, reason: &'static str },
}

/// One tool, ready to call.
pub struct ToolEntry {
    pub plugin: Arc<Plugin>,
    pub tool: types::Tool,
    pub input_schema: Arc<Map<String, Value>>,
    pub output_schema: Option<Arc<Map<String, Value>>>,
    input_validator: jsonschema::Validator,
    output_validator: Option<jsonschema::Validator>,
}

impl ToolEntry {
    /// Check arguments against the input schema; the error lists every violation.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), String> {
        describe_errors(&self.input_validator, arguments)
    }

    /// Check structured output against the output schema, if the tool has one.
    pub fn validate_output(&self, output: &Value) -> Result<(), String> {
        match &self.output_validator {
            Some(validator) => describe_errors(validator, output),
            None => Ok(()),
        }
    }
}

fn describe_errors(validator: &jsonschema::Validator, value: &Value) -> Result<(), String> {
    let errors: Vec<String> = validator
        .iter_errors(value)
        .take(10)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() { e.to_string() } else { format!("{path}: {e}") }
        })
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// One concrete resource.
pub struct ResourceEntry {
    pub plugin: Arc<Plugin>,
    pub resource: types::Resource,
}

/// One resource template.
pub struct TemplateEntry {
    pub plugin: Arc<Plugin>,
    pub template: types::ResourceTemplate,
    matcher: UriTemplate,
}

/// One prompt.
pub struct PromptEntry {
    pub plugin: Arc<Plugin>,
    pub prompt: types::Prompt,
}

/// Everything the server offers, in a stable order (plugin load order, then the order each
/// plugin lists its items).
#[derive(Default)]
pub struct Catalog {
    plugins: Vec<Arc<Plugin>>,
    tools: Vec<ToolEntry>,
    tool_index: HashMap<String, usize>,
    resources: Vec<ResourceEntry>,
    resource_index: HashMap<String, usize>,
    templates: Vec<TemplateEntry>,
    prompts: Vec<PromptEntry>,
    prompt_index: HashMap<String, usize>,
}

fn check_tool_name(plugin: &str, name: &str) -> Result<(), CatalogError> {
    let reason = if name.is_empty() || name.len() > 128 {
        Some("must be 1 to 128 characters")
    } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        Some("may only contain A-Z, a-z, 0-9, '_', '-' and '.'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CatalogError::Name { plugin: plugin.into(), kind: "tool", name: name.into(), reason }),
        None => Ok(()),
    }
}

fn parse_schema(plugin: &str, tool: &str, which: &'static str, text: &str) -> Result<Map<String, Value>, CatalogError> {
    let invalid = |reason: String| CatalogError::Schema { plugin: plugin.into(), tool: tool.into(), which, reason };
    match serde_json::from_str::<Value>(text).map_err(|e| invalid(format!("not JSON: {e}")))? {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) != Some("object") {
                return Err(invalid("the root must have \"type\": \"object\"".into()));
            }
            Ok(map)
        }
        _ => Err(invalid("must be a JSON object".into())),
    }
}

fn compile(
    plugin: &str,
    tool: &str,
    which: &'static str,
    schema: &Map<String, Value>,
) -> Result<jsonschema::Validator, CatalogError> {
    // Without the `resolve-http`/`resolve-file` features jsonschema cannot fetch remote
    // `$ref`s, so a schema can never make the host reach the network or the filesystem.
    jsonschema::validator_for(&Value::Object(schema.clone())).map_err(|e| CatalogError::Schema {
        plugin: plugin.into(),
        tool: tool.into(),
        which,
        reason: e.to_string(),
    })
}

fn claim(
    index: &mut HashMap<String, usize>,
    owners: impl Fn(usize) -> String,
    kind: &'static str,
    name: &str,
    plugin: &str,
    at: usize,
) -> Result<(), CatalogError> {
    if let Some(&existing) = index.get(name) {
        return Err(CatalogError::Collision {
            kind,
            name: name.into(),
            first: owners(existing),
            second: plugin.into(),
        });
    }
    index.insert(name.to_owned(), at);
    Ok(())
}

impl Catalog {
    /// Index the plugins, in order. Fails on the first collision or invalid item.
    pub fn build(plugins: Vec<Arc<Plugin>>) -> Result<Catalog, CatalogError> {
        let mut catalog = Catalog::default();
        for plugin in &plugins {
            let name = plugin.name();
            let manifest = plugin.manifest();
            for tool in &manifest.tools {
                check_tool_name(name, &tool.name)?;
                let input_schema = parse_schema(name, &tool.name, "input", &tool.input_schema)?;
                let output_schema =
                    tool.output_schema.as_deref().map(|s| parse_schema(name, &tool.name, "output", s)).transpose()?;
                let entry = ToolEntry {
                    input_validator: compile(name, &tool.name, "input", &input_schema)?,
                    output_validator: output_schema
                        .as_ref()
                        .map(|s| compile(name, &tool.name, "output", s))
                        .transpose()?,
                    plugin: plugin.clone(),
                    tool: tool.clone(),
                    input_schema: Arc::new(input_schema),
                    output_schema: output_schema.map(Arc::new),
                };
                let tools = &catalog.tools;
                claim(
                    &mut catalog.tool_index,
                    |i| tools[i].plugin.name().into(),
                    "tool",
                    &tool.name,
                    name,
                    tools.len(),
                )?;
                catalog.tools.push(entry);
            }
            for resource in &manifest.resources {
                let resources = &catalog.resources;
                claim(
                    &mut catalog.resource_index,
                    |i| resources[i].plugin.name().into(),
                    "resource",
                    &resource.uri,
                    name,
                    resources.len(),
                )?;
                catalog.resources.push(ResourceEntry { plugin: plugin.clone(), resource: resource.clone() });
            }
            for template in &manifest.templates {
                if let Some(other) = catalog.templates.iter().find(|t| t.template.uri_template == template.uri_template)
                {
                    return Err(CatalogError::Collision {
                        kind: "resource template",
                        name: template.uri_template.clone(),
                        first: other.plugin.name().into(),
                        second: name.into(),
                    });
                }
                catalog.templates.push(TemplateEntry {
                    plugin: plugin.clone(),
                    matcher: UriTemplate::parse(&template.uri_template),
                    template: template.clone(),
                });
            }
            for prompt in &manifest.prompts {
                let prompts = &catalog.prompts;
                claim(
                    &mut catalog.prompt_index,
                    |i| prompts[i].plugin.name().into(),
                    "prompt",
                    &prompt.name,
                    name,
                    prompts.len(),
                )?;
                catalog.prompts.push(PromptEntry { plugin: plugin.clone(), prompt: prompt.clone() });
            }
        }
        catalog.plugins = plugins;
        Ok(catalog)
    }

    /// The plugins, in load order.
    pub fn plugins(&self) -> &[Arc<Plugin>] {
        &self.plugins
    }

    /// All tools.
    pub fn tools(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// A tool by name.
    pub fn tool(&self, name: &str) -> Option<&ToolEntry> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }

    /// All concrete resources.
    pub fn resources(&self) -> &[ResourceEntry] {
        &self.resources
    }

    /// All resource templates.
    pub fn templates(&self) -> &[TemplateEntry] {
        &self.templates
    }

    /// The plugin serving a URI: the one listing it, else the first whose template matches.
    pub fn resource_owner(&self, uri: &str) -> Option<&Arc<Plugin>> {
        if let Some(&i) = self.resource_index.get(uri) {
            return Some(&self.resources[i].plugin);
        }
        self.templates.iter().find(|t| t.matcher.matches(uri).is_some()).map(|t| &t.plugin)
    }

    /// The plugin owning a URI template, for completion requests.
    pub fn template_owner(&self, uri_template: &str) -> Option<&Arc<Plugin>> {
        self.templates.iter().find(|t| t.template.uri_template == uri_template).map(|t| &t.plugin)
    }

    /// All prompts.
    pub fn prompts(&self) -> &[PromptEntry] {
        &self.prompts
    }

    /// A prompt by name.
    pub fn prompt(&self, name: &str) -> Option<&PromptEntry> {
        self.prompt_index.get(name).map(|&i| &self.prompts[i])
    }
}

/// A page of a list: items from `offset`, at most `size`, and the cursor of the next page.
pub fn page<'a, T>(items: &'a [T], cursor: Option<&str>, size: usize) -> Result<(&'a [T], Option<String>), String> {
    let start = match cursor {
        None => 0,
        Some(c) => {
            c.parse::<usize>().ok().filter(|&s| s <= items.len()).ok_or_else(|| format!("invalid cursor {c:?}"))?
        }
    };
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((&items[start..end], next))
}

#[cfg(test)]
mod tests {
    use super::page;

    #[test]
    fn pages_walk_the_whole_list_and_reject_bad_cursors() {
        let items: Vec<u32> = (0..7).collect();
        let (first, next) = page(&items, None, 3).unwrap();
        assert_eq!(first, &[0, 1, 2]);
        let (second, next) = page(&items, next.as_deref(), 3).unwrap();
        assert_eq!(second, &[3, 4, 5]);
        let (last, next) = page(&items, next.as_deref(), 3).unwrap();
        assert_eq!((last, next), (&[6][..], None));
        assert!(page(&items, Some("8"), 3).is_err());
        assert!(page(&items, Some("abc"), 3).is_err());
        assert_eq!(page(&items, Some("7"), 3).unwrap(), (&[][..], None));
    }
}
