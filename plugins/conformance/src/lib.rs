//! The fixture tools, resources and prompts that the official MCP conformance suites call
//! (`@modelcontextprotocol/conformance` 0.1.16 and 0.2.0-alpha.12, both the 2025-11-25 and the
//! 2026-07-28 wires). Client interaction (logging, progress, sampling, elicitation, roots) goes
//! through the SDK's WIT path; the host turns it into the protocol each client speaks.

use std::thread::sleep;
use std::time::Duration;

use capsule_sdk::ListKind;
use capsule_sdk::prelude::*;

const PNG: &[u8] = include_bytes!("pixel.png");
const WAV: &[u8] = include_bytes!("silence.wav");
const STEP: Duration = Duration::from_millis(50);

fn simple_text(_: NoArgs) -> &'static str {
    "This is a simple text response for testing."
}

fn image(_: NoArgs) -> Content {
    Content::image(PNG, "image/png")
}

fn audio(_: NoArgs) -> Content {
    Content::audio(WAV, "audio/wav")
}

fn embedded_resource(_: NoArgs) -> Content {
    Content::resource_text("test://embedded-resource", "text/plain", "This is an embedded resource content.")
}

fn mixed(_: NoArgs) -> Vec<Content> {
    vec![
        Content::text("Multiple content types test:"),
        Content::image(PNG, "image/png"),
        Content::resource_text("test://mixed-content-resource", "application/json", r#"{"test":"data","value":123}"#),
    ]
}

fn with_logging(_: NoArgs, cx: &Context) -> &'static str {
    cx.info("Tool execution started");
    sleep(STEP);
    cx.info("Tool processing data");
    sleep(STEP);
    cx.info("Tool execution completed");
    "Logging test completed"
}

fn with_progress(_: NoArgs, cx: &Context) -> &'static str {
    for step in [0.0, 50.0, 100.0] {
        cx.progress(step, Some(100.0), Some(&format!("Completed step {step} of 100")));
        if step < 100.0 {
            sleep(STEP);
        }
    }
    "Progress test completed"
}

fn error_handling(_: NoArgs) -> ToolResult {
    ToolResult::error("This tool intentionally returns an error for testing")
}

#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// The prompt to send to the client's model.
    prompt: String,
}

fn sampling(args: SamplingArgs, cx: &Context) -> Outcome<String> {
    match cx.response("answer") {
        Some(InputResponse::Sampling { content: Content::Text(text), .. }) => {
            Outcome::Done(format!("LLM response: {text}"))
        }
        Some(InputResponse::Sampling { content, .. }) => Outcome::Done(format!("LLM response: {content:?}")),
        Some(other) => unusable(other),
        None => Ask::new().sample("answer", args.prompt, 100).into(),
    }
}

/// An answer a handler cannot use ends its call: asking again would loop for as long as the
/// client keeps declining, up to the host's limit on rounds.
fn unusable<T: From<String>>(answer: &InputResponse) -> Outcome<T> {
    Outcome::Done(format!("Unexpected answer: {answer:?}").into())
}

#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// The message shown to the user.
    message: String,
}

#[derive(JsonSchema)]
#[allow(dead_code)] // Only its schema is used: it describes the form.
struct UserInfo {
    /// Your user name.
    username: String,
    /// Your e-mail address.
    email: String,
}

fn describe_elicitation(cx: &Context, key: &str) -> Option<String> {
    match cx.response(key)? {
        InputResponse::Elicitation { action, content } => Some(format!(
            "User response: action={}, content={}",
            match action {
                ElicitAction::Accept => "accept",
                ElicitAction::Decline => "decline",
                ElicitAction::Cancel => "cancel",
            },
            content.as_ref().map(|c| c.to_string()).unwrap_or_else(|| "{}".into())
        )),
        other => Some(format!("Unexpected answer: {other:?}")),
    }
}

