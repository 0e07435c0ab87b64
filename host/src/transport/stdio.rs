//! MCP over stdin/stdout: one JSON-RPC message per line. Nothing else may write to stdout.
//!
//! rmcp speaks the protocol; a line-level front in between answers malformed lines with the
//! proper JSON-RPC error (rmcp would answer a parse error as an invalid request, and drop a
//! message without `method` silently) and serves JSON-RPC batches on 2025-03-26 connections
//! by forwarding each element and answering with one array.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::jsonrpc;
use crate::mcp::{CapsuleServer, Shared};

/// Serve one client on stdin/stdout until it closes stdin.
pub async fn serve(shared: Arc<Shared>) -> anyhow::Result<()> {
    serve_on(shared, tokio::io::stdin(), tokio::io::stdout()).await
}

/// What the input side tells the output side.
enum Note {
    /// Write this message as it is.
    Send(Value),
    /// A batch: answer these request ids together, plus these errors found up front.
    Batch { ids: Vec<Value>, errors: Vec<Value> },
    /// Remember the id of an `initialize` request to learn the negotiated revision.
    Initialize(Value),
}

/// Serve one client on any byte streams (used with stdin/stdout, and by tests).
pub async fn serve_on(
    shared: Arc<Shared>,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> anyhow::Result<()> {
    let (server_side, front_side) = tokio::io::duplex(1 << 20);
    let (from_server, mut to_server) = tokio::io::split(front_side);
    let (notes_tx, notes_rx) = mpsc::unbounded_channel();
    let version = Arc::new(std::sync::Mutex::new(None::<String>));

    let writer = tokio::spawn(write_out(BufReader::new(from_server), notes_rx, output, version.clone()));
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(input).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim().is_empty() {
                continue;
            }
            let forward = match jsonrpc::read(line.as_bytes()) {
                Err(error) => {
                    let _ = notes_tx.send(Note::Send(error));
                    Vec::new()
                }
                Ok(jsonrpc::Incoming::Batch(items)) => {
                    let negotiated = version.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if negotiated.as_deref() != Some(jsonrpc::BATCH_VERSION) || items.is_empty() {
                        let _ = notes_tx.send(Note::Send(jsonrpc::batch_refused(negotiated.as_deref())));
                        continue;
                    }
                    let mut errors = Vec::new();
                    let mut ids = Vec::new();
                    let mut forward = Vec::new();
                    for item in items {
                        match jsonrpc::unbatchable(&item).or_else(|| jsonrpc::check(&item).err()) {
                            Some(error) => errors.push(error),
                            None => {
                                if jsonrpc::is_request(&item) {
                                    ids.push(item["id"].clone());
                                }
                                forward.push(item.to_string());
                            }
                        }
                    }
                    let _ = notes_tx.send(Note::Batch { ids, errors });
                    forward
                }
                Ok(jsonrpc::Incoming::Single(envelope)) => {
                    // rmcp would answer an undecodable message without its id; check here.
                    match jsonrpc::check_typed(line.as_bytes(), envelope.id.as_ref()) {
                        Err(error) => {
                            let _ = notes_tx.send(Note::Send(error));
                            Vec::new()
                        }
                        Ok(()) => {
                            if envelope.method == Some("initialize") {
                                let _ = notes_tx.send(Note::Initialize(envelope.id.unwrap_or(Value::Null)));
                            }
                            vec![line]
                        }
                    }
                }
            };
            for mut line in forward {
                line.push('\n');
                if to_server.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
        // End of input: closing our side ends the server.
        let _ = to_server.shutdown().await;
    });

    let running = CapsuleServer::new(shared).serve(tokio::io::split(server_side)).await?;
    let result = running.waiting().await;
    reader.abort();
    let _ = writer.await;
    result?;
    Ok(())
}

/// What the writer reads of a server message: enough to route it, nothing more.
#[derive(serde::Deserialize)]
struct Reply {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    result: Option<ReplyResult>,
}

#[derive(serde::Deserialize)]
struct ReplyResult {
    #[serde(rename = "protocolVersion", default)]
    protocol_version: Option<String>,
}

/// Copy the server's messages to `output`, holding batch responses until the whole batch is
/// answered.
async fn write_out(
    from_server: impl AsyncBufReadExt + Unpin,
    mut notes: mpsc::UnboundedReceiver<Note>,
    mut output: impl AsyncWrite + Unpin,
    version: Arc<std::sync::Mutex<Option<String>>>,
) {
    let mut lines = from_server.lines();
    let mut initialize_ids = HashSet::new();
    let mut batches: HashMap<u64, (HashSet<String>, Vec<Value>)> = HashMap::new();
    let mut batch_of: HashMap<String, u64> = HashMap::new();
    let mut next_batch = 0u64;
    let mut notes_open = true;
    loop {
        let outgoing = tokio::select! {
            // Notes first: a note about a request is always sent before the request reaches
            // the server, so it must be seen before the server's answer.
            biased;
            note = notes.recv(), if notes_open => match note {
                Some(Note::Send(message)) => Some(message.to_string()),
                Some(Note::Initialize(id)) => {
                    initialize_ids.insert(id.to_string());
                    None
                }
                Some(Note::Batch { ids, errors }) => {
                    if ids.is_empty() {
                        (!errors.is_empty()).then(|| Value::Array(errors).to_string())
                    } else {
                        next_batch += 1;
                        for id in &ids {
                            batch_of.insert(id.to_string(), next_batch);
                        }
                        batches.insert(next_batch, (ids.iter().map(Value::to_string).collect(), errors));
                        None
                    }
                }
                None => {
                    notes_open = false;
                    None
                }
            },
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    let Ok(reply) = serde_json::from_str::<Reply>(&line) else { continue };
                    let id = reply.id.filter(|_| reply.method.is_none()).map(|id| id.to_string());
                    if let Some(id) = &id
                        && initialize_ids.remove(id)
                        && let Some(v) = reply.result.and_then(|r| r.protocol_version)
                    {
                        *version.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
                    }
                    match id.as_ref().and_then(|id| batch_of.remove(id).map(|b| (id, b))) {
                        Some((id, b)) => {
                            let (waiting, answers) = batches.get_mut(&b).expect("every batch id maps to a live batch");
                            waiting.remove(id);
                            answers.push(serde_json::from_str(&line).unwrap_or(Value::Null));
                            if waiting.is_empty() {
                                batches.remove(&b).map(|(_, answers)| Value::Array(answers).to_string())
                            } else {
                                None
                            }
                        }
                        // Everything else goes out exactly as the server wrote it.
                        None => Some(line),
                    }
                }
                _ => return,
            },
        };
        if let Some(mut line) = outgoing {
            line.push('\n');
            if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
                return;
            }
        }
    }
}
