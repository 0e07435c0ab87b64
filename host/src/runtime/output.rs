//! How big a call's result is, for the per-plugin output cap: about the bytes it takes on the
//! wire. Text counts as JSON escapes it, binary data as base64, and every item of a list
//! counts its JSON framing too, so nothing is free: a million empty items cost what they
//! cost to send.

use super::bindings::types::*;

/// What one item of a list costs beyond its contents: its JSON object, keys and separators.
const ITEM: usize = 32;

/// The bytes `text` takes as a JSON string: control characters become `\u00XX`, quotes and
/// backslashes get a backslash.
fn json_len(text: &str) -> usize {
    text.len() + text.bytes().map(|b| if b < 0x20 { 5 } else { usize::from(b == b'"' || b == b'\\') }).sum::<usize>()
}

/// The bytes binary data takes in base64.
fn base64_len(data: &[u8]) -> usize {
    data.len().div_ceil(3) * 4
}

/// The size of a call's result in bytes, as the output cap counts it.
pub(crate) trait OutputSize {
    fn output_size(&self) -> usize;
}

impl<T: OutputSize, E: OutputSize> OutputSize for Result<T, E> {
    fn output_size(&self) -> usize {
        match self {
            Ok(value) => value.output_size(),
            Err(error) => error.output_size(),
        }
    }
}

impl<T: OutputSize> OutputSize for Vec<T> {
    fn output_size(&self) -> usize {
        self.iter().map(|item| item.output_size().saturating_add(ITEM)).fold(0, usize::saturating_add)
    }
}

impl<T: OutputSize> OutputSize for Option<T> {
    fn output_size(&self) -> usize {
        self.as_ref().map_or(0, OutputSize::output_size)
    }
}

impl OutputSize for String {
    fn output_size(&self) -> usize {
        json_len(self)
    }
}

impl OutputSize for Error {
    fn output_size(&self) -> usize {
        match self {
            Error::NotFound(m) | Error::InvalidParams(m) | Error::Failed(m) => m.output_size(),
        }
    }
}

impl OutputSize for ResourceBody {
    fn output_size(&self) -> usize {
        match self {
            ResourceBody::Text(text) => text.output_size(),
            ResourceBody::Blob(data) => base64_len(data),
        }
    }
}

impl OutputSize for ResourceContents {
    fn output_size(&self) -> usize {
        self.uri.output_size() + self.mime_type.output_size() + self.body.output_size()
    }
}

impl OutputSize for Content {
    fn output_size(&self) -> usize {
        match self {
            Content::Text(text) => text.output_size(),
            Content::Image(b) | Content::Audio(b) => base64_len(&b.data) + b.mime_type.output_size(),
            Content::Resource(contents) => contents.output_size(),
            Content::ResourceLink(link) => {
                link.uri.output_size()
                    + link.name.output_size()
                    + link.description.output_size()
                    + link.mime_type.output_size()
            }
        }
    }
}

impl OutputSize for InputRequired {
    fn output_size(&self) -> usize {
        // Rare and small: the debug form's length is a fair count of the requests' text.
        self.state.as_ref().map_or(0, Vec::len) + format!("{:?}", self.requests).len()
    }
}

impl OutputSize for ToolResult {
    fn output_size(&self) -> usize {
        self.content.output_size() + self.structured_content.output_size()
    }
}

impl OutputSize for CallOutcome {
    fn output_size(&self) -> usize {
        match self {
            CallOutcome::Complete(result) => result.output_size(),
            CallOutcome::InputRequired(ir) => ir.output_size(),
        }
    }
}

impl OutputSize for ReadOutcome {
    fn output_size(&self) -> usize {
        match self {
            ReadOutcome::Complete(contents) => contents.output_size(),
            ReadOutcome::InputRequired(ir) => ir.output_size(),
        }
    }
}

impl OutputSize for PromptMessage {
    fn output_size(&self) -> usize {
        self.content.output_size()
    }
}

impl OutputSize for GetOutcome {
    fn output_size(&self) -> usize {
        match self {
            GetOutcome::Complete(result) => result.description.output_size() + result.messages.output_size(),
            GetOutcome::InputRequired(ir) => ir.output_size(),
        }
    }
}

impl OutputSize for Suggestions {
    fn output_size(&self) -> usize {
        self.values.output_size()
    }
}

impl OutputSize for Tool {
    fn output_size(&self) -> usize {
        // Annotations are a handful of fixed fields.
        self.name.output_size()
            + self.title.output_size()
            + self.description.output_size()
            + self.input_schema.output_size()
            + self.output_schema.output_size()
            + self.annotations.as_ref().map_or(0, |a| ITEM + a.title.output_size())
    }
}

impl OutputSize for Resource {
    fn output_size(&self) -> usize {
        self.uri.output_size()
            + self.name.output_size()
            + self.title.output_size()
            + self.description.output_size()
            + self.mime_type.output_size()
    }
}

impl OutputSize for ResourceTemplate {
    fn output_size(&self) -> usize {
        self.uri_template.output_size()
            + self.name.output_size()
            + self.title.output_size()
            + self.description.output_size()
            + self.mime_type.output_size()
    }
}

impl OutputSize for PromptArgument {
    fn output_size(&self) -> usize {
        self.name.output_size() + self.title.output_size() + self.description.output_size()
    }
}

impl OutputSize for Prompt {
    fn output_size(&self) -> usize {
        self.name.output_size()
            + self.title.output_size()
            + self.description.output_size()
            + self.arguments.output_size()
    }
}

impl<A: OutputSize, B: OutputSize> OutputSize for (A, B) {
    fn output_size(&self) -> usize {
        self.0.output_size() + self.1.output_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_and_escape_counts() {
        assert_eq!(String::from("a\"b\u{1}").output_size(), 4 + 1 + 5);
        let empty: Vec<Content> = vec![Content::Text(String::new()); 1000];
        assert_eq!(empty.output_size(), 1000 * ITEM);
        let image = Content::Image(Binary { data: vec![0; 3000], mime_type: "image/png".into() });
        assert_eq!(image.output_size(), 4000 + 9);
    }
}
