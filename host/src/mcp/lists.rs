//! The requests answered from the catalog and the session alone: what the server offers,
//! its lists, resource subscriptions, the legacy log level, and `subscriptions/listen`
//! streams of changes.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{
    CacheScope, DiscoverResult, Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    PromptListChangedNotification, ProtocolVersion, ResourceListChangedNotification, ResourceUpdatedNotification,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, ServerNotification, ServerResult,
    SubscriptionFilter, ToolListChangedNotification,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::request::RequestCx;
use super::session::{self, Change, List};
use super::{CapsuleServer, MAX_URI_BYTES, authorize, check_uri, convert, paged};
use crate::auth::scope::Kind;
use crate::catalog::Catalog;
use crate::runtime::{ListKind, Plugin};

/// Resources one session (or one `subscriptions/listen` stream) may subscribe to at once.
const MAX_SUBSCRIPTIONS: usize = 1_000;

/// The bytes of the URIs one session (or stream) may subscribe to: each URI may be 16 KiB,
/// but a thousand of those would make an idle session cost 16 MiB.
const MAX_SUBSCRIPTION_BYTES: usize = 256 << 10;

/// Every revision served, oldest first.
pub const VERSIONS: &[ProtocolVersion] = ProtocolVersion::KNOWN_VERSIONS;

/// The revisions served whose requests describe themselves (no `initialize`).
pub fn self_described() -> Vec<ProtocolVersion> {
    VERSIONS.iter().filter(|v| !v.has_initialize()).cloned().collect()
}

/// What the server offers, as `initialize` and `server/discover` describe it.
pub fn server_config() -> ServerConfig {
    let mut capabilities = ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_resources()
        .enable_resources_list_changed()
        .enable_resources_subscribe()
        .enable_prompts()
        .enable_prompts_list_changed()
        .enable_completions()
        .build();
    #[allow(deprecated)] // Logging is deprecated by SEP-2577, still served to legacy clients.
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

/// The revision to use with a client that asked for `requested` in `initialize`: its own
/// if served and it has a handshake, else the newest one that has.
pub fn negotiate(requested: &ProtocolVersion) -> ProtocolVersion {
    if requested.has_initialize() && VERSIONS.contains(requested) {
        requested.clone()
    } else {
        ProtocolVersion::LATEST_WITH_INITIALIZE
    }
}

/// `initialize`'s answer.
pub fn initialize_result(params: &InitializeRequestParams) -> InitializeResult {
    let mut info = server_config();
    info.protocol_version = negotiate(&params.protocol_version);
    // What the negotiated revision's schema has: completions arrived in 2025-03-26, the
    // server's title in 2025-06-18, its description, website and icons in 2025-11-25.
    let at_least = |version: ProtocolVersion| info.protocol_version.as_str() >= version.as_str();
    if !at_least(ProtocolVersion::V_2025_03_26) {
        info.capabilities.completions = None;
    }
    if !at_least(ProtocolVersion::V_2025_06_18) {
        info.server_info.title = None;
    }
    if !at_least(ProtocolVersion::V_2025_11_25) {
        info.server_info.description = None;
        info.server_info.website_url = None;
        info.server_info.icons = None;
    }
    info
}

/// The key under which a 2026-07-28 result names the server (SEP-2575's SHOULD).
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// The server's `Implementation` as the value of [`SERVER_INFO_KEY`], built once for every
/// 2026-07-28 result to carry.
pub fn server_info() -> &'static serde_json::Value {
    static INFO: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    // Its name and version only: `server/discover` and `initialize` describe it in full.
    INFO.get_or_init(|| serde_json::json!({"name": "capsule", "version": env!("CARGO_PKG_VERSION")}))
}

/// Name the server in a 2026-07-28 result's `_meta` (kept when the result set its own).
pub fn sign(result: &mut ServerResult) {
    let meta = match result {
        ServerResult::CompleteResult(r) => &mut r.meta,
        ServerResult::GetPromptResult(r) => &mut r.meta,
        ServerResult::ListPromptsResult(r) => &mut r.meta,
        ServerResult::ListResourcesResult(r) => &mut r.meta,
        ServerResult::ListResourceTemplatesResult(r) => &mut r.meta,
        ServerResult::ReadResourceResult(r) => &mut r.meta,
        ServerResult::ListToolsResult(r) => &mut r.meta,
        ServerResult::CallToolResult(r) => &mut r.meta,
        ServerResult::InputRequiredResult(r) => &mut r.meta,
        // discover and listen results name it themselves; no other reaches a 2026-07-28 client.
        _ => return,
    };
    meta.get_or_insert_default().entry(SERVER_INFO_KEY).or_insert_with(|| server_info().clone());
}

