//! MCP over stdin/stdout: one JSON-RPC message per line. Nothing else may write to stdout.

use std::sync::Arc;

use rmcp::ServiceExt;

use crate::mcp::{CapsuleServer, Shared};

/// Serve one client on stdin/stdout until it closes stdin.
pub async fn serve(shared: Arc<Shared>) -> anyhow::Result<()> {
    let running = CapsuleServer::new(shared).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
