//! Plugin input requests (elicitation, sampling, roots), served in whatever way the client's
//! revision allows: as an `input_required` result for 2026-07-28 requests, or by sending real
//! server-to-client requests to older sessions and calling the plugin again.

#![allow(deprecated)] // Sampling and roots are deprecated by SEP-2577, still served to clients that declare them.

use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest, ElicitRequestParams,
    InputRequest, InputRequests, InputRequiredResult, ListRootsRequest, ServerRequest,
};
use serde_json::{Value, json};
use tracing::Instrument;

use super::convert;
use super::request::ClientLink;
use super::roots::ROOTS_KEY;
use super::state::{Binding, InvalidState, StateCodec};
use crate::runtime::types as wit;

/// The most state a plugin may keep across a 2026-07-28 client's rounds. It rides sealed
/// (base64, a third larger) in `requestState`, which the client must send back in a request
/// body (`--max-body-bytes`, 4 MiB by default): more could never be retried.
pub const MAX_STATE_BYTES: usize = 1 << 20;

/// How long a legacy client may take to answer one elicitation, sampling or roots request.
pub const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
/// Input rounds one request may take before the host gives up on the plugin.
pub const MAX_ROUNDS: usize = 16;
/// Inputs a plugin may ask for in one round: each may become a request to the client.
pub const MAX_REQUESTS: usize = 16;

/// The client capabilities a plugin sees; `elicitation` whether the client's revision has it.
pub fn plugin_capabilities(caps: Option<&ClientCapabilities>, elicitation: bool) -> wit::ClientCapabilities {
    let caps = caps.cloned().unwrap_or_default();
    let elicitation = caps.elicitation.as_ref().filter(|_| elicitation);
    wit::ClientCapabilities {
        // A bare `elicitation: {}` (2025-06-18) means form mode.
        elicitation_form: elicitation.is_some_and(|e| e.form.is_some() || e.url.is_none()),
        elicitation_url: elicitation.is_some_and(|e| e.url.is_some()),
        sampling: caps.sampling.is_some(),
        roots: caps.roots.is_some(),
    }
}

/// The capabilities `requests` need that the client did not declare, if any.
pub fn missing_capabilities(
    requests: &[wit::KeyedInputRequest],
    client: &wit::ClientCapabilities,
) -> Option<ClientCapabilities> {
    let mut missing = json!({});
    for r in requests {
        let (name, value, ok) = match &r.request {
            wit::InputRequest::ElicitForm(_) => ("elicitation", json!({"form": {}}), client.elicitation_form),
            wit::InputRequest::ElicitUrl(_) => ("elicitation", json!({"url": {}}), client.elicitation_url),
            wit::InputRequest::Sample(_) => ("sampling", json!({}), client.sampling),
            wit::InputRequest::ListRoots => ("roots", json!({}), client.roots),
        };
        if !ok {
            missing[name] = value;
        }
    }
    if missing.as_object().is_some_and(|m| m.is_empty()) {
        return None;
    }
    Some(serde_json::from_value(missing).unwrap_or_default())
}

/// Build the `input_required` result for a 2026-07-28 client, sealing the plugin's state;
/// with `ask_roots`, the host's own roots request rides along.
pub fn input_required_result(
    ir: &wit::InputRequired,
    ask_roots: bool,
    codec: &StateCodec,
    bound_to: &Binding<'_>,
) -> Result<InputRequiredResult, ErrorData> {
    if let Some(r) = ir.requests.iter().find(|r| r.key.starts_with("capsule.")) {
        return Err(ErrorData::internal_error(
            format!("the plugin used the input key {:?}; keys starting with \"capsule.\" are the host's", r.key),
            None,
        ));
    }
    if let Some(state) = ir.state.as_deref().filter(|s| s.len() > MAX_STATE_BYTES) {
        return Err(ErrorData::internal_error(
            format!(
                "the plugin's state to keep is {} bytes; at most {} fit in the requestState a client sends back",
                state.len(),
                MAX_STATE_BYTES
            ),
            None,
        ));
    }
    let host_roots = ask_roots.then_some((ROOTS_KEY, &wit::InputRequest::ListRoots));
    let plugin_requests = ir.requests.iter().map(|r| (r.key.as_str(), &r.request));
    let mut requests = InputRequests::new();
    for (key, request) in host_roots.into_iter().chain(plugin_requests) {
        let request: InputRequest = serde_json::from_value(convert::input_request_json(request)).map_err(|e| {
            ErrorData::internal_error(format!("the plugin asked for input the protocol cannot express: {e}"), None)
        })?;
        requests.insert(key.to_owned(), request);
    }
    let state = ir.state.as_deref().map(|s| codec.seal(s, bound_to));
    if requests.is_empty() && state.is_none() {
        return Err(ErrorData::internal_error("the plugin asked for input without saying what it needs", None));
    }
    Ok(InputRequiredResult::new((!requests.is_empty()).then_some(requests), state))
}

