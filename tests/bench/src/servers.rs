//! The servers under test, each in a child process so that every server is measured the same
//! way: Capsule is the `capsule` binary itself; the baselines are served by this binary: a
//! native MCP server on the same rmcp with the same `add` tool (what other WASM hosts
//! inherit), and the floor: a bare axum handler that parses a JSON-RPC body and answers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The `capsule` binary built beside this one. Capsule is measured as it ships, with the
/// global allocator its `main` chooses, rather than as a library linked into this harness;
/// the baselines keep the system allocator a server gets by default.
pub fn capsule_exe() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?.with_file_name("capsule");
    anyhow::ensure!(
        exe.is_file(),
        "{} is missing: build it with `cargo build --release --workspace` before the benchmark",
        exe.display()
    );
    Ok(exe)
}

#[derive(Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The first addend.
    a: f64,
    /// The second addend.
    b: f64,
}

/// The native server: one `add` tool, written with rmcp's macros.
#[derive(Clone)]
struct Native {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Native {
    #[tool(description = "Add two numbers")]
    async fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Native {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("native-rmcp", env!("CARGO_PKG_VERSION")))
    }
}

fn native() -> Native {
    Native { tool_router: Native::tool_router() }
}

async fn listen(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    // The harness reads the address from the first line on stderr.
    eprintln!("listening on {}", listener.local_addr()?);
    Ok(listener)
}

fn nodelay(listener: TcpListener) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    })
}

/// Serve the native rmcp server over Streamable HTTP, configured like Capsule.
pub async fn native_http(addr: SocketAddr) -> anyhow::Result<()> {
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(true).with_json_response(true);
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(|| Ok(native()), sessions, config);
    let app = Router::new().route_service("/mcp", service);
    axum::serve(nodelay(listen(addr).await?), app).await?;
    Ok(())
}

/// Serve the native rmcp server over stdio.
pub async fn native_stdio() -> anyhow::Result<()> {
    native().serve(rmcp::transport::stdio()).await?.waiting().await?;
    Ok(())
}

/// The floor: parse the JSON-RPC body, add the arguments, answer. No MCP stack at all.
pub async fn floor_http(addr: SocketAddr) -> anyhow::Result<()> {
    async fn handle(body: Bytes) -> axum::response::Response {
        use axum::response::IntoResponse;
        let request: Value = match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(_) => return (axum::http::StatusCode::BAD_REQUEST, "bad json").into_response(),
        };
        let args = &request["params"]["arguments"];
        let sum = args["a"].as_f64().unwrap_or_default() + args["b"].as_f64().unwrap_or_default();
        let response = json!({"jsonrpc": "2.0", "id": request["id"],
            "result": {"content": [{"type": "text", "text": sum.to_string()}], "isError": false}});
        ([(axum::http::header::CONTENT_TYPE, "application/json")], response.to_string()).into_response()
    }
    let app = Router::new().route("/mcp", post(handle));
    axum::serve(nodelay(listen(addr).await?), app).await?;
    Ok(())
}
