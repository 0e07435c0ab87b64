//! The catalog: what every loaded plugin provides, indexed for the MCP layer.
//!
//! Each plugin version's offerings are checked and compiled once ([`Offerings`]); a catalog
//! is then built from a list of them in one go and stays immutable, so a hot swap replaces it
//! atomically. Building it is where the rules across plugins are enforced: names and URIs are
//! unique (a collision is a load error, never a silent overwrite), and no plugin's concrete
//! resource may claim a URI an earlier plugin's template serves. Earlier wins: the loader
//! puts the plugins already serving first, so a newcomer can never take anything over.

mod mirrored;
mod offerings;
mod publish;
mod weight;

use std::collections::HashMap;
use std::sync::Arc;

use thiserror::Error;

pub use mirrored::MirroredParam;
pub use offerings::{Offerings, PromptEntry, ResourceEntry, TemplateEntry, ToolEntry};
pub use publish::{Published, Publisher, Relists, changed_lists};

use crate::runtime::Plugin;

/// Why a plugin, or a set of plugins, cannot be served.
#[derive(Debug, Error)]
pub enum CatalogError {
    /// Two plugins (or one plugin twice) provide the same name.
    #[error(
        "{kind} {name:?} is provided by both plugin {first} and plugin {second}; rename one or load only one of them"
    )]
    Collision { kind: &'static str, name: String, first: String, second: String },
    /// A concrete resource falls under another plugin's template, which serves it already.
    #[error("resource {uri:?} of plugin {second} is served by the template {template:?} of plugin {first}")]
    Shadowed { uri: String, template: String, first: String, second: String },
    /// A tool's input or output schema is not a usable JSON Schema.
    #[error("plugin {plugin}: tool {tool}: {which} schema is invalid: {reason}")]
    Schema { plugin: String, tool: String, which: &'static str, reason: String },
    /// A resource template is not one Capsule can match.
    #[error("plugin {plugin}: {reason}")]
    Template { plugin: String, reason: String },
    /// A name breaks the MCP naming rules.
    #[error("plugin {plugin}: {kind} name {name:?} is invalid: {reason}")]
    Name { plugin: String, kind: &'static str, name: String, reason: &'static str },
}

/// Everything the server offers, in a stable order (plugin order, then the order each
/// plugin lists its items).
#[derive(Default, Clone)]
pub struct Catalog {
    offerings: Vec<Arc<Offerings>>,
    plugins: Vec<Arc<Plugin>>,
    tools: Vec<Arc<ToolEntry>>,
    tool_index: HashMap<String, usize>,
    resources: Vec<Arc<ResourceEntry>>,
    resource_index: HashMap<String, usize>,
    templates: Vec<Arc<TemplateEntry>>,
    template_index: HashMap<String, usize>,
    prompts: Vec<Arc<PromptEntry>>,
    prompt_index: HashMap<String, usize>,
}

/// Index `name` at `at`, unless an earlier plugin has it.
fn claim(
    index: &mut HashMap<String, usize>,
    owner: impl Fn(usize) -> String,
    kind: &'static str,
    name: &str,
    plugin: &str,
    at: usize,
) -> Result<(), CatalogError> {
    if let Some(&existing) = index.get(name) {
        return Err(CatalogError::Collision { kind, name: name.into(), first: owner(existing), second: plugin.into() });
    }
    index.insert(name.to_owned(), at);
    Ok(())
}

impl Catalog {
    /// Index the offerings, in order; earlier ones win. Fails on the first collision. Cheap:
    /// everything costly was done once per plugin version in [`Offerings::new`].
    pub fn build(offerings: Vec<Arc<Offerings>>) -> Result<Catalog, CatalogError> {
        let mut catalog = Catalog::default();
        for offered in &offerings {
            catalog.add(offered)?;
        }
        catalog.plugins = offerings.iter().map(|o| o.plugin.clone()).collect();
        catalog.offerings = offerings;
        Ok(catalog)
    }

    fn add(&mut self, offered: &Offerings) -> Result<(), CatalogError> {
        let name = offered.plugin.name();
        for tool in &offered.tools {
            let tools = &self.tools;
            claim(&mut self.tool_index, |i| tools[i].plugin.name().into(), "tool", &tool.tool.name, name, tools.len())?;
            self.tools.push(tool.clone());
        }
        for resource in &offered.resources {
            let uri = &resource.resource.uri;
            if let Some(earlier) = self.templates.iter().find(|t| t.matcher.matches(uri).is_some()) {
                return Err(CatalogError::Shadowed {
                    uri: uri.clone(),
                    template: earlier.template.uri_template.clone(),
                    first: earlier.plugin.name().into(),
                    second: name.into(),
                });
            }
            let resources = &self.resources;
            claim(
                &mut self.resource_index,
                |i| resources[i].plugin.name().into(),
                "resource",
                uri,
                name,
                resources.len(),
            )?;
            self.resources.push(resource.clone());
        }
        for template in &offered.templates {
            let templates = &self.templates;
            claim(
                &mut self.template_index,
                |i| templates[i].plugin.name().into(),
                "resource template",
                &template.template.uri_template,
                name,
                templates.len(),
            )?;
            self.templates.push(template.clone());
        }
        for prompt in &offered.prompts {
            let prompts = &self.prompts;
            claim(
                &mut self.prompt_index,
                |i| prompts[i].plugin.name().into(),
                "prompt",
                &prompt.prompt.name,
                name,
                prompts.len(),
            )?;
            self.prompts.push(prompt.clone());
        }
        Ok(())
    }

    /// The plugins' offerings, in order.
    pub fn offerings(&self) -> &[Arc<Offerings>] {
        &self.offerings
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[Arc<Plugin>] {
        &self.plugins
    }

    /// All tools.
    pub fn tools(&self) -> &[Arc<ToolEntry>] {
        &self.tools
    }

    /// A tool by name.
    pub fn tool(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }

    /// All concrete resources.
    pub fn resources(&self) -> &[Arc<ResourceEntry>] {
        &self.resources
    }

    /// All resource templates.
    pub fn templates(&self) -> &[Arc<TemplateEntry>] {
        &self.templates
    }

    /// The plugin serving a URI: the one listing it, else the first whose template matches.
    /// Matching is linear in the URI (see `capsule_uri_template`).
    pub fn resource_owner(&self, uri: &str) -> Option<&Arc<Plugin>> {
        if let Some(&i) = self.resource_index.get(uri) {
            return Some(&self.resources[i].plugin);
        }
        self.templates.iter().find(|t| t.matcher.matches(uri).is_some()).map(|t| &t.plugin)
    }

    /// Whether the plugin named `plugin` is the one serving `uri` ([`Catalog::resource_owner`]),
    /// trying its own templates first: a plugin that names URIs it does not serve costs no
    /// more than its own templates' matching.
    pub fn serves(&self, plugin: &str, uri: &str) -> bool {
        if let Some(&i) = self.resource_index.get(uri) {
            return self.resources[i].plugin.name() == plugin;
        }
        let own = self.templates.iter().position(|t| t.plugin.name() == plugin && t.matcher.matches(uri).is_some());
        own.is_some_and(|at| !self.templates[..at].iter().any(|t| t.matcher.matches(uri).is_some()))
    }

    /// The plugin owning a URI template, for completion requests.
    pub fn template_owner(&self, uri_template: &str) -> Option<&Arc<Plugin>> {
        self.templates.iter().find(|t| t.template.uri_template == uri_template).map(|t| &t.plugin)
    }

    /// All prompts.
    pub fn prompts(&self) -> &[Arc<PromptEntry>] {
        &self.prompts
    }

    /// A prompt by name.
    pub fn prompt(&self, name: &str) -> Option<&Arc<PromptEntry>> {
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
