//! What authentication costs: one server with two tenants serving the same `calc`, one open
//! and one an OAuth resource server, measured side by side with the same load. The tokens
//! are real JWTs from `oidc-provider` (the test suite's, in `tests/auth`), verified against
//! the issuer's cached JWKS on every request.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};

/// `oidc-provider` on 127.0.0.1, killed on drop.
pub struct Provider {
    _child: tokio::process::Child,
    pub issuer: String,
}

impl Provider {
    /// Start the test suite's authorization server (installing it on first use).
    pub async fn start(repo: &Path) -> anyhow::Result<Provider> {
        let dir = repo.join("tests/auth");
        if !dir.join("node_modules/oidc-provider").exists() {
            let status = tokio::process::Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir)
                .stdout(Stdio::null())
                .status()
                .await
                .context("npm (Node.js) is needed for the authentication row")?;
            anyhow::ensure!(status.success(), "npm ci in tests/auth failed");
        }
        let mut child = tokio::process::Command::new("node")
            .args(["provider.mjs", "0"])
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start oidc-provider")?;
        let mut lines = BufReader::new(child.stdout.take().context("piped stdout")?).lines();
        let line = lines.next_line().await?.context("oidc-provider exited")?;
        let issuer = line.strip_prefix("listening ").context("oidc-provider's address")?.to_owned();
        Ok(Provider { _child: child, issuer })
    }

    /// A client-credentials access token for `resource`.
    pub async fn token(&self, resource: &str) -> anyhow::Result<Arc<str>> {
        let encode = |s: &str| s.replace(':', "%3A").replace('/', "%2F");
        let body = format!("grant_type=client_credentials&resource={}&scope=plugins", encode(resource));
        let answer: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth("alice", Some("alice-secret"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await?
            .json()
            .await?;
        let token = answer["access_token"].as_str().with_context(|| format!("no token: {answer}"))?;
        Ok(token.into())
    }
}

/// The two tenants' folders under `dir` and a policy naming them; `secured` trusts `issuer`
/// for the resource at `port`.
pub fn layout(dir: &Path, plugins: &Path, port: u16, issuer: &str) -> anyhow::Result<std::path::PathBuf> {
    for tenant in ["open", "secured"] {
        std::fs::create_dir_all(dir.join(tenant))?;
        std::fs::copy(plugins.join("calc.wasm"), dir.join(tenant).join("calc.wasm"))?;
    }
    let policy = dir.join("capsule.toml");
    std::fs::write(
        &policy,
        format!(
            "[tenants.open]\nsources = [\"open\"]\n[tenants.secured]\nsources = [\"secured\"]\n\
             [tenants.secured.auth]\nresource = \"{}\"\nauthorization_servers = [\"{issuer}\"]\n",
            resource(port)
        ),
    )?;
    Ok(policy)
}

/// The secured tenant's resource URI.
pub fn resource(port: u16) -> String {
    format!("http://127.0.0.1:{port}/t/secured/mcp")
}
