//! rmcp's service in front of Capsule: its `ServerHandler` answers lists, subscriptions and
//! settings from the catalog and the session, and hands the requests that call plugins to
//! [`super::calls`] with a [`RequestCx`].

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use super::request::RequestCx;
use super::session::{self, Change};
use super::{CapsuleServer, MAX_URI_BYTES, check_uri, convert, paged};
use crate::runtime::ListKind;

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
        params: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.tools_call(params, &RequestCx::from_rmcp(&cx)).await
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
        self.resources_read(params, &RequestCx::from_rmcp(&cx)).await
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
        self.prompts_get(params, &RequestCx::from_rmcp(&cx)).await
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.completion_complete(params, &RequestCx::from_rmcp(&cx)).await
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
        // Honour only resources that exist, with the same bounds as `resources/subscribe`;
        // only the first 1,000 requested are looked at, so a huge filter costs no more.
        if let Some(uris) = &mut accepted.resource_subscriptions {
            uris.truncate(MAX_SUBSCRIPTIONS);
            let catalog = self.shared.catalog();
            uris.retain(|uri| uri.len() <= MAX_URI_BYTES && catalog.resource_owner(uri).is_some());
            uris.sort();
            uris.dedup();
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
