//! The live wing's one HTTP client: reqwest, on the wing's [`runtime`](super::runtime).
//! `sim load` streams completions through it; `sim observe` reads Prometheus answers and
//! engines' `/metrics` through [`get_text`].

use std::time::Duration;

use anyhow::{Context, Result};
use futures_util::StreamExt;

/// A client keeping at most `max_idle_per_host` idle connections per host (`None`:
/// reqwest's default, no bound).
pub fn client(max_idle_per_host: Option<usize>) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder();
    if let Some(n) = max_idle_per_host {
        b = b.pool_max_idle_per_host(n);
    }
    b.build().context("building the HTTP client")
}

/// `GET url` with query parameters, answered within `timeout` (connection to the body's
/// last byte): the status, whatever it is, and the body, at most `max_body` bytes of
/// UTF-8. Errors name the URL.
pub async fn get_text(
    client: &reqwest::Client,
    url: &str,
    params: &[(&str, &str)],
    timeout: Duration,
    max_body: u64,
) -> Result<(u16, String)> {
    let full = reqwest::Url::parse_with_params(url, params)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("GET {url}"))?;
    let resp = client
        .get(full)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", root_cause(&e)))
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status().as_u16();
    let body = read_limited(resp, max_body)
        .await
        .with_context(|| format!("reading the answer of {url}"))?;
    Ok((status, body))
}

/// A response's body as text, refused past `max_body` bytes.
async fn read_limited(resp: reqwest::Response, max_body: u64) -> Result<String> {
    let mut body = Vec::new();
    let mut chunks = resp.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| anyhow::anyhow!("{}", root_cause(&e)))?;
        anyhow::ensure!(
            body.len() as u64 + chunk.len() as u64 <= max_body,
            "the body is larger than {max_body} bytes"
        );
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).context("the body is not UTF-8")
}

/// The innermost cause of an error, on one line (reqwest's outer errors repeat the URL and
/// say only "error sending request").
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    crate::quote::one_line(&cur.to_string()).into_owned()
}
