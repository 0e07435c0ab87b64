//! How big a call's result is, for the per-plugin output cap: the bytes of text, binary data
//! and JSON it carries (names and small fixed fields are counted too, so nothing is free).

use super::bindings::types::*;

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
        self.iter().map(OutputSize::output_size).sum()
    }
}

impl<T: OutputSize> OutputSize for Option<T> {
    fn output_size(&self) -> usize {
        self.as_ref().map_or(0, OutputSize::output_size)
    }
}

impl OutputSize for String {
    fn output_size(&self) -> usize {
        self.len()
    }
}

impl OutputSize for Error {
    fn output_size(&self) -> usize {
        match self {
            Error::NotFound(m) | Error::InvalidParams(m) | Error::Failed(m) => m.len(),
        }
    }
}

impl OutputSize for ResourceBody {
    fn output_size(&self) -> usize {
        match self {
            ResourceBody::Text(text) => text.len(),
            ResourceBody::Blob(data) => data.len(),
        }
    }
}

impl OutputSize for ResourceContents {
    fn output_size(&self) -> usize {
        self.uri.len() + self.mime_type.output_size() + self.body.output_size()
    }
}

impl OutputSize for Content {
    fn output_size(&self) -> usize {
        match self {
            Content::Text(text) => text.len(),
            Content::Image(b) | Content::Audio(b) => b.data.len() + b.mime_type.len(),
            Content::Resource(contents) => contents.output_size(),
            Content::ResourceLink(link) => {
                link.uri.len() + link.name.len() + link.description.output_size() + link.mime_type.output_size()
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
