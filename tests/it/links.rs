//! Every link and image in README.md and docs/**/*.md works on a clone: a relative target is
//! a file or folder of this repository (never outside it, such as `../shared`), a `#anchor`
//! is a heading of the target file under GitHub's slug rules, and an external http(s) link
//! is well-formed (it is not fetched: CI has no network). A `[text][ref]` whose reference is
//! not defined is a broken link too.

use crate::common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{BrokenLink, Event, LinkType, Options, Parser, Tag, TagEnd};

/// Files that other branches are writing at the same time (the generated reference by the
/// house engineer, the engine chapter by the engine engineer), repository-relative. Links to
/// them pass while they are absent; the coordinator empties this list when they land
/// (`listed_missing_files_are_still_missing` fails as soon as one exists).
const NOT_YET_WRITTEN: &[&str] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A link or image target as written, with the 1-based line it is on.
#[derive(Debug, PartialEq)]
struct Target {
    line: usize,
    url: String,
}

/// What one Markdown file holds for the check: its link targets, its heading anchors, and
/// the references it uses without defining them.
#[derive(Debug, Default)]
struct Doc {
    targets: Vec<Target>,
    anchors: Vec<String>,
    undefined_refs: Vec<Target>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// GitHub's heading anchor: lower case; every character that is not a letter, digit, `_`,
/// `-` or space dropped; each space a `-` (no collapsing). Repeats get `-1`, `-2`, ...
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// `src="..."` and `href="..."` values in a piece of inline HTML.
fn html_targets(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["src=\"", "href=\""] {
        let mut rest = html;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            if let Some(end) = rest.find('"') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

fn parse(text: &str) -> Doc {
    let undefined = RefCell::new(Vec::new());
    let callback = |b: BrokenLink| {
        if matches!(b.link_type, LinkType::Reference | LinkType::Collapsed) {
            undefined.borrow_mut().push(Target {
                line: line_of(text, b.span.start),
                url: b.reference.to_string(),
            });
        }
        None
    };
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_FOOTNOTES;
    let mut doc = Doc::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for (event, range) in Parser::new_with_broken_link_callback(text, options, Some(callback)).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                doc.anchors
                    .push(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
                *n += 1;
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
                doc.targets.push(Target {
                    line: line_of(text, range.start),
                    url: dest_url.to_string(),
                });
            }
            Event::Html(h) | Event::InlineHtml(h) => {
                for url in html_targets(&h) {
                    doc.targets.push(Target {
                        line: line_of(text, range.start),
                        url,
                    });
                }
            }
            _ => {}
        }
    }
    doc.undefined_refs = undefined.into_inner();
    doc
}

/// Lines (1-based) where a table is split by a blank line: a row, a blank line, and a row
/// that is not the header of a new table (GitHub renders the rest as a new, headless table).
fn split_tables(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let is_row = |l: &str| l.trim_start().starts_with('|');
    let is_rule = |l: &str| is_row(l) && l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '));
    let mut fence = false;
    let mut out = Vec::new();
    for i in 0..lines.len() {
        if lines[i].trim_start().starts_with("```") {
            fence = !fence;
        }
        if fence || i == 0 || i + 1 >= lines.len() || !lines[i].trim().is_empty() {
            continue;
        }
        let new_table = lines.get(i + 2).is_some_and(|l| is_rule(l));
        if is_row(lines[i - 1]) && is_row(lines[i + 1]) && !new_table {
            out.push(i + 1);
        }
    }
    out
}

/// Why an external link is malformed, if it is.
fn bad_external(url: &str) -> Option<&'static str> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if url.chars().any(|c| c.is_whitespace() || c == '<' || c == '>') {
        Some("contains whitespace or angle brackets")
    } else if host.is_empty() || !host.contains('.') || host.starts_with('.') || host.ends_with('.') {
        Some("has no host name")
    } else {
        None
    }
}

