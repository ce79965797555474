//! User text inside messages. Every error is one line (docs/guarantees.md), but file names,
//! flag values, column names and YAML keys come from the user and may hold a newline, a
//! carriage return, a tab or a terminal escape. [`quote`] and [`escape`] are the one place
//! such text is made printable: control characters (and the Unicode line and paragraph
//! separators) are written as Rust escapes (`\n`, `\u{1b}`), everything else is kept as is
//! (`ü` stays `ü`). [`one_line`] applies the same rule to a whole message, as the last
//! step before it is printed.
//!
//! Owns: the escaping of user text in messages. Invariant: the result never holds a line
//! break, and text without control characters is returned unchanged.

use std::borrow::Cow;

/// Whether `c` is written escaped: a control character or a Unicode line break.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `s` with control characters escaped (`a\nb` for a newline between `a` and `b`);
/// borrowed when there is nothing to escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if needs_escape(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` in backquotes with control characters escaped: ``"`a\nb`"``.
pub fn quote(s: &str) -> String {
    format!("`{}`", escape(s))
}

/// A path in backquote-free form, escaped (paths are named bare in messages: `f.csv:3: ...`).
pub fn path(p: &std::path::Path) -> String {
    escape(&p.display().to_string()).into_owned()
}

/// A whole message made one line: the same escaping as [`escape`], so a line break that
/// reached a message through text not quoted with [`quote`] cannot split it.
pub fn one_line(msg: &str) -> Cow<'_, str> {
    escape(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(quote("a\nb"), "`a\\nb`");
        assert_eq!(escape("tab\there\r"), "tab\\there\\r");
        assert_eq!(escape("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(escape("line\u{2028}sep"), "line\\u{2028}sep");
        assert!(matches!(escape("über `x` 'y' \"z\""), Cow::Borrowed(_)));
        assert_eq!(escape("über"), "über");
        assert!(!one_line("a\nb\r\nc").contains(['\n', '\r']));
        assert_eq!(path(std::path::Path::new("dir\n/x.csv")), "dir\\n/x.csv");
    }
}
