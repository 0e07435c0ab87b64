//! The MCP requests Capsule answers, each mapped onto the catalog and the plugin runtime.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, CompletionInfo,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Reference, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::request::RequestCx;
use super::session::{self, Change};
use super::{
    CapsuleServer, Completion, Failure, MAX_URI_BYTES, PromptGet, ResourceRead, Round, Rounds, ToolCall, call_error,
    check_uri, convert, input, off_reactor, paged, plugin_error,
};
use crate::policy::ClientRoots;
use crate::runtime::{ListKind, types as wit};

/// Resources one session may subscribe to at once.
const MAX_SUBSCRIPTIONS: usize = 1_000;

impl ServerHandler for CapsuleServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_completions()
            .build();
        let mut capabilities = capabilities;
        #[allow(deprecated)]
        {
            capabilities.logging = Some(Default::default());
        }
        let mut info = Implementation::new("capsule", env!("CARGO_PKG_VERSION"));
        info.title = Some("Capsule".into());
        info.description = Some("MCP tools, resources and prompts from sandboxed WebAssembly plugins".into());
        ServerConfig::new(capabilities).with_server_info(info).with_instructions(
            "Tools, resources and prompts here come from WebAssembly plugins, each running in its own sandbox.",
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.shared.catalog().tool(name).map(|entry| convert::tool(entry))
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        self.shared.sessions.register(Arc::new(cx.peer), self.session.clone());
    }

    async fn on_roots_list_changed(&self, _cx: NotificationContext<RoleServer>) {
        self.session.forget_roots().await;
    }

    async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.shared.catalog();
        let (tools, next) = paged(catalog.tools(), &params)?;
        let mut result = ListToolsResult::with_all_items(tools.iter().map(|entry| convert::tool(entry)).collect());
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        mut params: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let cx = RequestCx::from_rmcp(&cx);
        let Some(entry) = self.shared.catalog().tool(&params.name).cloned() else {
            return Err(ErrorData::invalid_params(
                format!("Unknown tool: {}", params.name),
                Some(json!({"name": params.name})),
            ));
        };
        let arguments = Value::Object(params.arguments.take().unwrap_or_default());
        let text = arguments.to_string();
        let checked = {
            let entry = entry.clone();
            off_reactor(text.len(), move || entry.validate_arguments(&arguments)).await
        };
        if let Err(problems) = checked {
            return Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text(format!(
                "Invalid arguments for tool {}: {problems}",
                params.name
            ))])
            .into());
        }
        let arguments = text;
        let plugin = entry.plugin.clone();
        let bound_to = format!("tools/call\0{}", params.name);
        let op = ToolCall { name: &params.name, arguments: &arguments };
        let retry = (params.input_responses.as_ref(), params.request_state.as_deref());
        let outcome = self.with_input(&cx, &plugin, op, &bound_to, retry).await;
        let failed = |message: String| Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text(message)]).into());
        match outcome {
            Ok(Rounds::Done(Ok(result))) => {
                let structured =
                    match result.structured_content.as_deref().map(serde_json::from_str::<Value>).transpose() {
                        Ok(structured) => structured,
                        Err(e) => {
                            return failed(format!(
                                "Tool {} returned structured content that is not JSON: {e}",
                                params.name
                            ));
                        }
                    };
                if let (Some(value), false) = (&structured, result.is_error) {
                    let size = result.structured_content.as_deref().map_or(0, str::len);
                    let checked = {
                        let (entry, value) = (entry.clone(), value.clone());
                        off_reactor(size, move || entry.validate_output(&value)).await
                    };
                    if let Err(problems) = checked {
                        return failed(format!(
                            "Tool {} returned output that does not match its output schema: {problems}",
                            params.name
                        ));
                    }
                } else if entry.output_schema.is_some() && !result.is_error {
                    return failed(format!(
                        "Tool {} declares an output schema but returned no structured content",
                        params.name
                    ));
                }
                Ok(convert::tool_result(&result, structured, cx.links_supported()).into())
            }
            Ok(Rounds::Done(Err(error))) => failed(match error {
                wit::Error::NotFound(m) | wit::Error::InvalidParams(m) | wit::Error::Failed(m) => m,
            }),
            Ok(Rounds::InputRequired(ir)) => Ok(ir.into()),
            Err(Failure::Protocol(error)) => Err(error),
            Err(Failure::Call(error)) => failed(format!("Tool {} failed: {error}", params.name)),
        }
    }

    async fn list_resources(
        &self,
        params: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let catalog = self.shared.catalog();
        let (resources, next) = paged(catalog.resources(), &params)?;
        let mut result =
            ListResourcesResult::with_all_items(resources.iter().map(|r| convert::resource(&r.resource)).collect());
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        params: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let catalog = self.shared.catalog();
        let (templates, next) = paged(catalog.templates(), &params)?;
        let mut result = ListResourceTemplatesResult::with_all_items(
            templates.iter().map(|t| convert::template(&t.template)).collect(),
        );
        result.next_cursor = next;
        Ok(result)
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let cx = RequestCx::from_rmcp(&cx);
        check_uri(&params.uri)?;
        let not_found = |message: String| ErrorData::resource_not_found(message, Some(json!({"uri": params.uri})));
        let catalog = self.shared.catalog();
        let Some(plugin) = catalog.resource_owner(&params.uri).cloned() else {
            return Err(not_found(format!("Resource not found: {}", params.uri)));
        };
        let bound_to = format!("resources/read\0{}", params.uri);
        let retry = (params.input_responses.as_ref(), params.request_state.as_deref());
        let outcome = self.with_input(&cx, &plugin, ResourceRead { uri: &params.uri }, &bound_to, retry).await;
        match outcome {
            Ok(Rounds::Done(Ok(contents))) if contents.is_empty() => {
                Err(not_found(format!("Resource not found: {}", params.uri)))
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

    async fn subscribe(
        &self,
        params: SubscribeRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        check_uri(&params.uri)?;
        if self.shared.catalog().resource_owner(&params.uri).is_none() {
            return Err(ErrorData::resource_not_found(
                format!("Resource not found: {}", params.uri),
                Some(json!({"uri": params.uri})),
            ));
        }
        let mut subscriptions = self.session.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
        if subscriptions.len() >= MAX_SUBSCRIPTIONS && !subscriptions.contains(&params.uri) {
            return Err(ErrorData::invalid_params(
                format!("this session already has the limit of {MAX_SUBSCRIPTIONS} resource subscriptions"),
                None,
            ));
        }
        subscriptions.insert(params.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        params: UnsubscribeRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        check_uri(&params.uri)?;
        self.session.subscriptions.lock().unwrap_or_else(|e| e.into_inner()).remove(&params.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        params: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let catalog = self.shared.catalog();
        let (prompts, next) = paged(catalog.prompts(), &params)?;
        let mut result =
            ListPromptsResult::with_all_items(prompts.iter().map(|p| convert::prompt(&p.prompt)).collect());
        result.next_cursor = next;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let cx = RequestCx::from_rmcp(&cx);
        let catalog = self.shared.catalog();
        let Some(entry) = catalog.prompt(&params.name) else {
            return Err(ErrorData::invalid_params(
                format!("Unknown prompt: {}", params.name),
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
        let bound_to = format!("prompts/get\0{}", params.name);
        let retry = (params.input_responses.as_ref(), params.request_state.as_deref());
        let op = PromptGet { name: &params.name, arguments: &arguments };
        let outcome = self.with_input(&cx, &plugin, op, &bound_to, retry).await;
        match outcome {
            Ok(Rounds::Done(Ok(result))) => Ok(convert::prompt_result(&result, cx.links_supported()).into()),
            Ok(Rounds::Done(Err(error))) => Err(plugin_error(error, |m| ErrorData::invalid_params(m, None))),
            Ok(Rounds::InputRequired(ir)) => Ok(ir.into()),
            Err(Failure::Protocol(error)) => Err(error),
            Err(Failure::Call(error)) => Err(call_error(&plugin, error)),
        }
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let cx = RequestCx::from_rmcp(&cx);
        let catalog = self.shared.catalog();
        let (plugin, reference) = match &params.r#ref {
            Reference::Prompt(p) => {
                (catalog.prompt(&p.name).map(|e| e.plugin.clone()), wit::Reference::Prompt(p.name.clone()))
            }
            Reference::Resource(r) => {
                check_uri(&r.uri)?;
                (catalog.template_owner(&r.uri).cloned(), wit::Reference::ResourceTemplate(r.uri.clone()))
            }
            _ => return Err(ErrorData::invalid_params("unsupported completion reference", None)),
        };
        let Some(plugin) = plugin else {
            return Err(ErrorData::invalid_params(
                "completion reference names no known prompt or resource template",
                None,
            ));
        };
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
        let client = input::plugin_capabilities(cx.client.as_ref());
        let request = wit::RequestContext { client, responses: Vec::new(), state: None };
        let Round::Done(result) = self
            .run(&cx, &plugin, &op, &request, &ClientRoots::NotOffered)
            .await
            .map_err(|e| call_error(&plugin, e))?;
        let suggestions = result.map_err(|e| plugin_error(e, |m| ErrorData::invalid_params(m, None)))?;
        let mut values = suggestions.values;
        values.truncate(CompletionInfo::MAX_VALUES);
        let mut info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        info.total = suggestions.total;
        info.has_more = Some(suggestions.has_more);
        Ok(CompleteResult::new(info))
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        params: rmcp::model::SetLevelRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.session.log_level.lock().unwrap_or_else(|e| e.into_inner()) = Some(params.level);
        Ok(())
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = requested.supported_by(&self.get_info().capabilities);
        // Honour only resources that exist, with the same bounds as `resources/subscribe`.
        if let Some(uris) = &mut accepted.resource_subscriptions {
            let catalog = self.shared.catalog();
            uris.retain(|uri| uri.len() <= MAX_URI_BYTES && catalog.resource_owner(uri).is_some());
            uris.sort();
            uris.dedup();
            uris.truncate(MAX_SUBSCRIPTIONS);
        }
        Some(accepted)
    }

    async fn listen(&self, cx: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.shared.sessions.subscribe();
        let subscribed = cx.accepted().resource_subscriptions.clone().unwrap_or_default();
        loop {
            tokio::select! {
                () = cx.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(Change::List(ListKind::Tools)) => { let _ = cx.sink().notify_tool_list_changed().await; }
                    Ok(Change::List(ListKind::Resources)) => { let _ = cx.sink().notify_resource_list_changed().await; }
                    Ok(Change::List(ListKind::Prompts)) => { let _ = cx.sink().notify_prompt_list_changed().await; }
                    // The stream is told the URI it subscribed to (the one updated, or the one
                    // it lies beneath).
                    Ok(Change::Resource(uri)) => {
                        if let Some(subscribed) = subscribed.iter().find(|s| session::covers(s, &uri)) {
                            let _ = cx.sink().notify_resource_updated(subscribed.clone()).await;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
}
