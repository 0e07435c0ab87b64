//! rmcp's service in front of Capsule (the HTTP transport, until it has its own wire): its
//! `ServerHandler` hands every request to the same functions Capsule's own dispatcher uses.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::calls::CallParams;
use super::request::RequestCx;
use super::{CapsuleServer, convert, lists};

impl ServerHandler for CapsuleServer {
    fn get_info(&self) -> ServerConfig {
        lists::server_config()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(lists::VERSIONS)
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
        CapsuleServer::list_tools(self, &params)
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = params.arguments.map(|a| serde_json::value::to_raw_value(&a)).transpose();
        let arguments = arguments.map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let call = CallParams {
            meta: params.meta,
            name: params.name,
            arguments: arguments.as_deref(),
            input_responses: params.input_responses,
            request_state: params.request_state,
        };
        self.tools_call(call, &RequestCx::from_rmcp(&cx)).await
    }

    async fn list_resources(
        &self,
        params: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        CapsuleServer::list_resources(self, &params)
    }

    async fn list_resource_templates(
        &self,
        params: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        CapsuleServer::list_resource_templates(self, &params)
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
        CapsuleServer::subscribe(self, params.uri)
    }

    async fn unsubscribe(
        &self,
        params: UnsubscribeRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        CapsuleServer::unsubscribe(self, &params.uri)
    }

    async fn list_prompts(
        &self,
        params: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        CapsuleServer::list_prompts(self, &params)
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
        Some(self.accepted_filter(requested))
    }

    async fn listen(&self, cx: SubscriptionContext) -> Result<(), ErrorData> {
        let cancelled = cx.request_context().ct.clone();
        self.forward_changes(cx.accepted(), &cancelled, |n| async {
            let _ = cx.sink().send(n).await;
        })
        .await;
        Ok(())
    }
}