fn elicitation(args: ElicitationArgs, cx: &Context) -> Outcome<String> {
    match describe_elicitation(cx, "info") {
        Some(text) => Outcome::Done(text),
        None => Ask::new().form_for::<UserInfo>("info", args.message).into(),
    }
}

fn elicitation_defaults(_: NoArgs, cx: &Context) -> Outcome<String> {
    match describe_elicitation(cx, "defaults") {
        Some(text) => Outcome::Done(text),
        None => Ask::new()
            .form(
                "defaults",
                "Please review and update the form fields with defaults",
                json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {
                            "type": "string",
                            "description": "User status",
                            "enum": ["active", "inactive", "pending"],
                            "default": "active"
                        },
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    },
                    "required": []
                }),
            )
            .into(),
    }
}

fn elicitation_enums(_: NoArgs, cx: &Context) -> Outcome<String> {
    match describe_elicitation(cx, "enums") {
        Some(text) => Outcome::Done(text),
        None => Ask::new()
            .form(
                "enums",
                "Please select options from the enum fields",
                json!({
                    "type": "object",
                    "properties": {
                        "untitledSingle": {
                            "type": "string",
                            "description": "Select one option",
                            "enum": ["option1", "option2", "option3"]
                        },
                        "titledSingle": {
                            "type": "string",
                            "description": "Select one option with titles",
                            "oneOf": [
                                {"const": "value1", "title": "First Option"},
                                {"const": "value2", "title": "Second Option"},
                                {"const": "value3", "title": "Third Option"}
                            ]
                        },
                        "legacyEnum": {
                            "type": "string",
                            "description": "Select one option (legacy)",
                            "enum": ["opt1", "opt2", "opt3"],
                            "enumNames": ["Option One", "Option Two", "Option Three"]
                        },
                        "untitledMulti": {
                            "type": "array",
                            "description": "Select multiple options",
                            "minItems": 1,
                            "maxItems": 3,
                            "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
                        },
                        "titledMulti": {
                            "type": "array",
                            "description": "Select multiple options with titles",
                            "minItems": 1,
                            "maxItems": 3,
                            "items": {
                                "anyOf": [
                                    {"const": "value1", "title": "First Choice"},
                                    {"const": "value2", "title": "Second Choice"},
                                    {"const": "value3", "title": "Third Choice"}
                                ]
                            }
                        }
                    },
                    "required": []
                }),
            )
            .into(),
    }
}

fn json_schema_2020_12(args: Value) -> String {
    format!("Received: {args}")
}

fn reconnection(_: NoArgs) -> &'static str {
    sleep(Duration::from_millis(100));
    "Reconnection test completed"
}

fn missing_capability(_: NoArgs, cx: &Context) -> Outcome<String> {
    match cx.response("answer") {
        Some(_) => Outcome::Done("Sampling answered".into()),
        None => Ask::new().sample("answer", "Say hello.", 10).into(),
    }
}

fn streaming_elicitation(_: NoArgs, cx: &Context) -> &'static str {
    cx.progress(1.0, Some(1.0), Some("Working"));
    "Streaming test completed"
}

fn logging_tool(_: NoArgs, cx: &Context) -> &'static str {
    cx.info("This message must only reach clients that asked for logs");
    "Logging tool completed"
}

#[derive(Deserialize)]
struct Name {
    name: String,
}

fn name_form() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string", "description": "Your name"}}, "required": ["name"]})
}

fn ir_elicitation(_: NoArgs, cx: &Context) -> Outcome<String> {
    match cx.form::<Name>("user_name") {
        Form::Accepted(Name { name }) => Outcome::Done(format!("Hello, {name}!")),
        Form::Unusable(other) => unusable(other),
        Form::Missing => Ask::new().form("user_name", "What is your name?", name_form()).into(),
    }
}

fn ir_sampling(_: NoArgs, cx: &Context) -> Outcome<String> {
    match cx.response("capital") {
        Some(InputResponse::Sampling { content: Content::Text(text), .. }) => {
            Outcome::Done(format!("The model said: {text}"))
        }
        Some(other) => unusable(other),
        None => Ask::new().sample("capital", "What is the capital of France?", 100).into(),
    }
}

