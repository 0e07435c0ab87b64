//! The seam between transports and the MCP layer: what every request carries from the front
//! door to the catalog, and the one way the MCP layer talks back to the client that sent it.
//!
//! A transport fills in a [`RequestCx`] per request and hands over a [`ClientLink`]; nothing
//! below this module knows which transport, framing or session machinery is in front of it.
//! The transport, the session, tenants, principals and metrics join here as fields when
//! something below needs them, not as new paths.

#![allow(deprecated)] // Logging levels are deprecated by SEP-2577 but served to legacy clients.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use rmcp::model::{
    ClientCapabilities, ClientResult, LoggingLevel, ProgressToken, ProtocolVersion, RequestId, ServerNotification,
    ServerRequest,
};
use tokio_util::sync::CancellationToken;

use super::reply::Known;
use crate::auth::Principal;
use crate::auth::scope::Kind;

/// A boxed future, as a [`ClientLink`] returns.
pub type LinkFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LinkError>> + Send + 'a>>;

/// Why a message to the client did not get through.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The connection or session is gone.
    #[error("the client is no longer connected")]
    Closed,
    /// The client answered a request with an error, or the exchange failed.
    #[error("{0}")]
    Failed(String),
}

/// How the MCP layer reaches a client: notifications, and requests it must answer
/// (elicitation, sampling, roots). Implemented by each transport.
pub trait ClientLink: Send + Sync + 'static {
    /// Send a notification.
    fn notify(&self, notification: ServerNotification) -> LinkFuture<'_, ()>;
    /// Send a request and wait for the client's answer.
    fn request(&self, request: ServerRequest) -> LinkFuture<'_, ClientResult>;
    /// Whether the client is gone for good (nothing sent will arrive).
    fn is_closed(&self) -> bool;
    /// Finishes when the client is gone for good.
    fn closed(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// The current request is about to wait for an answer of the client's that another
    /// request asked for (the session's roots): a transport that reads the client's input
    /// only while requests have room frees the room this one holds, as [`Self::request`]
    /// does. `Err` if it may not wait (too many requests wait on the client already).
    fn wait_on_client(&self) -> Result<(), LinkError> {
        Ok(())
    }
}

/// The transport a request came over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// stdin/stdout of a process the client started.
    Stdio,
    /// Streamable HTTP.
    Http,
}

impl Transport {
    /// The name the OpenTelemetry conventions give it (`network.transport`).
    pub fn network(self) -> &'static str {
        match self {
            Transport::Stdio => "pipe",
            Transport::Http => "tcp",
        }
    }
}

/// Where a request comes from. Tenants and principals join this as fields, so everything
/// from the dispatcher down learns them the same way.
#[derive(Clone, Debug)]
pub struct Origin {
    /// The transport it came over.
    pub transport: Transport,
    /// The HTTP session it belongs to (`Mcp-Session-Id`); none over stdio, where the
    /// connection is the session, and none for 2026-07-28 requests, which have no session.
    pub session: Option<Arc<str>>,
    /// Who sent it, when the transport authenticated the sender; `None` is an anonymous
    /// caller (stdio, or HTTP to a tenant without `[auth]`), and all of those are one caller
    /// to per-caller quotas.
    pub principal: Option<Arc<Principal>>,
    /// The W3C trace context the transport carried (HTTP's `traceparent` and `tracestate`
    /// headers); `params._meta` may carry its own, which wins.
    pub trace: Option<Arc<TraceContext>>,
}

/// W3C trace context, as the client sent it.
#[derive(Debug)]
pub struct TraceContext {
    pub traceparent: Box<str>,
    pub tracestate: Option<Box<str>>,
}

impl TraceContext {
    /// The context in HTTP headers, if there is one.
    pub fn from_headers(headers: &http::HeaderMap) -> Option<Arc<TraceContext>> {
        // Two `traceparent`s name no one parent: the request starts a trace of its own (W3C
        // Trace Context, as its test suite checks). `tracestate` is a list header: its
        // fields are one list.
        let mut parents = headers.get_all("traceparent").iter();
        let traceparent = parents.next().filter(|_| parents.next().is_none())?.to_str().ok()?;
        let states: Option<Vec<&str>> = headers.get_all("tracestate").iter().map(|v| v.to_str().ok()).collect();
        let tracestate = states.filter(|s| !s.is_empty()).map(|s| Box::<str>::from(s.join(",")));
        Some(Arc::new(TraceContext { traceparent: traceparent.into(), tracestate }))
    }
}

impl Origin {
    /// A request over stdio.
    pub fn stdio() -> Origin {
        Origin { transport: Transport::Stdio, session: None, principal: None, trace: None }
    }

    /// A request over HTTP, in `session` if it has one, from `principal` if the tenant
    /// authenticates its callers, with the trace context of its headers.
    pub fn http(
        session: Option<Arc<str>>,
        principal: Option<Arc<Principal>>,
        trace: Option<Arc<TraceContext>>,
    ) -> Origin {
        Origin { transport: Transport::Http, session, principal, trace }
    }
}

