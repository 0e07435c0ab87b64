//! The command line: `capsule serve` and friends.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::loader::{self, Sources};
use crate::mcp::{Shared, StateCodec};
use crate::runtime::{CompileCache, PluginRuntime, RuntimeConfig};
use crate::transport::http::HttpOptions;

/// Serve the Model Context Protocol from sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "capsule", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MCP over Streamable HTTP (default 127.0.0.1:3000) or stdio.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Speak MCP on stdin/stdout (for clients that launch the server, e.g. Claude Desktop).
    #[arg(long, conflicts_with = "listen")]
    stdio: bool,
    /// Address for Streamable HTTP; MCP is served at /mcp.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// Load every .wasm component in this directory (repeatable).
    #[arg(long = "plugins", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// Load this .wasm component (repeatable).
    #[arg(long = "plugin", value_name = "FILE.wasm")]
    plugin_files: Vec<PathBuf>,
    /// Watch the plugin directories and files, and swap changed plugins in without a restart.
    #[arg(long)]
    watch: bool,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    http: HttpArgs,
    /// File holding the key (32+ bytes) that seals request state for 2026-07-28 clients.
    /// Replicas behind one load balancer must share it; default: a random per-process key.
    #[arg(long, value_name = "FILE", env = "CAPSULE_STATE_KEY_FILE")]
    state_key_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct LimitArgs {
    /// Linear memory each plugin call may use, in MiB.
    #[arg(long, value_name = "MiB", default_value_t = 64)]
    memory_limit: usize,
    /// CPU time each plugin call may spend, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    cpu_deadline: u64,
    /// Wall-clock time each plugin call may take, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    call_timeout: u64,
    /// Plugin instances alive at once, across all plugins.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_instances: u32,
    /// Keep compiled plugins here, keyed by content hash (default: $XDG_CACHE_HOME/capsule or
    /// ~/.cache/capsule). The directory is made private to this user.
    #[arg(long, value_name = "DIR", env = "CAPSULE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every plugin at every start instead of using the compile cache.
    #[arg(long, conflicts_with = "cache_dir")]
    no_compile_cache: bool,
}

#[derive(Debug, Args)]
struct HttpArgs {
    /// Largest HTTP request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    max_body_bytes: usize,
    /// Live legacy (initialize-based) sessions allowed at once.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_sessions: usize,
    /// Accept this Host header value too (repeatable; loopback names are always accepted).
    #[arg(long = "allow-host", value_name = "HOST")]
    allowed_hosts: Vec<String>,
    /// Accept requests from this Origin too (repeatable; loopback origins are always accepted).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allowed_origins: Vec<String>,
}

/// Run the command line; logs go to stderr, stdout belongs to the stdio transport.
pub fn main() -> ExitCode {
    main_with_args(std::env::args_os())
}

/// Run the command line with these arguments (the first is the program name).
pub fn main_with_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CAPSULE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn state_codec(path: Option<&Path>) -> Result<StateCodec> {
    match path {
        None => Ok(StateCodec::random()),
        Some(path) => {
            let key = std::fs::read(path).with_context(|| format!("cannot read the state key {}", path.display()))?;
            StateCodec::new(key).map_err(|e| anyhow::anyhow!("state key {}: {e}", path.display()))
        }
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let compile_cache = if args.limits.no_compile_cache {
        None
    } else {
        match args.limits.cache_dir.clone().or_else(CompileCache::default_dir).map(CompileCache::open) {
            Some(Ok(cache)) => Some(cache),
            Some(Err(e)) => {
                tracing::warn!("compile cache unavailable, compiling every plugin: {e}");
                None
            }
            None => None,
        }
    };
    let config = RuntimeConfig {
        compile_cache,
        memory_limit: args.limits.memory_limit << 20,
        cpu_deadline: Duration::from_millis(args.limits.cpu_deadline),
        wall_deadline: Duration::from_millis(args.limits.call_timeout),
        max_instances: args.limits.max_instances,
        ..RuntimeConfig::default()
    };
    let runtime = PluginRuntime::new(config)?;
    let sources = if args.plugin_dirs.is_empty() && args.plugin_files.is_empty() {
        Sources::Bundled
    } else {
        Sources::Paths { dirs: args.plugin_dirs.clone(), files: args.plugin_files.clone() }
    };
    let catalog = loader::load(&runtime, &sources, &[]).await;
    if catalog.plugins().is_empty() && !args.watch {
        bail!("no plugin could be loaded");
    }
    let shared = Shared::new(catalog, state_codec(args.state_key_file.as_deref())?);
    let shutdown = CancellationToken::new();
    if args.watch {
        loader::watch(runtime, sources, shared.clone(), shutdown.clone())
            .context("cannot watch the plugin directories")?;
    }
    if args.stdio {
        return crate::transport::stdio::serve(shared).await;
    }
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
        on_signal.cancel();
    });
    let options = HttpOptions {
        max_body_bytes: args.http.max_body_bytes,
        max_sessions: args.http.max_sessions,
        allowed_hosts: args.http.allowed_hosts,
        allowed_origins: args.http.allowed_origins,
        ..HttpOptions::default()
    };
    crate::transport::http::serve(shared, args.listen, options, shutdown).await
}