fn ir_list_roots(_: NoArgs, cx: &Context) -> Outcome<String> {
    match cx.response("client_roots") {
        Some(InputResponse::Roots(roots)) => {
            Outcome::Done(format!("Roots: {}", roots.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>().join(", ")))
        }
        Some(other) => unusable(other),
        None => Ask::new().roots("client_roots").into(),
    }
}

fn ir_request_state(_: NoArgs, cx: &Context) -> Outcome<String> {
    if cx.state() == Some(b"state-ok".as_slice()) && cx.response("confirm").is_some() {
        return Outcome::Done("state-ok: the request state came back intact".into());
    }
    Ask::new()
        .form(
            "confirm",
            "Please confirm",
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
        )
        .state(b"state-ok".to_vec())
        .into()
}

fn ir_multiple_inputs(_: NoArgs, cx: &Context) -> Outcome<String> {
    let greeting = cx.response("greeting");
    let roots = cx.response("client_roots");
    if let (Some(_), Some(_)) = (greeting, roots) {
        match cx.form::<Name>("user_name") {
            Form::Accepted(Name { name }) => return Outcome::Done(format!("Got all three inputs for {name}")),
            Form::Unusable(other) => return unusable(other),
            Form::Missing => {}
        }
    }
    Ask::new()
        .form("user_name", "What is your name?", name_form())
        .sample("greeting", "Write a short greeting.", 50)
        .roots("client_roots")
        .state(b"multiple".to_vec())
        .into()
}

#[derive(Serialize, Deserialize)]
struct Round {
    round: u32,
    name: Option<String>,
}

#[derive(Deserialize)]
struct Color {
    color: String,
}

fn ir_multi_round(_: NoArgs, cx: &Context) -> Outcome<String> {
    let state = cx.state_json::<Round>();
    match state {
        Some(Round { round: 1, .. }) => match cx.form::<Name>("user_name") {
            Form::Accepted(Name { name }) => Ask::new()
                .form(
                    "favorite_color",
                    "What is your favorite color?",
                    json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}),
                )
                .state_json(&Round { round: 2, name: Some(name) })
                .into(),
            Form::Unusable(other) => unusable(other),
            Form::Missing => Ask::new()
                .form("user_name", "What is your name?", name_form())
                .state_json(&Round { round: 1, name: None })
                .into(),
        },
        Some(Round { round: 2, name }) => match cx.form::<Color>("favorite_color") {
            Form::Accepted(Color { color }) => Outcome::Done(format!("{} likes {color}", name.unwrap_or_default())),
            Form::Unusable(other) => unusable(other),
            Form::Missing => Ask::new()
                .form(
                    "favorite_color",
                    "What is your favorite color?",
                    json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}),
                )
                .state_json(&Round { round: 2, name })
                .into(),
        },
        _ => Ask::new()
            .form("user_name", "What is your name?", name_form())
            .state_json(&Round { round: 1, name: None })
            .into(),
    }
}

fn ir_tampered_state(_: NoArgs, cx: &Context) -> Outcome<String> {
    if cx.state() == Some(b"trusted".as_slice()) && cx.response("confirm").is_some() {
        return Outcome::Done("The state was intact".into());
    }
    Ask::new()
        .form(
            "confirm",
            "Please confirm",
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
        )
        .state(b"trusted".to_vec())
        .into()
}

fn ir_capabilities(_: NoArgs, cx: &Context) -> Outcome<String> {
    if cx.responses().next().is_some() {
        return Outcome::Done("Received the input this client could give".into());
    }
    let client = cx.client();
    let mut ask = Ask::new();
    if client.elicitation_form {
        ask = ask.form("user_name", "What is your name?", name_form());
    }
    if client.sampling {
        ask = ask.sample("greeting", "Write a short greeting.", 50);
    }
    if client.roots {
        ask = ask.roots("client_roots");
    }
    if ask == Ask::new() {
        return Outcome::Done("This client declared no input capability".into());
    }
    ask.into()
}

