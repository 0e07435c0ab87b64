//! The requests that call into plugins (`tools/call`, `resources/read`, `prompts/get`,
//! `completion/complete`), written against [`RequestCx`] so that any transport can reach them
//! through the dispatcher.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use rmcp::ErrorData;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, GetPromptRequestParams, GetPromptResponse, InputResponses,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, ServerResult,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::meta::Meta;
use super::reply::{Reply, ToolReply, wire_json};
use super::request::RequestCx;
use super::state::{Arguments, Binding};
use super::unique::{self, Unreadable};
use super::{
    CapsuleServer, Completion, Failure, PromptGet, ResourceRead, Round, Rounds, ToolCall, authorize, call_error,
    check_uri, convert, input, off_reactor, plugin_error,
};
use crate::auth::scope::Kind;
use crate::catalog::ToolEntry;
use crate::policy::ClientRoots;
use crate::runtime::types as wit;
use crate::telemetry::Outcome;

/// `tools/call`'s params, the arguments left as the client's own text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallParams<'a> {
    #[serde(rename = "_meta", default, borrow)]
    pub meta: Option<Meta<'a>>,
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub arguments: Option<&'a RawValue>,
    #[serde(default)]
    pub input_responses: Option<InputResponses>,
    #[serde(default)]
    pub request_state: Option<String>,
}

impl CapsuleServer {
    /// `tools/call`: validate the arguments, run the tool through its input rounds, check its
    /// output. The plugin gets the arguments as the client wrote them, and the client gets the
    /// plugin's result as written from its WIT value. `entry` is the catalog's tool of that
    /// name, if there is one.
    pub(super) async fn tools_call(
        &self,
        params: CallParams<'_>,
        entry: Option<Arc<ToolEntry>>,
        cx: &RequestCx,
    ) -> Result<Reply, ErrorData> {
        let Some(entry) = entry else {
            return Err(ErrorData::invalid_params(
                format!("Unknown tool: {}", super::excerpt(&params.name)),
                Some(json!({"name": params.name})),
            ));
        };
        authorize(cx, &entry.plugin, Kind::Tools, &params.name)?;
        let _ = cx.note.tool.set(Arc::from(&*params.name));
        let meters = entry.meters.get_or_init(|| {
            let plugin = &entry.plugin;
            self.shared.metrics.tool(plugin.account().tenant(), plugin.name(), &entry.tool.name)
        });
        let running = meters.running();
        let failure = OnceLock::new();
        let started = std::time::Instant::now();
        let reply = self.run_tool(entry.clone(), params, cx, &failure).await;
        drop(running);
        let outcome = failure.get().copied().unwrap_or(match &reply {
            Ok(Reply::Tool(result)) if !result.is_error() => Outcome::Ok,
            Ok(Reply::Model(ServerResult::InputRequiredResult(_))) => Outcome::InputRequired,
            _ => Outcome::ToolError,
        });
        meters.call(outcome, started.elapsed());
        reply
    }

