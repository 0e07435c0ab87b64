//! Scopes: what a token lets its bearer use, as a hierarchy of dotted names.
//!
//! - `plugins`: everything the tenant serves;
//! - `plugins.<plugin>`: everything one plugin offers;
//! - `plugins.<plugin>.tools`, `.resources`, `.prompts`: one kind of what it offers;
//! - `plugins.<plugin>.tools.<tool>`, `plugins.<plugin>.prompts.<prompt>`: one item
//!   (resources are granted per plugin, since URIs are not names).
//!
//! A granted scope covers what is below it in that hierarchy, so `plugins.calc` covers
//! `plugins.calc.tools.add` but `plugins.cal` covers nothing of `calc`. Each level is matched
//! whole: `plugins.calc` covers nothing of a plugin `calc.evil`, and `plugins.calc.tools.get`
//! nothing of a tool `get.secret` (tool names may hold dots; plugin names may not).

/// The scope that covers everything.
pub const ROOT: &str = "plugins";

/// What a plugin offers, as scopes name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tools,
    Resources,
    Prompts,
}

impl Kind {
    fn segment(self) -> &'static str {
        match self {
            Kind::Tools => "tools",
            Kind::Resources => "resources",
            Kind::Prompts => "prompts",
        }
    }
}

/// The scope naming one plugin.
pub fn of_plugin(plugin: &str) -> String {
    format!("{ROOT}.{plugin}")
}

/// The narrowest scope naming an item: a tool or prompt by name, resources per plugin.
pub fn of_item(plugin: &str, kind: Kind, name: &str) -> String {
    match kind {
        Kind::Resources => format!("{ROOT}.{plugin}.{}", kind.segment()),
        Kind::Tools | Kind::Prompts => format!("{ROOT}.{plugin}.{}.{name}", kind.segment()),
    }
}

/// The scopes a token grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted(Vec<Box<str>>);

impl Granted {
    /// Scopes as OAuth writes them: separated by spaces.
    pub fn parse(scopes: &str) -> Granted {
        Granted(scopes.split_ascii_whitespace().map(Box::from).collect())
    }

    /// Scopes given one by one (an API key's, say).
    pub fn of<S: AsRef<str>>(scopes: &[S]) -> Granted {
        Granted(scopes.iter().map(|s| Box::from(s.as_ref())).collect())
    }

    /// Whether these scopes cover `plugin`'s item.
    pub fn allows(&self, plugin: &str, kind: Kind, name: &str) -> bool {
        self.0.iter().any(|granted| grants(granted, plugin, kind, name))
    }

    /// The scopes, as granted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|s| &**s)
    }
}

/// Whether `granted` is `plugins`, `plugins.<plugin>`, `plugins.<plugin>.<kind>` or the
/// item's own scope, each part matched whole.
fn grants(granted: &str, plugin: &str, kind: Kind, name: &str) -> bool {
    let level = |rest: &str, part: &str| rest.strip_prefix('.')?.strip_prefix(part).map(str::to_owned);
    let Some(rest) = granted.strip_prefix(ROOT) else { return false };
    if rest.is_empty() {
        return true;
    }
    let Some(rest) = level(rest, plugin) else { return false };
    if rest.is_empty() {
        return true;
    }
    let Some(rest) = level(&rest, kind.segment()) else { return false };
    rest.is_empty() || (kind != Kind::Resources && rest.strip_prefix('.') == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_covers_what_is_below_it_each_level_matched_whole() {
        assert_eq!(of_item("calc", Kind::Tools, "add"), "plugins.calc.tools.add");
        for granted in ["plugins", "plugins.calc", "plugins.calc.tools", "plugins.calc.tools.add", "x plugins.calc"] {
            assert!(Granted::parse(granted).allows("calc", Kind::Tools, "add"), "{granted}");
        }
        for granted in ["", "plugin", "plugins.cal", "plugins.calc.prompts", "plugins.calc.tools.ad", "calc"] {
            assert!(!Granted::parse(granted).allows("calc", Kind::Tools, "add"), "{granted}");
        }
        // A scope's prefix at a dot is not enough: another plugin's or tool's name may go on.
        assert!(!Granted::parse("plugins.calc").allows("calc.evil", Kind::Tools, "hash"));
        assert!(!Granted::parse("plugins.calc.tools.get").allows("calc", Kind::Tools, "get.secret"));
        assert!(Granted::parse("plugins.calc.tools.get.secret").allows("calc", Kind::Tools, "get.secret"));
        assert!(!Granted::parse("plugins.calc.resources.x").allows("calc", Kind::Resources, "x"));
        let docs = Granted::parse("plugins.files.resources plugins.calc.tools.add");
        assert!(docs.allows("files", Kind::Resources, "file:///a/b.txt"));
        assert!(!docs.allows("files", Kind::Tools, "read"));
        assert!(docs.allows("calc", Kind::Tools, "add") && !docs.allows("calc", Kind::Tools, "evaluate"));
        assert_eq!(Granted::of(&["plugins"]).iter().collect::<Vec<_>>(), ["plugins"]);
    }
}
