//! `sim report`: one self-contained HTML file per results folder, escaped, offline, and
//! loaded in a real headless Chromium (Debian's `chromium`; the test skips, saying so,
//! where it is absent) that runs its script without an error, draws the time series zoomed
//! as the address asks, and decodes every figure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{scenario_path, sim, write};

/// burst8's run, with a file of text that tries to break out of the page beside it.
fn hostile_run(tmp: &Path) -> PathBuf {
    let out = tmp.join("run");
    sim()
        .arg("run")
        .arg(scenario_path("burst8.toml"))
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .assert()
        .success();
    write(&out, "notes.toml", "# </pre><script>alert(1)</script> & \"quotes\"\n");
    out
}

fn report(dir: &Path, html: &Path) -> String {
    sim().arg("report").arg(dir).arg("-o").arg(html).assert().success();
    std::fs::read_to_string(html).unwrap()
}

#[test]
fn a_run_is_one_escaped_offline_page() {
    let tmp = tempfile::tempdir().unwrap();
    let run = hostile_run(tmp.path());
    let html = report(&run, &tmp.path().join("r.html"));
    for section in [
        "id=\"summary\"",
        "id=\"hints\"",
        "id=\"timeseries\"",
        "id=\"figures\"",
        "id=\"explanation\"",
        "id=\"scenario\"",
    ] {
        assert!(html.contains(section), "no {section}");
    }
    // Offline: nothing is fetched (no external script, style, image or font).
    assert!(
        !html.contains("src=\"http") && !html.contains("<link"),
        "an external resource"
    );
    assert!(html.contains("data:image/svg+xml;base64,"));
    // The user's text is escaped wherever it appears.
    assert!(!html.contains("<script>alert(1)"));
    assert!(html.contains("&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;"));
    // The summary, and the worst episode with a button zooming to it.
    assert!(html.contains("idle_while_queued_s 197.4"), "summary");
    assert!(
        html.contains("Worst episode</strong> (episode 1)") && html.contains("data-zoom=\"40.8"),
        "worst episode"
    );
}

#[test]
fn sweeps_and_missing_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let html = report(&root.join("results/compare-agent-burst"), &tmp.path().join("s.html"));
    assert!(html.contains("<h2>Tables</h2>") && html.contains("<td><code>least_request</code></td>"));
    assert!(html.matches("<img ").count() >= 3, "the sweep's figures");
    assert!(html.contains("compare-agent-burst"));
    // A served run's folder (`serve.json` beside what `sim run` writes) is not re-run.
    let served = hostile_run(tmp.path());
    write(&served, "serve.json", "{}\n");
    let html = report(&served, &tmp.path().join("v.html"));
    assert!(html.contains("burst8: served run") && !html.contains("id=\"explanation\""));
    let missing = tmp.path().join("nothere");
    let out = sim()
        .arg("report")
        .arg(&missing)
        .arg("-o")
        .arg(tmp.path().join("m.html"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothere: no such folder"), "{err}");
    assert!(!tmp.path().join("m.html").exists());
}

/// Chromium's command, from `FLEETSIM_CHROMIUM` or the PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLEETSIM_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// `chromium --headless --dump-dom URL`: the document after its scripts ran, bounded in
/// time.
fn dump_dom(browser: &Path, url: &str, profile: &Path) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=5000",
            "--window-size=1200,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).unwrap();
        s
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "chromium did not finish in 120 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

#[test]
fn the_page_runs_in_headless_chromium() {
    let Some(browser) = chromium() else {
        crate::common::skip(
            "report::the_page_runs_in_headless_chromium",
            "no chromium on the PATH (Debian: apt-get install -y chromium; .ci/run installs it; or set FLEETSIM_CHROMIUM)",
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = hostile_run(tmp.path());
    let page = tmp.path().join("r.html");
    report(&run, &page);
    let url = format!("file://{}#zoom=40,60", page.display());
    let dom = dump_dom(&browser, &url, &tmp.path().join("profile"));
    assert!(
        dom.contains("data-ready=\"1\""),
        "the script did not finish:\n{}",
        &dom[..dom.len().min(2000)]
    );
    assert!(
        !dom.contains("data-errors=\""),
        "script errors: {}",
        dom.split("data-errors=")
            .nth(1)
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
    );
    // The address's zoom took: the axis is 40..60 s, and both backends are drawn with data.
    assert!(
        dom.contains("data-x0=\"40.000\"") && dom.contains("data-x1=\"60.000\""),
        "zoom not applied"
    );
    assert_eq!(dom.matches("class=\"panel\" data-backend=").count(), 2);
    assert_eq!(dom.matches("class=\"running\"").count(), 2, "two running lines");
    assert!(!dom.contains("d=\"\" class=\"running\""), "an empty line");
    assert!(dom.contains("class=\"stranded\""), "idle-while-queued not shaded");
    // Every figure decoded.
    let figures = attr(&dom, "data-figures");
    assert!(figures >= 1, "no figure");
    assert_eq!(attr(&dom, "data-figures-shown"), figures, "a figure did not decode");
    // No zoom in the address: the whole run.
    let whole = dump_dom(
        &browser,
        &format!("file://{}", page.display()),
        &tmp.path().join("profile"),
    );
    assert!(
        whole.contains("data-x0=\"0.000\"") && whole.contains("data-x1=\"252.132\""),
        "the whole run"
    );
}

fn attr(dom: &str, name: &str) -> usize {
    let key = format!("{name}=\"");
    let at = dom.find(&key).unwrap_or_else(|| panic!("no {name}")) + key.len();
    dom[at..].split('"').next().unwrap().parse().unwrap()
}