/// `server/discover`'s answer.
pub fn discover_result() -> DiscoverResult {
    DiscoverResult::from_server_info(VERSIONS.to_vec(), server_config())
}

/// The items of a list the request's principal may use: all of them without authentication.
fn visible<'a, T>(
    items: &'a [Arc<T>],
    cx: &RequestCx,
    names: impl Fn(&T) -> (&Arc<Plugin>, Kind, &str),
) -> Cow<'a, [Arc<T>]> {
    if cx.principal.is_none() {
        return Cow::Borrowed(items);
    }
    let may = |item: &&Arc<T>| {
        let (plugin, kind, name) = names(item);
        cx.may(plugin.name(), kind, name)
    };
    Cow::Owned(items.iter().filter(may).cloned().collect())
}

/// A list that depends on who asks (the tenant filters it by the token's scopes) must not be
/// shared between callers' caches (SEP-2549); others say nothing.
fn cache_scope(cx: &RequestCx) -> Option<CacheScope> {
    (cx.principal.is_some() && cx.is_modern()).then_some(CacheScope::Private)
}

impl CapsuleServer {
    /// Remember that the session lists `list` from `catalog` when this is its first page (a
    /// later page continues a listing that began there or earlier).
    fn noted(&self, list: List, catalog: &Arc<Catalog>, params: &Option<PaginatedRequestParams>) {
        if params.as_ref().is_none_or(|p| p.cursor.is_none()) {
            self.session.listed(list, catalog);
        }
    }

    pub(super) fn list_tools(
        &self,
        params: &Option<PaginatedRequestParams>,
        cx: &RequestCx,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.shared.catalog();
        self.noted(List::Tools, &catalog, params);
        let tools = visible(catalog.tools(), cx, |e| (&e.plugin, Kind::Tools, &e.tool.name));
        let (tools, next) = paged(&tools, params)?;
        let mut result =
            ListToolsResult::with_all_items(tools.iter().map(|entry| convert::tool(entry, cx.known())).collect());
        result.next_cursor = next;
        result.cache_scope = cache_scope(cx);
        Ok(result)
    }

    pub(super) fn list_resources(
        &self,
        params: &Option<PaginatedRequestParams>,
        cx: &RequestCx,
    ) -> Result<ListResourcesResult, ErrorData> {
        let catalog = self.shared.catalog();
        self.noted(List::Resources, &catalog, params);
        let resources = visible(catalog.resources(), cx, |e| (&e.plugin, Kind::Resources, &e.resource.uri));
        let (resources, next) = paged(&resources, params)?;
        let mut result = ListResourcesResult::with_all_items(
            resources.iter().map(|r| convert::resource(&r.resource, cx.known())).collect(),
        );
        result.next_cursor = next;
        result.cache_scope = cache_scope(cx);
        Ok(result)
    }

    pub(super) fn list_resource_templates(
        &self,
        params: &Option<PaginatedRequestParams>,
        cx: &RequestCx,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let catalog = self.shared.catalog();
        self.noted(List::Templates, &catalog, params);
        let templates = visible(catalog.templates(), cx, |e| (&e.plugin, Kind::Resources, &e.template.uri_template));
        let (templates, next) = paged(&templates, params)?;
        let mut result = ListResourceTemplatesResult::with_all_items(
            templates.iter().map(|t| convert::template(&t.template, cx.known())).collect(),
        );
        result.next_cursor = next;
        result.cache_scope = cache_scope(cx);
        Ok(result)
    }

    pub(super) fn list_prompts(
        &self,
        params: &Option<PaginatedRequestParams>,
        cx: &RequestCx,
    ) -> Result<ListPromptsResult, ErrorData> {
        let catalog = self.shared.catalog();
        self.noted(List::Prompts, &catalog, params);
        let prompts = visible(catalog.prompts(), cx, |e| (&e.plugin, Kind::Prompts, &e.prompt.name));
        let (prompts, next) = paged(&prompts, params)?;
        let mut result =
            ListPromptsResult::with_all_items(prompts.iter().map(|p| convert::prompt(&p.prompt, cx.known())).collect());
        result.next_cursor = next;
        result.cache_scope = cache_scope(cx);
        Ok(result)
    }

