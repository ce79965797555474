//! `sim observe`'s flags and readers under bad input: each refusal is exit 2 with one line
//! naming the flag, or the file and the series (or line); a scrape of an engine that never
//! answers ends within its `--duration` and a step, not after a 30 s wait per poll.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::common::{sim, write};

/// `sim observe ARGS`: (exit code, stderr).
fn observe(args: &[&str]) -> (Option<i32>, String) {
    let o = sim().arg("observe").args(args).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Exit 2 with one line containing each of `says`.
fn refused(args: &[&str], says: &[&str]) {
    let (code, err) = observe(args);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    for s in says {
        assert!(err.contains(s), "{args:?}: {err}");
    }
}

#[test]
fn flags_out_of_range_or_without_their_partner_are_named() {
    let u = "http://127.0.0.1:9";
    refused(
        &["--scrape", u, "--step", "1e-9", "--slots", "4"],
        &["--step 0.000000001", "from 0.01"],
    );
    refused(&["--scrape", u, "--step", "NaN", "--slots", "4"], &["--step"]);
    refused(
        &["--prometheus", u, "--from", "0", "--slots", "4"],
        &["--from is given without --to"],
    );
    refused(
        &["--prometheus", u, "--to", "10", "--slots", "4"],
        &["--to is given without --from"],
    );
    refused(
        &[
            "--prometheus",
            u,
            "--from",
            "0",
            "--to",
            "1e9",
            "--step",
            "1",
            "--slots",
            "4",
        ],
        &["Prometheus answers at most 11000", "--step of at least"],
    );
    refused(&["--scrape", u, "--duration", "0", "--slots", "4"], &["--duration 0"]);
    refused(
        &["--scrape", u, "--duration", "10", "--step", "20", "--slots", "4"],
        &["--step 20 is longer than --duration 10"],
    );
    refused(
        &["--scrape", u, "--from", "0", "--to", "1", "--slots", "4"],
        &["--from/--to applies to --prometheus only"],
    );
}

/// A saved query_range answer with `waiting` as the second sample of instance a:1's
/// waiting series, sampled at `t0` and `t1`.
fn answer(waiting: &str, t0: &str, t1: &str) -> String {
    let series = |name: &str, v: &str| {
        format!(r#"{{"metric":{{"__name__":"{name}","instance":"a:1"}},"values":[[{t0},"1"],[{t1},"{v}"]]}}"#)
    };
    format!(
        r#"{{"status":"success","data":{{"resultType":"matrix","result":[{},{}]}}}}"#,
        series("vllm:num_requests_running", "1"),
        series("vllm:num_requests_waiting", waiting)
    )
}

#[test]
fn impossible_values_and_times_are_refused_naming_the_series() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| write(dir.path(), name, text).display().to_string();
    let neg = file("neg.json", &answer("-1e300", "100", "105"));
    refused(
        &["--file", &neg, "--slots", "4"],
        &[
            "neg.json",
            "vllm:num_requests_waiting of instance a:1",
            "-1e300: expected a count from 0 to",
        ],
    );
    let ns = file("ns.json", &answer("1", "1767607200000000000", "1767607205000000000"));
    refused(
        &["--file", &ns, "--slots", "4"],
        &["ns.json", "past the year 5000", "nanoseconds?"],
    );
    // Nanoseconds read as milliseconds (the Prometheus text format): the same refusal.
    let prom = file(
        "ns.prom",
        "vllm:num_requests_running{instance=\"a:1\"} 1 1767607200000000000\n\
         vllm:num_requests_waiting{instance=\"a:1\"} 1 1767607200000000000\n",
    );
    refused(
        &["--file", &prom, "--slots", "4"],
        &["ns.prom:1: vllm:num_requests_running: timestamp"],
    );
    let close = file("close.json", &answer("1", "100", "100.0001"));
    refused(&["--file", &close, "--slots", "4"], &["less than 1 ms before it"]);
    let ok = file("ok.json", &answer("3", "100", "105"));
    let (code, err) = observe(&["--file", &ok, "--slots", "4", "--json"]);
    assert_eq!(code, Some(0), "{err}");
}

/// An engine that accepts connections and never answers: the scrape of 1 s at a 0.5 s step
/// gives each poll at most a step, so it ends in seconds (it waited 30 s per poll).
#[test]
fn a_scrape_of_an_engine_that_never_answers_ends_with_its_duration() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        l.set_nonblocking(true).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok((s, _)) = l.accept() {
                open.push(s);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let start = Instant::now();
    let (code, err) = observe(&["--scrape", &url, "--duration", "1", "--step", "0.5", "--slots", "4"]);
    let took = start.elapsed();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("3 of 3 polls failed"), "{err}");
    assert!(took < Duration::from_secs(10), "the scrape took {took:?}");
    drop(held);
}