/// Read a 2026-07-28 retry's `inputResponses` and `requestState` into the plugin's context.
pub fn retry_context(
    client: wit::ClientCapabilities,
    responses: Option<&rmcp::model::InputResponses>,
    state: Option<&str>,
    codec: &StateCodec,
    bound_to: &Binding<'_>,
) -> Result<wit::RequestContext, ErrorData> {
    let state = state.map(|s| codec.open(s, bound_to)).transpose().map_err(|e| {
        ErrorData::invalid_params(
            match e {
                InvalidState::Rejected => {
                    "requestState is invalid, expired, or belongs to another request or another plugin"
                }
                InvalidState::Used => {
                    "requestState was used already: each is good for one retry; send the request again without it"
                }
                InvalidState::Busy => {
                    "too many retries are held for reuse checks; send the request again without requestState later"
                }
            },
            None,
        )
    })?;
    let responses = responses
        .map(|r| {
            r.iter()
                .map(|(key, value)| wit::KeyedInputResponse {
                    key: key.clone(),
                    response: convert::input_response(value),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(wit::RequestContext { client, responses, state })
}

/// Ask a legacy client for everything in `requests`, by real server-to-client requests on the
/// originating request's stream, and collect the answers. `forms` is what the client's
/// revision can show.
pub async fn ask_legacy_client(
    requests: &[wit::KeyedInputRequest],
    link: &dyn ClientLink,
    forms: Forms,
) -> Result<Vec<wit::KeyedInputResponse>, ErrorData> {
    ask_within(requests, link, CLIENT_ANSWER_TIMEOUT, forms).await
}

/// The elicitation forms a client's revision defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forms {
    /// 2025-06-18: single-choice enums with `enum` and `enumNames`, no multi-select.
    First,
    /// 2025-11-25 on: titled (`oneOf`) and multi-select (`array`) enums too.
    Enums,
}

/// Make a plugin's form (`requestedSchema`) one that `forms` defines, or say why it cannot
/// be: a titled single choice (`oneOf` of `const` and `title`) is written as `enum` and
/// `enumNames` for 2025-06-18, which has nothing for a multi-select.
fn fit_form(schema: &mut Value, forms: Forms) -> Result<(), String> {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else { return Ok(()) };
    if forms == Forms::Enums {
        return Ok(());
    }
    for (name, property) in properties {
        let Some(property) = property.as_object_mut() else { continue };
        if property.get("type").and_then(Value::as_str) == Some("array") {
            return Err(format!(
                "the question {name:?} is a multi-select, which this client's revision (2025-06-18) cannot show; \
                 2025-11-25 and later can"
            ));
        }
        let Some(Value::Array(options)) = property.remove("oneOf") else { continue };
        let option = |option: &Value, key: &str| option.get(key).and_then(Value::as_str).map(str::to_owned);
        let values: Option<Vec<String>> = options.iter().map(|o| option(o, "const")).collect();
        let titles: Option<Vec<String>> = options.iter().map(|o| option(o, "title")).collect();
        let Some(values) = values else {
            return Err(format!("the question {name:?} has a choice without a text `const`"));
        };
        property.insert("enum".into(), json!(values));
        if let Some(titles) = titles {
            property.insert("enumNames".into(), json!(titles));
        }
    }
    Ok(())
}

/// [`ask_legacy_client`], waiting `patience` for each answer.
async fn ask_within(
    requests: &[wit::KeyedInputRequest],
    link: &dyn ClientLink,
    patience: Duration,
    forms: Forms,
) -> Result<Vec<wit::KeyedInputResponse>, ErrorData> {
    let mut responses = Vec::with_capacity(requests.len());
    for r in requests {
        let json = convert::input_request_json(&r.request);
        let mut params = json.get("params").cloned().unwrap_or(Value::Null);
        if let wit::InputRequest::ElicitForm(_) = &r.request
            && let Some(schema) = params.get_mut("requestedSchema")
            && let Err(why) = fit_form(schema, forms)
        {
            // The plugin hears why, and may ask another way.
            responses.push(wit::KeyedInputResponse { key: r.key.clone(), response: wit::InputResponse::Invalid(why) });
            continue;
        }
        let span = client_request_span(method(&r.request));
        // The client's work for it continues the trace, as the MCP conventions ask (roots/list
        // has no params to carry it in).
        if let Some((traceparent, tracestate)) = crate::telemetry::trace_context(&span)
            && let Some(params) = params.as_object_mut()
        {
            let meta = params.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert("traceparent".into(), json!(traceparent));
                if let Some(tracestate) = tracestate {
                    meta.insert("tracestate".into(), json!(&*tracestate));
                }
            }
        }
        let bad = |e: serde_json::Error| {
            ErrorData::internal_error(format!("the plugin's input request is malformed: {e}"), None)
        };
        let request = match &r.request {
            wit::InputRequest::ElicitForm(_) | wit::InputRequest::ElicitUrl(_) => ServerRequest::ElicitRequest(
                ElicitRequest::new(serde_json::from_value::<ElicitRequestParams>(params).map_err(bad)?),
            ),
            wit::InputRequest::Sample(_) => ServerRequest::CreateMessageRequest(CreateMessageRequest::new(
                serde_json::from_value::<CreateMessageRequestParams>(params).map_err(bad)?,
            )),
            wit::InputRequest::ListRoots => ServerRequest::ListRootsRequest(ListRootsRequest::default()),
        };
        let asked = tokio::time::timeout(patience, link.request(request));
        // A client that does not answer is the client's doing, not the server's: the plugin
        // hears of it as of any other unusable answer.
        let response = match asked.instrument(span).await {
            Ok(Ok(result)) => convert::input_response(&serde_json::to_value(result).unwrap_or(Value::Null)),
            Ok(Err(e)) => {
                wit::InputResponse::Invalid(format!("the client refused the {} request: {e}", method(&r.request)))
            }
            Err(_) => wit::InputResponse::Invalid(format!(
                "the client did not answer the {} request within {:?}",
                method(&r.request),
                patience
            )),
        };
        responses.push(wit::KeyedInputResponse { key: r.key.clone(), response });
    }
    Ok(responses)
}

/// The span of a request the server sends the client and awaits (a client span, as the MCP
/// conventions have it).
pub fn client_request_span(method: &'static str) -> tracing::Span {
    tracing::debug_span!("client request", otel.name = method, otel.kind = "client", mcp.method.name = method)
}

fn method(request: &wit::InputRequest) -> &'static str {
    match request {
        wit::InputRequest::ElicitForm(_) | wit::InputRequest::ElicitUrl(_) => "elicitation/create",
        wit::InputRequest::Sample(_) => "sampling/createMessage",
        wit::InputRequest::ListRoots => "roots/list",
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;

    use rmcp::model::{ClientResult, ServerNotification};

    use super::*;
    use crate::mcp::request::LinkFuture;

    /// A client that never answers.
    struct Silent;

    impl ClientLink for Silent {
        fn notify(&self, _: ServerNotification) -> LinkFuture<'_, ()> {
            Box::pin(async { Ok(()) })
        }
        fn request(&self, _: ServerRequest) -> LinkFuture<'_, ClientResult> {
            Box::pin(std::future::pending())
        }
        fn is_closed(&self) -> bool {
            false
        }
        fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            Box::pin(std::future::pending())
        }
    }

    #[test]
    fn forms_are_written_as_the_client_s_revision_defines_them() {
        let form = || {
            json!({"type": "object", "properties": {
                "color": {"type": "string", "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
                "size": {"type": "string", "enum": ["s", "m"], "default": "m"},
                "count": {"type": "integer"}}})
        };
        let mut fitted = form();
        fit_form(&mut fitted, Forms::First).unwrap();
        assert_eq!(
            fitted["properties"]["color"],
            json!({"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"]})
        );
        assert_eq!(fitted["properties"]["size"], form()["properties"]["size"]);
        let mut newer = form();
        fit_form(&mut newer, Forms::Enums).unwrap();
        assert_eq!(newer, form());
        let mut multi = json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}}});
        let why = fit_form(&mut multi, Forms::First).unwrap_err();
        assert!(why.contains("\"tags\" is a multi-select"), "{why}");
        fit_form(&mut multi, Forms::Enums).unwrap();
    }

    /// A client that never answers is an unusable answer for the plugin to hear of, not an
    /// internal error of the server's.
    #[tokio::test]
    async fn a_client_that_never_answers_is_an_unusable_answer() {
        let asked = [wit::KeyedInputRequest { key: "who".into(), request: wit::InputRequest::ListRoots }];
        let answers = ask_within(&asked, &Silent, Duration::from_millis(20), Forms::Enums)
            .await
            .expect("answered for the plugin");
        match &answers[..] {
            [wit::KeyedInputResponse { key, response: wit::InputResponse::Invalid(why) }] => {
                assert_eq!(key, "who");
                assert!(why.contains("did not answer the roots/list request within 20ms"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
