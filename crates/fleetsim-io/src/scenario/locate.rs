//! Maps a key path (`workload.groups[0].turns`) back to the line and column where it is
//! written, using `toml_edit`'s spans. Best effort: the deepest existing key on the path.

use toml_edit::{Document, Item, Table, Value};

use super::overrides::{Seg, segments};

/// 1-based line and column of byte offset `pos` in `text`.
pub fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(text.len());
    let before = &text[..pos];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// A position in the document while walking a path.
#[derive(Clone, Copy)]
enum Node<'a> {
    Item(&'a Item),
    Value(&'a Value),
    Table(&'a Table),
}

type Span = std::ops::Range<usize>;

fn step<'a>(node: Node<'a>, seg: &Seg) -> Option<(Node<'a>, Option<Span>)> {
    match (node, seg) {
        (Node::Item(Item::Table(t)) | Node::Table(t), Seg::Key(k)) => t
            .get_key_value(k)
            .map(|(key, it)| (Node::Item(it), key.span().or_else(|| it.span()))),
        (Node::Item(Item::Value(v)) | Node::Value(v), seg) => match (v, seg) {
            (Value::InlineTable(t), Seg::Key(k)) => t
                .get_key_value(k)
                .map(|(key, v)| (Node::Item(v), key.span().or_else(|| v.span()))),
            (Value::Array(a), Seg::Index(i)) => a.get(*i).map(|v| (Node::Value(v), v.span())),
            _ => None,
        },
        (Node::Item(Item::ArrayOfTables(a)), Seg::Index(i)) => a.get(*i).map(|t| (Node::Table(t), t.span())),
        _ => None,
    }
}

/// Line and column of the deepest key of `path` present in `text`.
pub fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let doc = Document::parse(text).ok()?;
    let mut best: Option<Span> = None;
    let mut node = Node::Item(doc.as_item());
    for seg in segments(path).ok()? {
        let Some((next, span)) = step(node, &seg) else {
            break;
        };
        if span.is_some() {
            best = span;
        }
        node = next;
    }
    best.map(|s| line_col(text, s.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "seed = 1\n[router]\nengine_stats_interval_s = 10\n[router.policy]\nkind = \"x\"\n\n[[workload.groups]]\nname = \"a\"\n[[workload.groups]]\nname = \"b\"\narrival = { kind = \"burst\", at_s = 3 }\n";

    #[test]
    fn finds_keys_tables_and_array_entries() {
        assert_eq!(locate(TEXT, "router.engine_stats_interval_s"), Some((3, 1)));
        assert_eq!(locate(TEXT, "router.policy.kind"), Some((5, 1)));
        assert_eq!(locate(TEXT, "workload.groups[1].name"), Some((10, 1)));
        assert_eq!(locate(TEXT, "workload.groups[1].arrival.at_s"), Some((11, 29)));
        // Missing leaf: the deepest existing key.
        assert_eq!(locate(TEXT, "router.policy.band"), locate(TEXT, "router.policy"));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        // A path that cannot be parsed has no location (and does not panic).
        assert_eq!(locate(TEXT, "router.x[0]]"), None);
    }
}