/// `dir/rel` with `.` and `..` resolved lexically; None when it climbs above the root.
fn resolve(dir: &Path, rel: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for c in Path::new(rel).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// Every problem with the links of `files` (repository-relative), as `file:line: message`.
fn problems(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut docs: BTreeMap<PathBuf, Doc> = BTreeMap::new();
    let mut out = Vec::new();
    for f in files {
        docs.insert(f.clone(), parse(&std::fs::read_to_string(root.join(f)).unwrap()));
    }
    let anchors_of = |p: &Path| -> Option<Vec<String>> {
        if let Some(d) = docs.get(p) {
            return Some(d.anchors.clone());
        }
        std::fs::read_to_string(root.join(p)).ok().map(|t| parse(&t).anchors)
    };
    for f in files {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        let doc = parse(&text);
        let where_ = |line: usize| format!("{}:{line}", f.display());
        for line in split_tables(&text) {
            out.push(format!("{}: a blank line splits this table", where_(line)));
        }
        for r in &doc.undefined_refs {
            out.push(format!(
                "{}: link reference `[{}]` is not defined",
                where_(r.line),
                r.url
            ));
        }
        for t in &doc.targets {
            let url = t.url.as_str();
            if url.starts_with("http://") || url.starts_with("https://") {
                if let Some(why) = bad_external(url) {
                    out.push(format!("{}: external link `{url}` {why}", where_(t.line)));
                }
                continue;
            }
            if url.starts_with("mailto:") {
                continue;
            }
            if url.contains("://") || url.is_empty() {
                out.push(format!(
                    "{}: link `{url}` is neither relative nor http(s)",
                    where_(t.line)
                ));
                continue;
            }
            let (path, anchor) = match url.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (url, None),
            };
            let target = if path.is_empty() {
                f.clone()
            } else {
                match resolve(f.parent().unwrap(), path) {
                    Some(p) => p,
                    None => {
                        out.push(format!("{}: `{url}` points outside the repository", where_(t.line)));
                        continue;
                    }
                }
            };
            let pending = NOT_YET_WRITTEN.iter().any(|p| Path::new(p) == target);
            if !root.join(&target).exists() {
                if !pending {
                    out.push(format!(
                        "{}: `{url}`: no such file {}",
                        where_(t.line),
                        target.display()
                    ));
                }
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if target.extension().is_none_or(|e| e != "md") {
                out.push(format!(
                    "{}: `{url}`: an anchor into a file that is not Markdown",
                    where_(t.line)
                ));
                continue;
            }
            let anchors = anchors_of(&target).unwrap_or_default();
            if !anchors.iter().any(|a| a == anchor) {
                out.push(format!(
                    "{}: `{url}`: {} has no heading with anchor `#{anchor}`",
                    where_(t.line),
                    target.display()
                ));
            }
        }
    }
    out
}

#[test]
fn readme_and_guide_links_resolve() {
    let root = root();
    let files = common::documents(&root);
    assert!(files.len() > 10, "README.md and the guide are found: {files:?}");
    let bad = problems(&root, &files);
    assert!(bad.is_empty(), "{} broken links:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn listed_missing_files_are_still_missing() {
    for p in NOT_YET_WRITTEN {
        assert!(
            !root().join(p).exists(),
            "{p} exists now: remove it from NOT_YET_WRITTEN in tests/it/links.rs so its links and anchors are checked"
        );
    }
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(slug("Quick start"), "quick-start");
    assert_eq!(
        slug("`sim explain`: why capacity was stranded"),
        "sim-explain-why-capacity-was-stranded"
    );
    assert_eq!(
        slug("Router (src/router/, src/policy/): production-stack main"),
        "router-srcrouter-srcpolicy-production-stack-main"
    );
    assert_eq!(slug("A fix that holds (paste-ready)"), "a-fix-that-holds-paste-ready");
    assert_eq!(
        slug("Scrape interval x band: 1,920 runs"),
        "scrape-interval-x-band-1920-runs"
    );
    assert_eq!(slug("a — b"), "a--b");
    assert_eq!(slug("keys_and values"), "keys_and-values");
    let doc = parse("# Title\n\n## Usage\n\n## Usage\n\n### `code` *emph*\n");
    assert_eq!(doc.anchors, ["title", "usage", "usage-1", "code-emph"]);
}

#[test]
fn finds_every_kind_of_broken_link() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/a.md"), "# A\n\n## Part two\n").unwrap();
    std::fs::write(root.join("x.png"), "").unwrap();
    let readme = "# R\n\
                  [ok](docs/a.md#part-two) [ok](#r) ![ok](x.png) [ok](https://example.org/p)\n\
                  [missing](docs/b.md)\n\
                  [anchor](docs/a.md#part-three)\n\
                  [outside](../shared/x.md)\n\
                  [host](https://nohost/x)\n\
                  ![img](y.png)\n\
                  [text][undefined]\n\
                  <img src=\"z.png\">\n";
    std::fs::write(root.join("README.md"), readme).unwrap();
    let bad = problems(root, &common::documents(root));
    let lines: Vec<&str> = bad.iter().map(|b| b.split(": ").next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "README.md:8",
            "README.md:3",
            "README.md:4",
            "README.md:5",
            "README.md:6",
            "README.md:7",
            "README.md:9"
        ],
        "{bad:#?}"
    );
    assert!(bad[3].contains("outside the repository"), "{}", bad[3]);
    assert!(bad[2].contains("no heading with anchor `#part-three`"), "{}", bad[2]);
}

#[test]
fn finds_tables_split_by_a_blank_line() {
    let md =
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\n| c | d |\n|---|---|\n| 5 | 6 |\n\n```\n| x |\n\n| y |\n```\n";
    assert_eq!(split_tables(md), [4]);
}

#[test]
fn external_links_must_be_well_formed() {
    assert_eq!(bad_external("https://github.com/vllm-project/vllm"), None);
    assert_eq!(bad_external("https://ui.perfetto.dev"), None);
    assert!(bad_external("https://").is_some());
    assert!(bad_external("https://localhost/x").is_some());
    assert!(bad_external("https://a.org/x y").is_some());
}
