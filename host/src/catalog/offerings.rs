//! What one plugin version offers, checked and compiled once when it loads: tool names and
//! JSON Schemas (validators compiled here, never per request or per reload), resource URIs
//! and URI templates. A reload that keeps a plugin version keeps its `Offerings`.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use capsule_uri_template::UriTemplate;
use serde_json::{Map, Value};

use super::CatalogError;
use super::mirrored::{MirroredParam, mirrored_params};
use super::weight::Weight;
use crate::runtime::{Plugin, types};
use crate::telemetry::ToolMeters;

/// Arguments or structured output larger than this are validated on the blocking pool, so a
/// large value never holds an async worker.
const INLINE_VALIDATION_BYTES: usize = 16 << 10;

/// The most validation work done inline, counted as the value's bytes times its schema's
/// weight (expanded schema objects, `weight`): a value that a heavy schema applies to is
/// validated on the blocking pool even when it is small.
const INLINE_VALIDATION_WORK: u64 = 1 << 20;

/// Compiled size limits for a plugin's `pattern`s: schemas come from untrusted plugins.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
const REGEX_DFA_SIZE_LIMIT: usize = 2 << 20;

/// The most resource templates one plugin may list, and the most variables all of them may
/// have together. A URI is matched against templates in turn, each in time linear in the URI
/// for each variable, on the request's worker (and for each URI a plugin says changed, or a
/// client subscribes to): these keep one lookup in a plugin's templates within a few
/// milliseconds for the longest URI taken (16 KiB).
const MAX_TEMPLATES: usize = 256;
const MAX_TEMPLATE_VARIABLES: usize = 256;

/// One tool, ready to call.
pub struct ToolEntry {
    pub plugin: Arc<Plugin>,
    pub tool: types::Tool,
    pub input_schema: Arc<Map<String, Value>>,
    pub output_schema: Option<Arc<Map<String, Value>>>,
    /// The arguments 2026-07-28 HTTP clients mirror into `Mcp-Param-*` headers.
    pub mirrored: Box<[MirroredParam]>,
    input_validator: jsonschema::Validator,
    output_validator: Option<jsonschema::Validator>,
    /// The schemas' weights (see `weight`).
    input_weight: Weight,
    output_weight: Weight,
    /// Its calls' series, found at its first call.
    pub meters: OnceLock<ToolMeters>,
}

impl ToolEntry {
    /// Whether arguments of `bytes` are cheap enough to validate on an async worker.
    pub fn validate_arguments_inline(&self, bytes: usize) -> bool {
        inline(bytes, self.input_weight.weight)
    }

    /// Whether structured output of `bytes` is cheap enough to validate on an async worker.
    pub fn validate_output_inline(&self, bytes: usize) -> bool {
        inline(bytes, self.output_weight.weight)
    }

    /// Check arguments against the input schema; the error names the first violation.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), String> {
        describe_errors(&self.input_validator, self.input_weight, arguments)
    }

    /// Check structured output against the output schema, if the tool has one.
    pub fn validate_output(&self, output: &Value) -> Result<(), String> {
        match &self.output_validator {
            Some(validator) => describe_errors(validator, self.output_weight, output),
            None => Ok(()),
        }
    }
}

fn inline(bytes: usize, weight: u64) -> bool {
    bytes <= INLINE_VALIDATION_BYTES && (bytes as u64).saturating_mul(weight) <= INLINE_VALIDATION_WORK
}

fn describe_errors(validator: &jsonschema::Validator, weight: Weight, value: &Value) -> Result<(), String> {
    // The common case, valid input, needs no error values built. An invalid value gets its
    // first violation only: jsonschema builds every error before its iterator yields one,
    // and a client's array of two million wrong items would be two million errors (GiBs).
    if validator.is_valid(value) {
        return Ok(());
    }
    // Describing one means validating again without remembering recursive references'
    // results, which a schema that branches at every level makes exponential in the depth.
    if weight.recursive {
        return Err("it does not match the schema (a recursive schema: the violation is not described)".into());
    }
    validator.validate(value).map_err(|e| describe(&e))
}

/// Longest description of one violation. A message quotes the offending value, and a
/// client's megabyte string should not come back in its own error, nor make it unreadable.
const VIOLATION_BYTES: usize = 512;

fn describe(error: &jsonschema::ValidationError) -> String {
    let mut text = error.to_string();
    if text.len() > VIOLATION_BYTES {
        text = error.masked_with("the value").to_string();
    }
    let path = error.instance_path().to_string();
    if !path.is_empty() {
        text = format!("{path}: {text}");
    }
    // Property names in the path or in the message are the client's too.
    if text.len() > VIOLATION_BYTES {
        text.truncate(text.floor_char_boundary(VIOLATION_BYTES));
        text.push('…');
    }
    text
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
    pub(super) matcher: UriTemplate,
}

/// One prompt.
pub struct PromptEntry {
    pub plugin: Arc<Plugin>,
    pub prompt: types::Prompt,
}

/// Everything one plugin version offers, checked on its own (names, schemas, templates, and
/// no name twice); rules across plugins are the [`super::Catalog`]'s.
pub struct Offerings {
    pub(super) plugin: Arc<Plugin>,
    pub(super) tools: Vec<Arc<ToolEntry>>,
    pub(super) resources: Vec<Arc<ResourceEntry>>,
    pub(super) templates: Vec<Arc<TemplateEntry>>,
    pub(super) prompts: Vec<Arc<PromptEntry>>,
}

