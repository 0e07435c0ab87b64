//! Requests the server sent a client and the answers it awaits, matched by id. Used by
//! every transport that may ask a legacy client something (roots, elicitation, sampling).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use rmcp::ErrorData;
use rmcp::model::{ClientResult, RequestId, ServerRequest};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::jsonrpc;
use crate::mcp::LinkError;

type Waiter = oneshot::Sender<Result<ClientResult, LinkError>>;

/// Where a transport queues messages for its client.
pub trait Outbox: Sync {
    /// Queue `message`, once there is room; `false` if the client is gone.
    fn post(&self, message: Vec<u8>) -> impl Future<Output = bool> + Send;

    /// Queue `message` if there is room now; dropped otherwise. For what is worth sending
    /// but not worth waiting for.
    fn offer(&self, message: Vec<u8>);
}

impl Outbox for mpsc::Sender<Vec<u8>> {
    async fn post(&self, message: Vec<u8>) -> bool {
        self.send(message).await.is_ok()
    }

    fn offer(&self, message: Vec<u8>) {
        let _ = self.try_send(message);
    }
}

/// Server-to-client requests awaiting their answers.
#[derive(Default)]
pub struct Pending {
    waiting: Mutex<HashMap<i64, Waiter>>,
    next_id: AtomicI64,
}

impl Pending {
    /// Number a request, returning its message and the receiver of its answer. The answer
    /// is forgotten when the returned [`Asked`] drops.
    fn ask(&self, request: &ServerRequest) -> Result<(Vec<u8>, Asked<'_>), LinkError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message =
            jsonrpc::outgoing(Some(&RequestId::Number(id)), request).map_err(|e| LinkError::Failed(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        Ok((message, Asked { pending: self, id, answer: rx }))
    }

    /// Send a request through `out` and wait for its answer, unless `closed` (the client is
    /// gone) comes first. Given up before it is answered (the caller timed out, or its call
    /// ended), the request is cancelled with the client, as the spec's timeouts ask.
    pub async fn request<O: Outbox>(
        &self,
        request: &ServerRequest,
        out: &O,
        closed: impl Future<Output = ()>,
    ) -> Result<ClientResult, LinkError> {
        let (message, mut asked) = self.ask(request)?;
        if !out.post(message).await {
            return Err(LinkError::Closed);
        }
        // Dropped before `asked`, so it still sees whether the request is waiting.
        let mut abandoned = Abandoned { pending: self, id: asked.id, out: Some(out) };
        let answer = tokio::select! {
            answer = asked.answer() => answer,
            () = closed => Err(LinkError::Closed),
        };
        abandoned.out = None;
        answer
    }

    /// Hand the client's answer to the request that awaits it.
    pub fn answer(&self, id: &RequestId, outcome: Result<&RawValue, &RawValue>) {
        let waiting = match id {
            RequestId::Number(n) => self.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(n),
            RequestId::String(_) => None,
        };
        let Some(waiting) = waiting else {
            tracing::debug!(%id, "the client answered a request that is not waiting");
            return;
        };
        let answer = match outcome {
            Ok(result) => serde_json::from_str::<ClientResult>(result.get())
                .map_err(|e| LinkError::Failed(format!("the client's answer is not understood: {e}"))),
            Err(error) => Err(LinkError::Failed(match serde_json::from_str::<ErrorData>(error.get()) {
                Ok(error) => format!("the client answered with error {}: {}", error.code.0, error.message),
                Err(_) => format!("the client answered with an error: {}", error.get()),
            })),
        };
        let _ = waiting.send(answer);
    }

    /// The client is gone: every waiting request fails.
    pub fn fail_all(&self) {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// A request sent and not yet answered.
struct Asked<'a> {
    pending: &'a Pending,
    id: i64,
    answer: oneshot::Receiver<Result<ClientResult, LinkError>>,
}

impl Asked<'_> {
    /// Wait for the answer.
    async fn answer(&mut self) -> Result<ClientResult, LinkError> {
        (&mut self.answer).await.unwrap_or(Err(LinkError::Closed))
    }
}

/// A request the server may stop waiting for: cancelled with the client if it does.
struct Abandoned<'a, O: Outbox> {
    pending: &'a Pending,
    id: i64,
    /// `None` once the wait ended (answered, or the client is gone).
    out: Option<&'a O>,
}

impl<O: Outbox> Drop for Abandoned<'_, O> {
    fn drop(&mut self) {
        let Some(out) = self.out else { return };
        if !self.pending.waiting.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&self.id) {
            return;
        }
        let cancelled = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.id, "reason": "the server stopped waiting for the answer"},
        });
        out.offer(cancelled.to_string().into_bytes());
    }
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.pending.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

#[cfg(test)]
#[allow(deprecated)] // Roots are deprecated by SEP-2577, still asked of clients that declare them.
mod tests {
    use std::time::Duration;

    use rmcp::model::ListRootsRequest;

    use super::*;

    fn sent(rx: &mut mpsc::Receiver<Vec<u8>>) -> Option<serde_json::Value> {
        rx.try_recv().ok().map(|m| serde_json::from_slice(&m).unwrap())
    }

    /// A request the server stops waiting for is cancelled with the client; one answered,
    /// or one whose client is gone, is not.
    #[tokio::test]
    async fn a_request_given_up_is_cancelled_with_the_client_and_only_then() {
        let pending = Pending::default();
        let (tx, mut rx) = mpsc::channel(8);
        let roots = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        let waited =
            tokio::time::timeout(Duration::from_millis(20), pending.request(&roots, &tx, std::future::pending()));
        assert!(waited.await.is_err());
        let asked = sent(&mut rx).expect("the request");
        let cancelled = sent(&mut rx).expect("its cancellation");
        assert_eq!(cancelled["method"], "notifications/cancelled");
        assert_eq!(cancelled["params"]["requestId"], asked["id"]);

        let answered = pending.request(&roots, &tx, std::future::pending());
        let answer = async {
            tokio::task::yield_now().await;
            let id = RequestId::Number(sent(&mut rx).expect("the request")["id"].as_i64().unwrap());
            pending.answer(&id, Ok(&RawValue::from_string(r#"{"roots":[]}"#.into()).unwrap()));
        };
        let (outcome, ()) = tokio::join!(answered, answer);
        assert!(outcome.is_ok());
        let gone = pending.request(&roots, &tx, std::future::ready(()));
        assert!(matches!(gone.await, Err(LinkError::Closed)));
        assert!(sent(&mut rx).is_some_and(|m| m["method"] == "roots/list"));
        assert_eq!(sent(&mut rx), None, "nothing more after an answer or a closed client");
    }
}
