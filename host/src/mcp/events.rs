//! Forwarding what a running plugin call reports (logs, progress) to the client that made the
//! request, without letting a slow client or a chatty plugin block the call: events go through
//! a queue the call never waits on, bounded by the call's own budget (the sandbox takes at most
//! `event_limit` messages, their text charged against the call's output limit), so a call that
//! logs faster than its forwarder runs loses none of them. Changes are not forwarded one by one: a
//! call records which lists and resources it said changed, and they are announced once each
//! when it ends.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still part of every revision we serve.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    LoggingLevel, LoggingMessageNotification, LoggingMessageNotificationParam, ProgressNotification,
    ProgressNotificationParam, ProgressToken,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::reply::Known;
use super::request::ClientLink;
use crate::auth::Principal;
use crate::runtime::{CallEvents, Caller, ListKind, LogLevel};
use crate::telemetry::PLUGIN_LOG;

enum Event {
    /// `host`: whether the message also goes to the host's log (see [`HOST_LOG_BYTES`]).
    Log {
        level: LogLevel,
        logger: Option<String>,
        message: String,
        host: bool,
    },
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
}

/// The [`CallEvents`] of one request.
pub struct RequestEvents {
    principal: Option<Arc<Principal>>,
    plugin: String,
    /// To the forwarder; `None` when nothing would reach the client (no progress token, no
    /// log level), and logs go straight to the host's log.
    tx: Option<mpsc::UnboundedSender<Event>>,
    cancelled: CancellationToken,
    changed: Changes,
    /// The request's span, which the plugin's records in the host log belong to (the guest
    /// runs without it entered, perhaps on another thread).
    span: tracing::Span,
    /// Bytes of log messages this call may still put in the host log.
    host_log_left: AtomicUsize,
}

/// Bytes of log messages one call may put in the host's log, as much as its stderr: the
/// call's event budget is sized for what its client asked for (up to its output limit),
/// not for every operator's log at the default level.
const HOST_LOG_BYTES: usize = 64 << 10;

impl RequestEvents {
    fn new(
        principal: Option<Arc<Principal>>,
        plugin: String,
        tx: Option<mpsc::UnboundedSender<Event>>,
        cancelled: CancellationToken,
        changed: Changes,
    ) -> Self {
        let span = tracing::Span::current();
        RequestEvents {
            principal,
            plugin,
            tx,
            cancelled,
            changed,
            span,
            host_log_left: AtomicUsize::new(HOST_LOG_BYTES),
        }
    }

    /// Whether a message of `bytes` still goes to the host's log; the first one that does
    /// not says so, once.
    fn to_host_log(&self, bytes: usize) -> bool {
        let cost = bytes.saturating_add(64);
        let taken = self.host_log_left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            if left >= cost {
                Some(left - cost)
            } else if left > 0 {
                Some(0)
            } else {
                None
            }
        });
        match taken {
            Ok(left) if left >= cost => true,
            Ok(_) => {
                tracing::warn!(
                    parent: &self.span,
                    plugin = %self.plugin,
                    "plugin logged more than {} KiB in one call: its further messages are not written to the server log (a client that asked still gets them)",
                    HOST_LOG_BYTES >> 10
                );
                false
            }
            Err(_) => false,
        }
    }
}

const KINDS: [ListKind; 3] = [ListKind::Tools, ListKind::Resources, ListKind::Prompts];

fn bit(kind: ListKind) -> u8 {
    1 << KINDS.iter().position(|k| *k == kind).unwrap_or_default()
}

/// What a call said changed: its lists (one bit per [`ListKind`]) and resources. Kept apart
/// from the events so that holding it does not keep the forwarder waiting for more.
#[derive(Clone, Default)]
pub struct Changes(Arc<ChangesInner>);

#[derive(Default)]
struct ChangesInner {
    lists: AtomicU8,
    resources: Mutex<Vec<String>>,
}

impl Changes {
    /// The lists the call said changed, each once however often it said so.
    pub fn lists(&self) -> Vec<ListKind> {
        let changed = self.0.lists.load(Ordering::Relaxed);
        KINDS.into_iter().filter(|&kind| changed & bit(kind) != 0).collect()
    }