impl Offerings {
    /// Check and compile what `plugin` lists. CPU-bound (schema compilation): run it off the
    /// async reactor.
    pub fn new(plugin: Arc<Plugin>) -> Result<Offerings, CatalogError> {
        let name = plugin.name();
        let manifest = plugin.manifest();
        // Names seen, by set: a plugin may list hundreds of thousands of things within its
        // manifest's size, and comparing each with every earlier one took minutes.
        let mut seen: HashSet<&str> = HashSet::new();
        let mut tools: Vec<Arc<ToolEntry>> = Vec::with_capacity(manifest.tools.len());
        for tool in &manifest.tools {
            check_tool_name(name, &tool.name)?;
            if !seen.insert(&tool.name) {
                return Err(twice(&plugin, "tool", &tool.name));
            }
            let input_schema = parse_schema(name, &tool.name, "input", &tool.input_schema)?;
            let mirrored = mirrored_params(&input_schema).map_err(|reason| CatalogError::Schema {
                plugin: name.into(),
                tool: tool.name.clone(),
                which: "input",
                reason,
            })?;
            let output_schema =
                tool.output_schema.as_deref().map(|s| parse_schema(name, &tool.name, "output", s)).transpose()?;
            let input_weight = weigh(name, &tool.name, "input", &input_schema)?;
            let output_weight = output_schema.as_ref().map(|s| weigh(name, &tool.name, "output", s)).transpose()?;
            tools.push(Arc::new(ToolEntry {
                input_weight,
                output_weight: output_weight.unwrap_or_default(),
                input_validator: compile(name, &tool.name, "input", &input_schema)?,
                output_validator: output_schema.as_ref().map(|s| compile(name, &tool.name, "output", s)).transpose()?,
                plugin: plugin.clone(),
                tool: tool.clone(),
                input_schema: Arc::new(input_schema),
                output_schema: output_schema.map(Arc::new),
                mirrored,
                meters: OnceLock::new(),
            }));
        }
        let mut resources: Vec<Arc<ResourceEntry>> = Vec::with_capacity(manifest.resources.len());
        seen.clear();
        for resource in &manifest.resources {
            if !seen.insert(&resource.uri) {
                return Err(twice(&plugin, "resource", &resource.uri));
            }
            resources.push(Arc::new(ResourceEntry { plugin: plugin.clone(), resource: resource.clone() }));
        }
        let too_many = |reason: String| CatalogError::Template { plugin: name.into(), reason };
        if manifest.templates.len() > MAX_TEMPLATES {
            return Err(too_many(format!(
                "it lists {} resource templates; at most {MAX_TEMPLATES} are served",
                manifest.templates.len()
            )));
        }
        let mut variables = 0;
        let mut templates: Vec<Arc<TemplateEntry>> = Vec::with_capacity(manifest.templates.len());
        seen.clear();
        for template in &manifest.templates {
            if !seen.insert(&template.uri_template) {
                return Err(twice(&plugin, "resource template", &template.uri_template));
            }
            let matcher = UriTemplate::parse(&template.uri_template)
                .map_err(|e| CatalogError::Template { plugin: name.into(), reason: e.to_string() })?;
            variables += matcher.variables().count();
            if variables > MAX_TEMPLATE_VARIABLES {
                return Err(too_many(format!(
                    "its resource templates have more than {MAX_TEMPLATE_VARIABLES} variables together"
                )));
            }
            templates.push(Arc::new(TemplateEntry { plugin: plugin.clone(), template: template.clone(), matcher }));
        }
        let mut prompts: Vec<Arc<PromptEntry>> = Vec::with_capacity(manifest.prompts.len());
        seen.clear();
        for prompt in &manifest.prompts {
            if !seen.insert(&prompt.name) {
                return Err(twice(&plugin, "prompt", &prompt.name));
            }
            prompts.push(Arc::new(PromptEntry { plugin: plugin.clone(), prompt: prompt.clone() }));
        }
        Ok(Offerings { plugin, tools, resources, templates, prompts })
    }

    /// The plugin version these are the offerings of.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }
}

fn twice(plugin: &Plugin, kind: &'static str, name: &str) -> CatalogError {
    CatalogError::Collision { kind, name: name.into(), first: plugin.name().into(), second: plugin.name().into() }
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

fn weigh(plugin: &str, tool: &str, which: &'static str, schema: &Map<String, Value>) -> Result<Weight, CatalogError> {
    super::weight::weigh(schema).map_err(|reason| CatalogError::Schema {
        plugin: plugin.into(),
        tool: tool.into(),
        which,
        reason,
    })
}

fn compile(
    plugin: &str,
    tool: &str,
    which: &'static str,
    schema: &Map<String, Value>,
) -> Result<jsonschema::Validator, CatalogError> {
    // Without the `resolve-http`/`resolve-file` features jsonschema cannot fetch remote
    // `$ref`s, so a schema can never make the host reach the network or the filesystem.
    // Patterns run on the `regex` engine, linear in the input: a backtracking pattern
    // cannot stall validation (one that needs backtracking features fails to compile).
    let patterns =
        jsonschema::PatternOptions::regex().size_limit(REGEX_SIZE_LIMIT).dfa_size_limit(REGEX_DFA_SIZE_LIMIT);
    jsonschema::options()
        .with_pattern_options(patterns)
        .build(&Value::Object(schema.clone()))
        .map_err(|e| CatalogError::Schema { plugin: plugin.into(), tool: tool.into(), which, reason: e.to_string() })
}
