//! `sim report`'s one self-contained HTML page: sections of escaped text, Markdown rendered
//! without raw HTML, figures as data URIs, and the interactive time series (inline data and
//! inline script, [`series`]), so the file reads offline and can be mailed or attached.
//!
//! Owns: the page's markup, its style and script. May not see: a running simulation; it
//! takes finished files' text. Invariant: every piece of user or file text is escaped
//! ([`escape`]) or goes through [`markdown`], which escapes it; nothing is fetched.

pub mod series;

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

/// Text safe inside HTML elements and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Standard base64 (RFC 4648, padded), for figures as data URIs.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut o = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                o.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                o.push('=');
            }
        }
    }
    o
}

/// A link target kept as a link: web addresses and in-page anchors; anything else (a
/// `javascript:` URL, a relative path that will not exist beside a mailed file) is text.
fn safe_href(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("http://") || url.starts_with('#')
}

/// Markdown (fleetsim's own tables and explanations) as HTML: headings one level below the
/// section's, tables, lists, emphasis and code; raw HTML in the text is shown as text.
pub fn markdown(md: &str) -> String {
    use pulldown_cmark::{HeadingLevel, Options};
    let mut o = String::new();
    let mut in_head = false;
    let mut links: Vec<bool> = Vec::new();
    for ev in Parser::new_ext(md, Options::ENABLE_TABLES) {
        match ev {
            Event::Start(tag) => match tag {
                Tag::Paragraph => o.push_str("<p>"),
                Tag::Heading { level, .. } => {
                    let n = match level {
                        HeadingLevel::H1 => 3,
                        HeadingLevel::H2 => 4,
                        _ => 5,
                    };
                    o.push_str(&format!("<h{n}>"));
                }
                Tag::BlockQuote(_) => o.push_str("<blockquote>"),
                Tag::CodeBlock(_) => o.push_str("<pre><code>"),
                Tag::List(Some(k)) => o.push_str(&format!("<ol start=\"{k}\">")),
                Tag::List(None) => o.push_str("<ul>"),
                Tag::Item => o.push_str("<li>"),
                Tag::Table(_) => o.push_str("<table>"),
                Tag::TableHead => {
                    in_head = true;
                    o.push_str("<thead><tr>");
                }
                Tag::TableRow => o.push_str("<tr>"),
                Tag::TableCell => o.push_str(if in_head { "<th>" } else { "<td>" }),
                Tag::Emphasis => o.push_str("<em>"),
                Tag::Strong => o.push_str("<strong>"),
                Tag::Strikethrough => o.push_str("<del>"),
                Tag::Link { dest_url, .. } => {
                    let keep = safe_href(&dest_url);
                    if keep {
                        o.push_str(&format!("<a href=\"{}\">", escape(&dest_url)));
                    }
                    links.push(keep);
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Paragraph => o.push_str("</p>\n"),
                TagEnd::Heading(level) => {
                    let n = match level {
                        HeadingLevel::H1 => 3,
                        HeadingLevel::H2 => 4,
                        _ => 5,
                    };
                    o.push_str(&format!("</h{n}>\n"));
                }
                TagEnd::BlockQuote(_) => o.push_str("</blockquote>\n"),
                TagEnd::CodeBlock => o.push_str("</code></pre>\n"),
                TagEnd::List(true) => o.push_str("</ol>\n"),
                TagEnd::List(false) => o.push_str("</ul>\n"),
                TagEnd::Item => o.push_str("</li>\n"),
                TagEnd::Table => o.push_str("</tbody></table>\n"),
                TagEnd::TableHead => {
                    in_head = false;
                    o.push_str("</tr></thead><tbody>");
                }
                TagEnd::TableRow => o.push_str("</tr>\n"),
                TagEnd::TableCell => o.push_str(if in_head { "</th>" } else { "</td>" }),
                TagEnd::Emphasis => o.push_str("</em>"),
                TagEnd::Strong => o.push_str("</strong>"),
                TagEnd::Strikethrough => o.push_str("</del>"),
                TagEnd::Link if links.pop() == Some(true) => o.push_str("</a>"),
                _ => {}
            },
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => o.push_str(&escape(&t)),
            Event::Code(t) => o.push_str(&format!("<code>{}</code>", escape(&t))),
            Event::SoftBreak => o.push('\n'),
            Event::HardBreak => o.push_str("<br>\n"),
            Event::Rule => o.push_str("<hr>\n"),
            _ => {}
        }
    }
    o
}

/// A figure file (SVG or PNG) as an `<img>` with its bytes inline; the alternative text is
/// the file's name. SVG stays an image, so nothing in it runs.
pub fn figure(name: &str, bytes: &[u8]) -> String {
    let mime = if name.ends_with(".svg") {
        "image/svg+xml"
    } else {
        "image/png"
    };
    format!(
        "<figure><img alt=\"{n}\" src=\"data:{mime};base64,{}\"><figcaption>{n}</figcaption></figure>\n",
        base64(bytes),
        n = escape(name)
    )
}

/// Preformatted text (a terminal summary, a scenario file).
pub fn pre(text: &str) -> String {
    format!("<pre>{}</pre>\n", escape(text))
}

/// JSON inside `<script type="application/json">`: `</` cannot close the element.
pub fn json_script(id: &str, value: &serde_json::Value) -> String {
    let text = value.to_string().replace("</", "<\\/");
    format!(
        "<script type=\"application/json\" id=\"{}\">{text}</script>\n",
        escape(id)
    )
}

/// The page being assembled: a title, then sections in order.
#[derive(Default)]
pub struct Page {
    title: String,
    sections: Vec<(String, String, String)>,
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 20px 40px;color:#222}\
h1{font-size:1.5em;margin:18px 0 4px}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:28px}\
nav a{margin-right:12px}pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:13px}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}\
td:first-child,th:first-child{text-align:left}figure{margin:12px 0}figure img{max-width:100%;height:auto}\
figcaption{font-size:12px;color:#666}.callout{background:#fff4e5;border-left:4px solid #e69f00;padding:8px 12px}\
#series{position:relative}.zoombar{font-size:13px;margin:6px 0}.tip{font:12px monospace;min-height:1.4em;color:#333}\
svg.series{display:block;user-select:none;cursor:crosshair}svg.series text{font-size:11px;fill:#333}\
svg.series .name{font-size:12px;font-weight:600}svg.series .desc{font-size:12px}\
.frame{fill:none;stroke:#999}.grid{stroke:#eee}.axis{stroke:#999}.stranded{fill:#d55e00;fill-opacity:.13}\
.running{fill:none;stroke:#0072b2;stroke-width:1.6}.waiting{fill:none;stroke:#e69f00;stroke-width:1.6}\
.slots{stroke:#555;stroke-dasharray:6 4}.band{fill:#0072b2;fill-opacity:.15}\
.legend span{margin-right:14px}.sw{display:inline-block;width:22px;height:0;vertical-align:middle;margin-right:4px;border-top:2px solid}";

impl Page {
    /// An empty page titled `title`.
    pub fn new(title: &str) -> Page {
        Page {
            title: title.to_string(),
            ..Page::default()
        }
    }

    /// Adds a section: its anchor id, heading and HTML body (already escaped).
    pub fn section(&mut self, id: &str, heading: &str, body: String) {
        self.sections.push((id.to_string(), heading.to_string(), body));
    }

    /// Adds the interactive time series as a section (its data inline).
    pub fn series(&mut self, data: &series::SeriesData, note: &str) {
        let legend = "<p class=\"legend\"><span><i class=\"sw\" style=\"border-color:#0072b2\"></i>running</span>\
<span><i class=\"sw\" style=\"border-color:#e69f00\"></i>waiting</span>\
<span><i class=\"sw\" style=\"border-top:2px dashed #555\"></i>slots</span>\
<span><i class=\"sw\" style=\"border-top:10px solid rgba(213,94,0,.25)\"></i>idle while queued</span></p>";
        let body = format!(
            "{legend}<p>{}</p><div id=\"series\"></div>\n{}",
            escape(note),
            json_script("series-data", &data.to_json())
        );
        self.section("timeseries", "Time series", body);
    }

    /// The whole document.
    pub fn render(&self) -> String {
        let mut o = format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n<nav>",
            escape(&self.title),
            escape(&self.title)
        );
        for (id, heading, _) in &self.sections {
            o.push_str(&format!("<a href=\"#{}\">{}</a>", escape(id), escape(heading)));
        }
        o.push_str("</nav>\n");
        for (id, heading, body) in &self.sections {
            o.push_str(&format!(
                "<section id=\"{}\">\n<h2>{}</h2>\n{body}</section>\n",
                escape(id),
                escape(heading)
            ));
        }
        o.push_str(&format!(
            "<p style=\"font-size:12px;color:#666\">Written by fleetsim {} (<code>sim report</code>).</p>\n",
            env!("CARGO_PKG_VERSION")
        ));
        // The script draws the time series (if any) and marks the page ready.
        o.push_str("<script>\n");
        o.push_str(include_str!("series.js"));
        o.push_str("</script>\n");
        o.push_str("</body>\n</html>\n");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_markdown_are_escaped() {
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        let h =
            markdown("# T <b>\n\n| a | b |\n|---|---|\n| `<i>` | [x](javascript:alert(1)) |\n\n<script>x</script>\n");
        assert!(h.contains("<h3>T &lt;b&gt;</h3>"), "{h}");
        assert!(
            h.contains("<th>a</th>") && h.contains("<td><code>&lt;i&gt;</code></td>"),
            "{h}"
        );
        assert!(!h.contains("<script") && !h.contains("href=\"javascript"), "{h}");
        assert!(markdown("[d](https://e.org/a?b=1&c=2)").contains("href=\"https://e.org/a?b=1&amp;c=2\""));
    }

    #[test]
    fn base64_matches_rfc_4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn json_cannot_close_its_script() {
        let s = json_script("d", &serde_json::json!({"name": "</script><script>alert(1)"}));
        assert_eq!(s.matches("</script>").count(), 1, "{s}");
    }
}