    /// The resources the call said changed, each once (the sandbox bounds them).
    pub fn take_resources(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.resources.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl CallEvents for RequestEvents {
    fn caller(&self) -> Option<Caller> {
        self.principal.as_ref().map(|p| Caller {
            subject: p.subject.clone(),
            client: p.client_id.clone(),
            scopes: p.scopes.iter().map(str::to_owned).collect(),
        })
    }

    fn log(&self, level: LogLevel, logger: Option<String>, message: String) {
        match &self.tx {
            Some(tx) => {
                let host = self.to_host_log(message.len());
                drop(tx.send(Event::Log { level, logger, message, host }));
            }
            None if self.to_host_log(message.len()) => {
                host_log(&self.span, &self.plugin, logging_level(level), logger.as_deref(), &message)
            }
            None => {}
        }
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Event::Progress { progress, total, message });
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }

    fn cancellation(&self) -> CancellationToken {
        self.cancelled.clone()
    }

    fn list_changed(&self, kind: ListKind) {
        self.changed.0.lists.fetch_or(bit(kind), Ordering::Relaxed);
    }

    fn resource_updated(&self, uri: String) {
        self.changed.0.resources.lock().unwrap_or_else(|e| e.into_inner()).push(uri);
    }
}

/// Where a request's events go.
pub struct Route {
    pub link: Arc<dyn ClientLink>,
    pub plugin: String,
    /// Who the request comes from, for plugins that ask.
    pub principal: Option<Arc<Principal>>,
    pub progress_token: Option<ProgressToken>,
    /// The lowest level the client asked for; `None` sends no log messages.
    pub log_level: Option<LoggingLevel>,
    /// What the client's revision knows: a progress report's `message` arrived in 2025-03-26.
    pub known: Known,
}

/// A plugin's log message in the host's log, at its own level (MCP's eight onto the log's
/// five), under its own target, [`PLUGIN_LOG`], so that an operator can set plugins' records
/// apart (`CAPSULE_LOG=info,capsule::plugin=warn`), inside the request's `span`. A call puts
/// at most [`HOST_LOG_BYTES`] there, and a record is one line whatever the message holds.
fn host_log(span: &tracing::Span, plugin: &str, level: LoggingLevel, logger: Option<&str>, message: &str) {
    let logger = logger.unwrap_or("");
    match level {
        LoggingLevel::Debug => tracing::debug!(target: PLUGIN_LOG, parent: span, %plugin, logger, "{message}"),
        LoggingLevel::Info | LoggingLevel::Notice => {
            tracing::info!(target: PLUGIN_LOG, parent: span, %plugin, logger, "{message}")
        }
        LoggingLevel::Warning => tracing::warn!(target: PLUGIN_LOG, parent: span, %plugin, logger, "{message}"),
        _ => tracing::error!(target: PLUGIN_LOG, parent: span, %plugin, logger, "{message}"),
    }
}

/// Make the events of one request and the future that forwards them, if anything can reach
/// the client (most requests ask for neither progress nor logs, and need no forwarder). The
/// future finishes once every `RequestEvents` clone is dropped, i.e. when the call's store is
/// gone, so awaiting it after the call puts every notification before the response.
pub fn channel(
    cancelled: CancellationToken,
    route: Route,
) -> (Arc<RequestEvents>, Changes, Option<impl Future<Output = ()> + use<>>) {
    let (principal, plugin) = (route.principal.clone(), route.plugin.clone());
    let changed = Changes::default();
    if route.progress_token.is_none() && route.log_level.is_none() {
        let events = RequestEvents::new(principal, plugin, None, cancelled, changed.clone());
        return (Arc::new(events), changed, None);
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = cancelled.clone();
    let events = RequestEvents::new(principal, plugin, Some(tx), cancelled, changed.clone());
    let span = events.span.clone();
    let forward = async move {
        while let Some(event) = rx.recv().await {
            // Nothing more goes out for a cancelled request (MUST on 2026-07-28 stdio): what
            // it queued before is dropped, not sent after the client stopped waiting.
            if stop.is_cancelled() {
                return;
            }
            match event {
                Event::Log { level, logger, message, host } => {
                    let level = logging_level(level);
                    if host {
                        host_log(&span, &route.plugin, level, logger.as_deref(), &message);
                    }
                    if route.log_level.is_some_and(|min| rank(level) >= rank(min)) {
                        let mut param = LoggingMessageNotificationParam::new(level, serde_json::Value::String(message));
                        param.logger = logger.or_else(|| Some(route.plugin.clone()));
                        let _ = route.link.notify(LoggingMessageNotification::new(param).into()).await;
                    }
                }
                Event::Progress { progress, total, message } => {
                    if let Some(token) = &route.progress_token {
                        let mut param = ProgressNotificationParam::new(token.clone(), progress);
                        param.total = total;
                        param.message = message.filter(|_| route.known >= Known::Audio);
                        let _ = route.link.notify(ProgressNotification::new(param).into()).await;
                    }
                }
            }
        }
    };
    (Arc::new(events), changed, Some(forward))
}

fn logging_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_puts_at_most_its_share_of_messages_in_the_host_log() {
        let events = RequestEvents::new(None, "p".into(), None, CancellationToken::new(), Changes::default());
        assert!(events.to_host_log(40 << 10));
        assert!(events.to_host_log(20 << 10));
        assert!(!events.to_host_log(8 << 10), "past 64 KiB");
        assert!(!events.to_host_log(1), "nothing more, however small, once the share is spent");
    }
}