#[derive(Deserialize, JsonSchema)]
struct HeaderArgs {
    /// A region name; clients mirror it into the `Mcp-Param-Region` header (SEP-2243).
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

/// Who is calling, as the host tells plugins: the tenant and the authenticated principal.
fn whoami(_: NoArgs, cx: &Context) -> Json<capsule_sdk::Identity> {
    Json(cx.caller())
}

fn header_echo(args: HeaderArgs) -> String {
    format!("Region: {}", args.region)
}

/// With a directory granted at /state, the change triggers really change a list: each one
/// toggles a marker there, and the extra tool or prompt is listed while its marker exists.
/// The host reads the lists again after a trigger and tells clients only of real changes.
const TOOL_MARKER: &str = "/state/extra-tool";
const PROMPT_MARKER: &str = "/state/extra-prompt";

fn toggle(marker: &str) {
    // Without a /state grant this fails, nothing changes, and clients hear nothing.
    let _ =
        if std::path::Path::new(marker).exists() { std::fs::remove_file(marker) } else { std::fs::write(marker, "") };
}

fn trigger_tool_change(_: NoArgs, cx: &Context) -> &'static str {
    toggle(TOOL_MARKER);
    cx.list_changed(ListKind::Tools);
    "Tool list change notified"
}

fn trigger_prompt_change(_: NoArgs, cx: &Context) -> &'static str {
    toggle(PROMPT_MARKER);
    cx.list_changed(ListKind::Prompts);
    "Prompt list change notified"
}

#[derive(Deserialize, JsonSchema)]
struct PromptArgs {
    /// First test argument.
    arg1: String,
    /// Second test argument.
    arg2: String,
}

#[derive(Deserialize, JsonSchema)]
struct EmbeddedPromptArgs {
    /// URI of the resource to embed.
    #[serde(rename = "resourceUri")]
    resource_uri: String,
}

#[derive(Deserialize)]
struct ContextAnswer {
    context: String,
}