    /// `resources/subscribe`: a resource some plugin serves, up to [`MAX_SUBSCRIPTIONS`].
    pub(super) fn subscribe(&self, uri: String, cx: &RequestCx) -> Result<(), ErrorData> {
        check_uri(&uri)?;
        let Some(owner) = self.shared.catalog().resource_owner(&uri).cloned() else {
            return Err(ErrorData::resource_not_found(
                format!("Resource not found: {}", super::excerpt(&uri)),
                Some(json!({"uri": uri})),
            ));
        };
        // Updates to a resource are for those who may read it.
        authorize(cx, &owner, Kind::Resources, &uri)?;
        let mut subscriptions = self.session.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
        if subscriptions.contains(&uri) {
            return Ok(());
        }
        if subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(ErrorData::invalid_params(
                format!("this session already has the limit of {MAX_SUBSCRIPTIONS} resource subscriptions"),
                None,
            ));
        }
        let bytes: usize = subscriptions.iter().map(String::len).sum();
        if bytes + uri.len() > MAX_SUBSCRIPTION_BYTES {
            return Err(ErrorData::invalid_params(
                format!(
                    "this session's subscriptions would name more than {} KiB of URIs, its limit; unsubscribe from some first",
                    MAX_SUBSCRIPTION_BYTES >> 10
                ),
                None,
            ));
        }
        subscriptions.insert(uri);
        Ok(())
    }

    pub(super) fn unsubscribe(&self, uri: &str) -> Result<(), ErrorData> {
        check_uri(uri)?;
        self.session.subscriptions.lock().unwrap_or_else(|e| e.into_inner()).remove(uri);
        Ok(())
    }

    /// The part of a `subscriptions/listen` filter the server honours: what it advertises,
    /// and of the resources only the first 1,000 named that exist (so a huge filter costs no
    /// more), with the bounds of `resources/subscribe` (those past its bytes are left out).
    pub(super) fn accepted_filter(&self, requested: &SubscriptionFilter, cx: &RequestCx) -> SubscriptionFilter {
        let mut accepted = requested.supported_by(&server_config().capabilities);
        if let Some(uris) = &mut accepted.resource_subscriptions {
            uris.truncate(MAX_SUBSCRIPTIONS);
            let catalog = self.shared.catalog();
            // Only resources the principal may read are honoured.
            uris.retain(|uri| {
                uri.len() <= MAX_URI_BYTES
                    && catalog.resource_owner(uri).is_some_and(|owner| cx.may(owner.name(), Kind::Resources, uri))
            });
            uris.sort();
            uris.dedup();
            let mut bytes = 0;
            uris.retain(|uri| {
                bytes += uri.len();
                bytes <= MAX_SUBSCRIPTION_BYTES
            });
        }
        accepted
    }

    /// Pass the changes `accepted` asks for to `send` until `cancelled` fires or the server
    /// stops announcing changes. A resource update names the URI that was subscribed to (the
    /// one updated, or the one it lies beneath).
    pub(super) async fn forward_changes<F: Future>(
        &self,
        accepted: &SubscriptionFilter,
        cancelled: &CancellationToken,
        mut send: impl FnMut(ServerNotification) -> F,
    ) {
        let mut changes = self.shared.sessions.subscribe();
        let subscribed = accepted.resource_subscriptions.as_deref().unwrap_or_default();
        let wants = |flag: Option<bool>| flag == Some(true);
        loop {
            let change = tokio::select! {
                () = cancelled.cancelled() => return,
                change = changes.recv() => change,
            };
            let notification: ServerNotification = match change {
                Ok(Change::List(ListKind::Tools)) if wants(accepted.tools_list_changed) => {
                    ToolListChangedNotification::default().into()
                }
                Ok(Change::List(ListKind::Resources)) if wants(accepted.resources_list_changed) => {
                    ResourceListChangedNotification::default().into()
                }
                Ok(Change::List(ListKind::Prompts)) if wants(accepted.prompts_list_changed) => {
                    PromptListChangedNotification::default().into()
                }
                Ok(Change::Resource(uri)) => match subscribed.iter().find(|s| session::covers(s, &uri)) {
                    Some(subscribed) => {
                        ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(subscribed.clone()))
                            .into()
                    }
                    None => continue,
                },
                Ok(Change::List(_)) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            send(notification).await;
        }
    }
}