    /// The rest of `tools/call` once the tool is found and allowed. A failure of the call
    /// itself (a limit, a trap, a refusal) is kept in `failure` for the metrics.
    async fn run_tool(
        &self,
        entry: Arc<ToolEntry>,
        params: CallParams<'_>,
        cx: &RequestCx,
        failure: &OnceLock<Outcome>,
    ) -> Result<Reply, ErrorData> {
        let failed = |message: String| Ok(Reply::Tool(ToolReply::error(message)));
        if let Err(quota) = entry.plugin.account().take(cx.caller(), &params.name).await {
            let _ = failure.set(Outcome::Busy);
            return failed(quota.to_string());
        }
        let text = params.arguments.map_or("{}", RawValue::get);
        let arguments = match unique::parse(text) {
            Ok(arguments) => arguments,
            Err(Unreadable::Syntax(e)) => {
                return Err(ErrorData::invalid_params(format!("Invalid params: arguments: {e}"), None));
            }
            Err(Unreadable::Duplicate(e)) => return failed(format!("Invalid arguments for tool {}: {e}", params.name)),
        };
        if !arguments.is_object() {
            return Err(ErrorData::invalid_params("Invalid params: arguments must be an object", None));
        }
        let checked = {
            let entry = entry.clone();
            off_reactor(entry.validate_arguments_inline(text.len()), move || entry.validate_arguments(&arguments)).await
        };
        if let Err(problems) = checked {
            return failed(format!("Invalid arguments for tool {}: {problems}", params.name));
        }
        let plugin = entry.plugin.clone();
        // Sealed state is the principal's: another caller cannot replay it.
        let bound_to = Binding {
            method: "tools/call",
            target: &params.name,
            caller: cx.caller(),
            plugin: plugin.name(),
            arguments: Arguments::Json(text),
        };
        let op = ToolCall { name: &params.name, arguments: text };
        let retry = (params.input_responses.as_ref(), params.request_state.as_deref());
        let outcome = self.with_input(cx, &plugin, op, &bound_to, retry).await;
        match outcome {
            Ok(Rounds::Done(Ok(mut result))) => {
                let checks_output = entry.output_schema.is_some() && !result.is_error;
                let structured = match result.structured_content.take() {
                    Some(text) => {
                        let not_json = |e: serde_json::Error| {
                            format!(
                                "Tool {} returned structured content that is not JSON a client can read: {e}",
                                params.name
                            )
                        };
                        if checks_output {
                            let value: Value = match serde_json::from_str(&text) {
                                Ok(value) => value,
                                Err(e) => return failed(not_json(e)),
                            };
                            let (entry, inline) = (entry.clone(), entry.validate_output_inline(text.len()));
                            if let Err(problems) = off_reactor(inline, move || entry.validate_output(&value)).await {
                                return failed(format!(
                                    "Tool {} returned output that does not match its output schema: {problems}",
                                    params.name
                                ));
                            }
                        }
                        match wire_json(text) {
                            Ok(raw) => Some(raw),
                            Err(e) => return failed(not_json(e)),
                        }
                    }
                    None if checks_output => {
                        return failed(format!(
                            "Tool {} declares an output schema but returned no structured content",
                            params.name
                        ));
                    }
                    None => None,
                };
                Ok(Reply::Tool(ToolReply::new(result, structured, cx.known())))
            }
            Ok(Rounds::Done(Err(error))) => failed(match error {
                wit::Error::NotFound(m) | wit::Error::InvalidParams(m) | wit::Error::Failed(m) => m,
            }),
            Ok(Rounds::InputRequired(ir)) => Ok(Reply::Model(ServerResult::InputRequiredResult(ir))),
            Err(Failure::Protocol(error)) => Err(error),
            Err(Failure::Call(error)) => {
                let _ = failure.set(error.outcome());
                failed(format!("Tool {} failed: {error}", params.name))
            }
        }
    }

    /// `resources/read`: route the URI to its plugin and read it through its input rounds.
    pub(super) async fn resources_read(
        &self,
        params: ReadResourceRequestParams,
        cx: &RequestCx,
    ) -> Result<ReadResourceResponse, ErrorData> {
        check_uri(&params.uri)?;
        let not_found = |message: String| ErrorData::resource_not_found(message, Some(json!({"uri": params.uri})));
        let catalog = self.shared.catalog();
        let Some(plugin) = catalog.resource_owner(&params.uri).cloned() else {
            return Err(not_found(format!("Resource not found: {}", super::excerpt(&params.uri))));
        };
        authorize(cx, &plugin, Kind::Resources, &params.uri)?;
        let bound_to = Binding {
            method: "resources/read",
            target: &params.uri,
            caller: cx.caller(),
            plugin: plugin.name(),
            arguments: Arguments::None,
        };
        let retry = (params.input_responses.as_ref(), params.request_state.as_deref());
        let outcome = self.with_input(cx, &plugin, ResourceRead { uri: &params.uri }, &bound_to, retry).await;
        match outcome {
            Ok(Rounds::Done(Ok(contents))) if contents.is_empty() => {
                Err(not_found(format!("Resource not found: {}", super::excerpt(&params.uri))))
            }
            Ok(Rounds::Done(Ok(contents))) => {
                Ok(ReadResourceResult::new(contents.iter().map(convert::resource_contents).collect()).into())
            }
            Ok(Rounds::Done(Err(error))) => Err(plugin_error(error, not_found)),
            Ok(Rounds::InputRequired(ir)) => Ok(ir.into()),
            Err(Failure::Protocol(error)) => Err(error),
            Err(Failure::Call(error)) => Err(call_error(&plugin, error)),
        }
    }

