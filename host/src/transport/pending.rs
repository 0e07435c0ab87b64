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
}

impl Outbox for mpsc::Sender<Vec<u8>> {
    async fn post(&self, message: Vec<u8>) -> bool {
        self.send(message).await.is_ok()
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
    /// gone) comes first.
    pub async fn request(
        &self,
        request: &ServerRequest,
        out: &impl Outbox,
        closed: impl Future<Output = ()>,
    ) -> Result<ClientResult, LinkError> {
        let (message, mut asked) = self.ask(request)?;
        if !out.post(message).await {
            return Err(LinkError::Closed);
        }
        tokio::select! {
            answer = asked.answer() => answer,
            () = closed => Err(LinkError::Closed),
        }
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

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.pending.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}
