//! Where `sim observe` gets series: a Prometheus server's HTTP API, or the engines'
//! `/metrics` polled directly. Through the wing's one HTTP client on its runtime, with a
//! bounded wait and a bounded answer per request.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::client::{client, get_text};
use super::runtime;
use crate::export::openmetrics::instance_of;
use crate::observe::{
    LabeledSeries, Observed, bad_value, collect, parse_metrics_text, parse_query_range, query, wanted,
};

/// Longest wait for one HTTP answer (a scrape's poll waits at most one step).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read (a query_range over a big fleet is tens of MB).
const MAX_BODY: u64 = 512 << 20;
/// Largest `/metrics` answer read per poll (vLLM's is tens of KB; a scrape polls every
/// engine at once).
const MAX_METRICS_BODY: u64 = 16 << 20;

/// Queries `/api/v1/query_range` on a Prometheus server for the vLLM series `sim observe`
/// reads (one query), between `from` and `to` (Unix seconds or RFC 3339) every `step_s`.
pub fn prometheus(base: &str, selector: &str, from: &str, to: &str, step_s: f64) -> Result<Observed> {
    let url = format!("{}/api/v1/query_range", base.trim_end_matches('/'));
    let q = query(selector);
    let step = format!("{step_s}");
    let params = [("query", q.as_str()), ("start", from), ("end", to), ("step", &step)];
    let (status, body) = runtime(Some(1))?.block_on(async {
        let client = client(None)?;
        get_text(&client, &url, &params, TIMEOUT, MAX_BODY).await
    })?;
    let source = format!("{base} ({q})");
    if status != 200 && !body.trim_start().starts_with('{') {
        bail!("{source}: HTTP {status}: {}", body.lines().next().unwrap_or(""));
    }
    parse_query_range(&source, &body)
}

/// Polls each engine's `/metrics` every `step` for `duration`; times are seconds from the
/// first poll. The engines are polled together, each poll waiting at most one `step` (and
/// 30 s) for its answer, so a scrape ends within a step of `duration` whatever the
/// engines do. A failed poll (no answer in time, an error status, a value that cannot be a
/// count) leaves that engine without a sample at that instant, and is counted and named.
pub fn scrape(urls: &[String], duration: Duration, step: Duration) -> Result<Observed> {
    if urls.is_empty() {
        bail!("--scrape: no URL");
    }
    if step.is_zero() {
        bail!("--step must be positive");
    }
    let series = runtime(Some(1))?.block_on(poll(urls, duration, step))?;
    collect(format!("--scrape {}", urls.join(",")), series)
}

/// One engine's `/metrics` URL.
fn metrics_url(u: &str) -> String {
    if u.ends_with("/metrics") {
        u.to_string()
    } else {
        format!("{}/metrics", u.trim_end_matches('/'))
    }
}

/// One poll of `url` within `timeout`: the [`wanted`] families' values, or why not.
async fn poll_one(client: &reqwest::Client, url: &str, timeout: Duration) -> Result<Vec<Option<f64>>, String> {
    let body = match get_text(client, url, &[], timeout, MAX_METRICS_BODY).await {
        Ok((200, body)) => body,
        Ok((status, _)) => return Err(format!("HTTP {status}")),
        Err(e) => return Err(format!("{e:#}")),
    };
    let m = parse_metrics_text(&body);
    let names = wanted();
    let mut out = Vec::with_capacity(names.len());
    for (j, n) in names.iter().enumerate() {
        let v = m.get(n).copied();
        if let Some(e) = v.and_then(|v| bad_value(j, v)) {
            return Err(format!("{n} is {e}"));
        }
        out.push(v);
    }
    Ok(out)
}

/// [`scrape`]'s polls: each engine's samples of the [`wanted`] series, those with none
/// left out; a note per engine whose polls failed.
async fn poll(urls: &[String], duration: Duration, step: Duration) -> Result<Vec<LabeledSeries>> {
    let client = client(None)?;
    let names = wanted();
    let start = Instant::now();
    let timeout = step.min(TIMEOUT);
    let urls: Vec<String> = urls.iter().map(|u| metrics_url(u)).collect();
    let mut series: Vec<LabeledSeries> = Vec::new();
    for u in &urls {
        for n in &names {
            let labels = BTreeMap::from([
                ("__name__".to_string(), n.clone()),
                ("instance".to_string(), instance_of(u)),
            ]);
            series.push((labels, Vec::new()));
        }
    }
    let mut failures: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut k = 0u32;
    while let Some(due) = step.checked_mul(k).filter(|d| *d <= duration) {
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let t = due.as_secs_f64();
        let polls = futures_util::future::join_all(urls.iter().map(|u| poll_one(&client, u, timeout))).await;
        for (i, (url, got)) in urls.iter().zip(polls).enumerate() {
            match got {
                Ok(values) => {
                    for (j, v) in values.into_iter().enumerate() {
                        if let Some(v) = v {
                            series[i * names.len() + j].1.push((t, v));
                        }
                    }
                }
                Err(e) => {
                    let f = failures.entry(url.clone()).or_insert((0, String::new()));
                    f.0 += 1;
                    f.1 = e;
                }
            }
        }
        k += 1;
    }
    for (url, (n, last)) in &failures {
        eprintln!("note: {url}: {n} of {k} polls failed (last: {last})");
    }
    Ok(series.into_iter().filter(|(_, p)| !p.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    /// A one-thread HTTP server on loopback answering every request with `body`, `n` times.
    fn serve(body: &'static str, status: u16, n: usize) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming().take(n) {
                let mut s = s.unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                    line.clear();
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        format!("http://{addr}")
    }

    #[test]
    fn scrapes_engines_on_loopback() {
        let body = "vllm:num_requests_running{engine=\"0\"} 2\nvllm:num_requests_waiting{engine=\"0\"} 1\n";
        let url = serve(body, 200, 3);
        let o = scrape(
            std::slice::from_ref(&url),
            Duration::from_millis(100),
            Duration::from_millis(50),
        )
        .unwrap();
        assert_eq!(o.times.len(), 3);
        assert_eq!(o.backends[0].instance, instance_of(&url));
        assert_eq!(o.backends[0].running, vec![Some(2.0); 3]);
    }

    #[test]
    fn prometheus_errors_are_named() {
        let url = serve(
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
            400,
            1,
        );
        let e = prometheus(&url, "", "0", "10", 1.0).unwrap_err().to_string();
        assert!(e.contains("parse error at char 3"), "{e}");
    }

    /// An answer past the limit is refused, naming the URL, and one at it is read whole.
    #[test]
    fn answers_are_bounded() {
        let url = serve("0123456789", 200, 2);
        let rt = runtime(Some(1)).unwrap();
        let c = client(None).unwrap();
        let get = |limit| rt.block_on(get_text(&c, &url, &[("q", "a b")], TIMEOUT, limit));
        let e = format!("{:#}", get(9).unwrap_err());
        assert!(e.contains(&format!("reading the answer of {url}")), "{e}");
        assert!(e.contains("larger than 9 bytes"), "{e}");
        assert_eq!(get(10).unwrap(), (200, "0123456789".to_string()));
    }
}