    /// `prompts/get`: render a prompt through its input rounds.
    pub(super) async fn prompts_get(
        &self,
        params: GetPromptRequestParams,
        cx: &RequestCx,
    ) -> Result<GetPromptResponse, ErrorData> {
        let catalog = self.shared.catalog();
        let Some(entry) = catalog.prompt(&params.name) else {
            return Err(ErrorData::invalid_params(
                format!("Unknown prompt: {}", super::excerpt(&params.name)),
                Some(json!({"name": params.name})),
            ));
        };
        let mut arguments = Vec::new();
        for (name, value) in params.arguments.iter().flatten() {
            match value {
                Value::String(s) => arguments.push((name.clone(), s.clone())),
                other => {
                    return Err(ErrorData::invalid_params(
                        format!("prompt argument {name} must be a string, got {other}"),
                        None,
                    ));
                }
            }
        }
        if let Some(missing) =
            entry.prompt.arguments.iter().find(|a| a.required && !arguments.iter().any(|(n, _)| n == &a.name))
        {
            return Err(ErrorData::invalid_params(
                format!("prompt {} needs argument {}", params.name, missing.name),
                None,
            ));
        }
        let plugin = entry.plugin.clone();
        authorize(cx, &plugin, Kind::Prompts, &params.name)?;
        let bound_to = Binding {
            method: "prompts/get",
            target: &params.name,
            caller: cx.caller(),
            plugin: plugin.name(),
            arguments: Arguments::Strings(&arguments),
        };
        let retry = (params.input_responses.as_ref(), params.request_state.as_deref());
        let op = PromptGet { name: &params.name, arguments: &arguments };
        let outcome = self.with_input(cx, &plugin, op, &bound_to, retry).await;
        match outcome {
            Ok(Rounds::Done(Ok(result))) => Ok(convert::prompt_result(&result, cx.known()).into()),
            Ok(Rounds::Done(Err(error))) => Err(plugin_error(error, |m| ErrorData::invalid_params(m, None))),
            Ok(Rounds::InputRequired(ir)) => Ok(ir.into()),
            Err(Failure::Protocol(error)) => Err(error),
            Err(Failure::Call(error)) => Err(call_error(&plugin, error)),
        }
    }

    /// `completion/complete`: ask the plugin owning the reference for suggestions.
    pub(super) async fn completion_complete(
        &self,
        params: CompleteRequestParams,
        cx: &RequestCx,
    ) -> Result<CompleteResult, ErrorData> {
        let catalog = self.shared.catalog();
        let (plugin, reference, kind, name) = match &params.r#ref {
            Reference::Prompt(p) => (
                catalog.prompt(&p.name).map(|e| e.plugin.clone()),
                wit::Reference::Prompt(p.name.clone()),
                Kind::Prompts,
                &p.name,
            ),
            Reference::Resource(r) => {
                check_uri(&r.uri)?;
                let owner = catalog.template_owner(&r.uri).cloned();
                (owner, wit::Reference::ResourceTemplate(r.uri.clone()), Kind::Resources, &r.uri)
            }
            _ => return Err(ErrorData::invalid_params("unsupported completion reference", None)),
        };
        let Some(plugin) = plugin else {
            return Err(ErrorData::invalid_params(
                "completion reference names no known prompt or resource template",
                None,
            ));
        };
        authorize(cx, &plugin, kind, name)?;
        if !plugin.manifest().completion {
            return Ok(CompleteResult::new(CompletionInfo::new(Vec::new()).unwrap_or_default()));
        }
        let context: Vec<(String, String)> = params
            .context
            .as_ref()
            .and_then(|c| c.arguments.as_ref())
            .map(|args| args.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let op = Completion {
            reference: &reference,
            argument: &params.argument.name,
            value: &params.argument.value,
            context: &context,
        };
        let _call = plugin.account().call().await.map_err(|e| call_error(&plugin, e.into()))?;
        let client = input::plugin_capabilities(cx.client.as_ref(), cx.has_elicitation());
        let request = wit::RequestContext::first(client);
        let Round::Done(result) =
            self.run(cx, &plugin, &op, &request, &ClientRoots::NotOffered).await.map_err(|e| call_error(&plugin, e))?;
        let suggestions = result.map_err(|e| plugin_error(e, |m| ErrorData::invalid_params(m, None)))?;
        clipped(suggestions).map(CompleteResult::new)
    }
}

/// A plugin's suggestions as MCP allows them: at most [`CompletionInfo::MAX_VALUES`], and
/// when more were cut off, `hasMore` says so (and `total` counts them, if the plugin did not).
fn clipped(suggestions: wit::Suggestions) -> Result<CompletionInfo, ErrorData> {
    let mut values = suggestions.values;
    let given = values.len();
    let cut = given > CompletionInfo::MAX_VALUES;
    values.truncate(CompletionInfo::MAX_VALUES);
    let mut info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
    info.total = suggestions.total.or_else(|| cut.then(|| u32::try_from(given).unwrap_or(u32::MAX)));
    info.has_more = Some(suggestions.has_more || cut);
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_cut_to_the_limit_say_there_are_more() {
        let many = |n: usize, has_more, total| wit::Suggestions {
            values: (0..n).map(|i| i.to_string()).collect(),
            total,
            has_more,
        };
        let info = clipped(many(150, false, None)).unwrap();
        assert_eq!((info.values.len(), info.has_more, info.total), (100, Some(true), Some(150)));
        let info = clipped(many(150, false, Some(900))).unwrap();
        assert_eq!((info.has_more, info.total), (Some(true), Some(900)));
        let info = clipped(many(3, false, None)).unwrap();
        assert_eq!((info.values.len(), info.has_more, info.total), (3, Some(false), None));
    }
}