fn ir_prompt(_: NoArgs, cx: &Context) -> Outcome<Vec<PromptMessage>> {
    match cx.form::<ContextAnswer>("user_context") {
        Form::Accepted(ContextAnswer { context }) => {
            Outcome::Done(vec![PromptMessage::user(format!("Context provided: {context}"))])
        }
        Form::Unusable(other) => Outcome::Done(vec![PromptMessage::user(format!("No context: {other:?}"))]),
        Form::Missing => Ask::new()
            .form(
                "user_context",
                "What context should the prompt use?",
                json!({"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}),
            )
            .into(),
    }
}

fn json_schema_2020_12_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

capsule_sdk::plugin!(|p| {
    p.tool("test_simple_text", "Returns a simple text response", simple_text);
    p.tool("test_image_content", "Returns a 1x1 PNG image", image);
    p.tool("test_audio_content", "Returns a short WAV clip", audio);
    p.tool("test_embedded_resource", "Returns an embedded text resource", embedded_resource);
    p.tool("test_multiple_content_types", "Returns text, an image and an embedded resource", mixed);
    p.tool("test_tool_with_logging", "Logs three messages while it runs", with_logging);
    p.tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100", with_progress);
    p.tool("test_error_handling", "Always fails, as a tool error", error_handling);
    p.tool("test_sampling", "Asks the client's model to answer a prompt", sampling);
    p.tool("test_elicitation", "Asks the user for a user name and e-mail", elicitation);
    p.tool("test_elicitation_sep1034_defaults", "Asks for a form whose fields have defaults", elicitation_defaults);
    p.tool("test_elicitation_sep1330_enums", "Asks for a form with every enum style", elicitation_enums);
    p.tool(
        "json_schema_2020_12_tool",
        "Takes arguments described by a JSON Schema 2020-12 document",
        json_schema_2020_12,
    )
    .input_schema(json_schema_2020_12_schema());
    p.tool("test_reconnection", "Answers after a short pause", reconnection);
    p.tool("test_missing_capability", "Needs the client's sampling capability", missing_capability);
    p.tool("test_streaming_elicitation", "Streams a progress notification, then answers", streaming_elicitation);
    p.tool("test_logging_tool", "Logs a message and answers", logging_tool);
    p.tool("test_input_required_result_elicitation", "Asks the user's name through input-required", ir_elicitation);
    p.tool("test_input_required_result_sampling", "Samples the client's model through input-required", ir_sampling);
    p.tool("test_input_required_result_list_roots", "Lists the client's roots through input-required", ir_list_roots);
    p.tool("test_input_required_result_request_state", "Round-trips request state", ir_request_state);
    p.tool("test_input_required_result_multiple_inputs", "Asks for three inputs at once", ir_multiple_inputs);
    p.tool("test_input_required_result_multi_round", "Asks over two rounds", ir_multi_round);
    p.tool("test_input_required_result_tampered_state", "Relies on integrity-protected state", ir_tampered_state);
    p.tool("test_input_required_result_capabilities", "Asks only for what the client supports", ir_capabilities);
    p.tool("whoami", "Says who is calling: the tenant, subject, client and granted scopes", whoami);
    p.tool("test_header_param", "Echoes a parameter that clients mirror into an HTTP header", header_echo);
    p.tool("test_trigger_tool_change", "Notifies that the tool list changed", trigger_tool_change);
    p.tool("test_trigger_prompt_change", "Notifies that the prompt list changed", trigger_prompt_change);
    if std::path::Path::new(TOOL_MARKER).exists() {
        p.tool("test_changed_tool", "Listed after test_trigger_tool_change", |_: NoArgs| "changed");
    }
    if std::path::Path::new(PROMPT_MARKER).exists() {
        p.prompt("test_changed_prompt", "Listed after test_trigger_prompt_change", |_: NoArgs| "changed".to_owned());
    }

    p.resource("test://static-text", "Static text", Some("text/plain"), |()| {
        "This is the content of the static text resource.".to_string()
    })
    .description("A static text resource");
    p.resource("test://static-binary", "Static binary", Some("image/png"), |()| PNG.to_vec())
        .description("A static binary resource (a PNG image)");
    p.resource("test://watched-resource", "Watched resource", Some("text/plain"), |()| {
        "This resource can be subscribed to.".to_string()
    })
    .description("A resource clients may subscribe to");
    p.template("test://template/{id}/data", "Template data", Some("application/json"), |vars: UriVariables| {
        let id = vars.get("id").unwrap_or_default();
        Json(json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}))
    })
    .description("Data for any id");

    p.prompt("test_simple_prompt", "A prompt without arguments", |_: NoArgs| {
        "This is a simple prompt for testing.".to_string()
    });
    p.prompt("test_prompt_with_arguments", "A prompt with two arguments", |a: PromptArgs| {
        format!("Prompt with arguments: arg1='{}', arg2='{}'", a.arg1, a.arg2)
    });
    p.prompt("test_prompt_with_embedded_resource", "A prompt embedding a resource", |a: EmbeddedPromptArgs| {
        vec![
            PromptMessage::user(Content::resource_text(
                a.resource_uri.clone(),
                "text/plain",
                "Embedded resource content for testing.",
            )),
            PromptMessage::user("Please process the embedded resource above."),
        ]
    });
    p.prompt("test_prompt_with_image", "A prompt with an image", |_: NoArgs| {
        vec![
            PromptMessage::user(Content::image(PNG, "image/png")),
            PromptMessage::user("Please analyze the image above."),
        ]
    });
    p.prompt("test_input_required_result_prompt", "Asks for context through input-required", ir_prompt);

    p.complete_prompt("test_prompt_with_arguments", "arg1", |value| {
        ["paris", "park", "party"].iter().filter(|v| v.starts_with(value)).map(|v| v.to_string()).collect()
    });
});
