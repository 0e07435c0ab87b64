//! A tenant's quotas: how much of the server its plugins and callers may use together, on
//! top of each plugin's per-call [`Limits`](super::Limits). Every quota is off unless the
//! operator sets it: a server without tenants behaves as it always did.
//!
//! Written as `[quotas]` at the top of the policy file (the default tenant's, and the
//! starting point of every `[tenants.<id>.quotas]`) or in a tenant's `tenant.toml`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{MAX_INSTANCES, MAX_MILLIS, in_range};

/// The CPU time a tenant's calls may use together in each window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    pub budget: Duration,
    pub window: Duration,
}

/// Calls per minute for each principal to each tool: a token bucket holding `burst` calls,
/// refilled at `per_minute` a minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateQuota {
    pub per_minute: u32,
    pub burst: u32,
}

/// A tenant's quotas, checked; `None` is no quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Requests running plugin code at once (a call, a resource read, a prompt, a
    /// completion), counted from start to end, waits on the client for input included.
    pub concurrent_calls: Option<u32>,
    /// Plugin instances (sandboxes) alive at once.
    pub instances: Option<u32>,
    /// CPU time of the tenant's calls per window.
    pub cpu: Option<CpuQuota>,
    /// `tools/call` per principal per tool.
    pub rate: Option<RateQuota>,
    /// Live legacy (initialize-based) sessions; the server's `--max-sessions` still bounds
    /// every tenant together.
    pub sessions: Option<u32>,
    /// How long a call waits for a used-up quota to free before it is refused. A short
    /// burst is absorbed, and a refusal is never answered sooner: a client hammering a full
    /// quota gets one answer per wait per connection, not as many as the server can write.
    pub wait: Duration,
}

/// How long a call waits for a used-up quota unless the policy says otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(100);
/// The longest wait a policy may set: a waiting call holds its connection.
const MAX_WAIT_MS: u64 = 10_000;

impl Default for Quotas {
    fn default() -> Quotas {
        Quotas { concurrent_calls: None, instances: None, cpu: None, rate: None, sessions: None, wait: DEFAULT_WAIT }
    }
}

/// Quotas as written: each one optional, so a tenant's table can override the file's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrent_calls: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<u32>,
    /// CPU time per window, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    /// The CPU window, in seconds (60 unless given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_window_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_per_minute: Option<u32>,
    /// Calls a principal may make to one tool at once before the rate applies
    /// (`calls_per_minute` unless given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u32>,
    /// How long a call waits for a used-up quota, in milliseconds (0: refuse at once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// The longest CPU window, a day.
const MAX_WINDOW_S: u64 = 24 * 60 * 60;
/// The default CPU window.
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// The most sessions a quota may name (the server's own cap is far below).
const MAX_SESSIONS: u64 = 10_000_000;

impl QuotaOverrides {
    /// Whether any quota is written (an empty table sets none).
    fn is_empty(&self) -> bool {
        *self == QuotaOverrides::default()
    }
}