/// What a transport hands the MCP layer with each request it reads.
pub struct Front {
    /// Where the request comes from.
    pub origin: Origin,
    /// The request's JSON-RPC id.
    pub id: RequestId,
    /// The way back to the client.
    pub link: Arc<dyn ClientLink>,
    /// Fires when the client cancels the request or goes away.
    pub cancelled: CancellationToken,
    /// The revision the transport says the request is of (HTTP's `MCP-Protocol-Version`
    /// header); a request's own `_meta` must agree with it.
    pub declared: Option<Box<str>>,
    /// A 2026-07-28 HTTP tool call's `Mcp-Name` and `Mcp-Param-*` headers
    /// ([`mirror::kept`](super::mirror::kept)), for the dispatcher to check against its params
    /// and its tool's schema; `None` where there is nothing to check.
    pub mirrored: Option<http::HeaderMap>,
    /// Whether the request came before the connection's `initialize` was answered (stdio,
    /// where lines are taken in order but served on tasks of their own): a legacy request
    /// that did is refused, whenever it is served.
    pub before_initialize: bool,
}

/// What the metrics learn about a request while it is served: set once each, and only from
/// what Capsule itself knows (a revision it speaks, a tool in its catalog).
#[derive(Default)]
pub struct Note {
    /// The revision in force.
    pub version: OnceLock<ProtocolVersion>,
    /// The tool called, once the catalog has it.
    pub tool: OnceLock<Arc<str>>,
}

/// What one request carries through the MCP layer.
pub struct RequestCx {
    /// The revision in force: negotiated by the session, or named by a 2026-07-28 request.
    pub version: Option<ProtocolVersion>,
    /// What the client declared it supports.
    pub client: Option<ClientCapabilities>,
    /// The request's progress token, if it wants progress.
    pub progress_token: Option<ProgressToken>,
    /// The log level a 2026-07-28 request asked for in its `_meta`.
    pub log_level: Option<LoggingLevel>,
    /// Fires when the client cancels the request or goes away.
    pub cancelled: CancellationToken,
    /// The way back to the client.
    pub link: Arc<dyn ClientLink>,
    /// Who sent it ([`Origin::principal`]).
    pub principal: Option<Arc<Principal>>,
    /// What the metrics record of it.
    pub note: Arc<Note>,
}

impl RequestCx {
    /// Whether the principal's token covers `plugin`'s item (always, without authentication).
    pub fn may(&self, plugin: &str, kind: Kind, name: &str) -> bool {
        self.principal.as_ref().is_none_or(|p| p.scopes.allows(plugin, kind, name))
    }

    /// The caller, as per-caller quotas count it: anonymous callers are one.
    pub fn caller(&self) -> &str {
        self.principal.as_ref().map_or("", |p| &*p.id)
    }

    /// A 2026-07-28 (stateless) request.
    pub fn is_modern(&self) -> bool {
        self.at_least(&ProtocolVersion::V_2026_07_28)
    }

    /// The content blocks the client's revision knows.
    pub fn known(&self) -> Known {
        if self.at_least(&ProtocolVersion::V_2025_06_18) {
            Known::Links
        } else if self.at_least(&ProtocolVersion::V_2025_03_26) {
            Known::Audio
        } else {
            Known::Original
        }
    }

    /// Whether the client's revision has elicitation (2025-06-18 on): a capability an older
    /// client declares names nothing its revision defines, and it gets no such request.
    pub fn has_elicitation(&self) -> bool {
        self.at_least(&ProtocolVersion::V_2025_06_18)
    }

    /// The elicitation forms the client's revision defines.
    pub fn forms(&self) -> super::input::Forms {
        match self.at_least(&ProtocolVersion::V_2025_11_25) {
            true => super::input::Forms::Enums,
            false => super::input::Forms::First,
        }
    }

    fn at_least(&self, version: &ProtocolVersion) -> bool {
        self.version.as_ref().is_some_and(|v| v.as_str() >= version.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for &(name, value) in pairs {
            map.append(name, http::HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn trace_headers_follow_the_w3c_rules_for_repeats() {
        let one = TraceContext::from_headers(&headers(&[("traceparent", PARENT), ("tracestate", "a=1")])).unwrap();
        assert_eq!((&*one.traceparent, one.tracestate.as_deref()), (PARENT, Some("a=1")));
        // Two parents: none is followed.
        let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert!(TraceContext::from_headers(&headers(&[("traceparent", PARENT), ("traceparent", other)])).is_none());
        // Two tracestate fields are one list.
        let two = headers(&[("traceparent", PARENT), ("tracestate", "a=1"), ("tracestate", "b=2")]);
        assert_eq!(TraceContext::from_headers(&two).unwrap().tracestate.as_deref(), Some("a=1,b=2"));
        assert!(TraceContext::from_headers(&headers(&[("tracestate", "a=1")])).is_none());
    }
}
