//! A plugin written against `wit/` directly: the `resources-plugin` world, one resource and one
//! template, no SDK. Proves the host serves a component that exports no tools.

wit_bindgen::generate!({ world: "resources-plugin", path: "../../../wit" });

use capsule::plugin::types::{Error, RequestContext, ResourceBody, ResourceContents};
use exports::capsule::plugin::resources::{Guest, ReadOutcome, Resource, ResourceTemplate};

struct ResourcesOnly;

impl Guest for ResourcesOnly {
    fn list() -> Vec<Resource> {
        vec![Resource {
            uri: "memo://today".into(),
            name: "today".into(),
            title: None,
            description: Some("Today's memo".into()),
            mime_type: Some("text/plain".into()),
            size: None,
        }]
    }

    fn templates() -> Vec<ResourceTemplate> {
        vec![ResourceTemplate {
            uri_template: "memo://day/{day}".into(),
            name: "day".into(),
            title: None,
            description: Some("The memo of a given day".into()),
            mime_type: Some("text/plain".into()),
        }]
    }

    fn read(uri: String, _context: RequestContext) -> Result<ReadOutcome, Error> {
        let text = match uri.strip_prefix("memo://") {
            Some("today") => "water the plants".to_owned(),
            Some(day) if day.starts_with("day/") => format!("nothing planned for {}", &day[4..]),
            _ => return Err(Error::NotFound(format!("no memo at {uri}"))),
        };
        Ok(ReadOutcome::Complete(vec![ResourceContents {
            uri,
            mime_type: Some("text/plain".into()),
            body: ResourceBody::Text(text),
        }]))
    }
}

export!(ResourcesOnly);
