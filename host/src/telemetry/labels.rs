//! The label sets of Capsule's series, and the fixed sets some of their values come from.

use std::borrow::Cow;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;

/// The methods Capsule answers: any other is counted as `other`.
pub(super) const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
];

/// The protocol revisions Capsule speaks: any other is counted as `unsupported`.
pub(super) const VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"];

/// The name a request's method goes by in metrics and spans: one Capsule answers, or
/// `other` (a client's own method names would make series and span names without end).
pub fn method_name(method: &str) -> &'static str {
    bounded(method, METHODS, "other")
}

/// The name a protocol revision goes by in metrics and spans: one Capsule speaks, or
/// `unsupported`.
pub fn version_name(version: &str) -> &'static str {
    bounded(version, VERSIONS, "unsupported")
}

/// One of `set`, or `fallback`: a label value that cannot be chosen by a client.
pub(super) fn bounded(value: &str, set: &[&'static str], fallback: &'static str) -> &'static str {
    set.iter().find(|known| **known == value).copied().unwrap_or(fallback)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OperationLabels {
    pub(super) mcp_method_name: &'static str,
    pub(super) gen_ai_tool_name: Option<Arc<str>>,
    pub(super) error_type: Option<Cow<'static, str>>,
    pub(super) network_transport: &'static str,
    pub(super) mcp_protocol_version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SessionLabels {
    pub(super) network_transport: &'static str,
    pub(super) mcp_protocol_version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CallLabels {
    pub(super) tenant: String,
    pub(super) plugin: String,
    pub(super) tool: String,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PluginLabels {
    pub(super) tenant: String,
    pub(super) plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TenantLabels {
    pub(super) tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ToolLabels {
    pub(super) tenant: String,
    pub(super) plugin: String,
    pub(super) tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LoadLabels {
    pub(super) tenant: String,
    pub(super) plugin: String,
    pub(super) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TrafficLabels {
    pub(super) tenant: String,
    pub(super) network_transport: &'static str,
    /// `receive` or `transmit`, as the conventions' `network.io.direction` says.
    pub(super) network_io_direction: &'static str,
}