impl Quotas {
    /// These quotas as the policy file would write them (for the admin API).
    pub fn written(&self) -> QuotaOverrides {
        QuotaOverrides {
            concurrent_calls: self.concurrent_calls,
            instances: self.instances,
            cpu_ms: self.cpu.map(|c| u64::try_from(c.budget.as_millis()).unwrap_or(u64::MAX)),
            cpu_window_s: self.cpu.map(|c| c.window.as_secs()),
            calls_per_minute: self.rate.map(|r| r.per_minute),
            burst: self.rate.map(|r| r.burst),
            sessions: self.sessions,
            wait_ms: (self.wait != DEFAULT_WAIT).then(|| u64::try_from(self.wait.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// These quotas with `overrides` over them, checked.
    pub fn with(self, overrides: &QuotaOverrides) -> Result<Quotas, String> {
        if overrides.is_empty() {
            return Ok(self);
        }
        let count = |name: &str, value: Option<u32>, max: u64| -> Result<Option<u32>, String> {
            value.map(|v| in_range(name, v.into(), max).map(|v| v as u32)).transpose()
        };
        let cpu = match (overrides.cpu_ms, overrides.cpu_window_s) {
            (None, None) => self.cpu,
            (None, Some(_)) if self.cpu.is_none() => return Err("cpu_window_s is given without cpu_ms".into()),
            (budget, window) => {
                let window = match window {
                    Some(s) => Duration::from_secs(in_range("cpu_window_s", s, MAX_WINDOW_S)?),
                    None => self.cpu.map_or(DEFAULT_WINDOW, |c| c.window),
                };
                let budget = match budget {
                    Some(ms) => Duration::from_millis(in_range("cpu_ms", ms, MAX_MILLIS)?),
                    None => self.cpu.map(|c| c.budget).unwrap_or_default(),
                };
                // More than the window is fine (several cores); a thousand windows is a typo.
                if budget > window * 1024 {
                    return Err(format!("cpu_ms = {} is more than the window can hold", budget.as_millis()));
                }
                Some(CpuQuota { budget, window })
            }
        };
        let rate = match (count("calls_per_minute", overrides.calls_per_minute, u32::MAX.into())?, overrides.burst) {
            (None, None) => self.rate,
            (None, Some(_)) if self.rate.is_none() => return Err("burst is given without calls_per_minute".into()),
            (per_minute, burst) => {
                let per_minute = per_minute.or(self.rate.map(|r| r.per_minute)).unwrap_or_default();
                let burst = count("burst", burst, u32::MAX.into())?.unwrap_or(per_minute);
                Some(RateQuota { per_minute, burst })
            }
        };
        Ok(Quotas {
            concurrent_calls: count("concurrent_calls", overrides.concurrent_calls, u32::MAX.into())?
                .or(self.concurrent_calls),
            instances: count("instances", overrides.instances, MAX_INSTANCES.into())?.or(self.instances),
            cpu,
            rate,
            sessions: count("sessions", overrides.sessions, MAX_SESSIONS)?.or(self.sessions),
            wait: match overrides.wait_ms {
                Some(0) => Duration::ZERO,
                Some(ms) => Duration::from_millis(in_range("wait_ms", ms, MAX_WAIT_MS)?),
                None => self.wait,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas(text: &str) -> Result<Quotas, String> {
        let overrides: QuotaOverrides = toml::from_str(text).map_err(|e| e.to_string())?;
        Quotas::default().with(&overrides)
    }

    #[test]
    fn nothing_is_limited_unless_written() {
        assert_eq!(quotas("").unwrap(), Quotas::default());
        let q =
            quotas("concurrent_calls = 4\ninstances = 8\ncpu_ms = 2000\ncalls_per_minute = 60\nsessions = 10").unwrap();
        assert_eq!(q.concurrent_calls, Some(4));
        assert_eq!(q.instances, Some(8));
        assert_eq!(q.cpu, Some(CpuQuota { budget: Duration::from_secs(2), window: Duration::from_secs(60) }));
        assert_eq!(q.rate, Some(RateQuota { per_minute: 60, burst: 60 }));
        assert_eq!(q.sessions, Some(10));
        assert_eq!(q.wait, DEFAULT_WAIT);
        assert_eq!(quotas("wait_ms = 0").unwrap().wait, Duration::ZERO);
        assert_eq!(quotas("wait_ms = 2500").unwrap().written().wait_ms, Some(2500));
    }

    #[test]
    fn a_tenant_overrides_the_files_quotas_field_by_field() {
        let file = quotas("cpu_ms = 1000\ncpu_window_s = 10\ncalls_per_minute = 60\nburst = 5").unwrap();
        let tenant: QuotaOverrides = toml::from_str("cpu_ms = 500\ncalls_per_minute = 120").unwrap();
        let q = file.with(&tenant).unwrap();
        assert_eq!(q.cpu, Some(CpuQuota { budget: Duration::from_millis(500), window: Duration::from_secs(10) }));
        assert_eq!(q.rate, Some(RateQuota { per_minute: 120, burst: 120 }));
    }

    #[test]
    fn bad_quotas_are_refused() {
        for (text, expected) in [
            ("concurrent_calls = 0", "out of range"),
            ("instances = 10001", "out of range"),
            ("cpu_window_s = 5", "without cpu_ms"),
            ("burst = 5", "without calls_per_minute"),
            ("cpu_ms = 0", "out of range"),
            ("cpu_ms = 86400000\ncpu_window_s = 1", "more than the window"),
            ("sessions = 0", "out of range"),
            ("wait_ms = 10001", "out of range"),
            ("calls = 3", "unknown field"),
        ] {
            let error = quotas(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
