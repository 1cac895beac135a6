//! The text shard_drift compares, pure Rust: a schema's name written as
//! the placeholder `<schema>.` where it names something, so that a shard's
//! rows read as its template's (`with_placeholder`), and a function's
//! search_path line with the placeholder in it (`search_path_lines`).
//! Bytes in the database's encoding, as `sql_text` reads them.

use crate::sql_text::{find, ident_continue, split_list, truncate, Clip};

/// The line pg_get_functiondef prints for a function's stored search_path
/// `setting` (` SET search_path TO 'a', 'b'` and a newline: each name as
/// SplitGUCList reads it, as a literal), and the same line with
/// `'<schema>'` for each name that is `schema` as PostgreSQL reads it
/// (folded and truncated: `TD` is `td`). shard_drift compares a function
/// with the second, as create_shards gives each copy its own schema in
/// every such place. `None` for a malformed setting.
pub fn search_path_lines(setting: &[u8], schema: &[u8], clip: Clip) -> Option<(Vec<u8>, Vec<u8>)> {
    const HEAD: &[u8] = b" SET search_path TO ";
    let (mut printed, mut placeheld) = (HEAD.to_vec(), HEAD.to_vec());
    for (n, (name, quoted)) in split_list(setting)?.into_iter().enumerate() {
        if n > 0 {
            printed.extend_from_slice(b", ");
            placeheld.extend_from_slice(b", ");
        }
        let mut literal = vec![b'\''];
        for &c in &name {
            if c == b'\'' {
                literal.push(c);
            }
            literal.push(c);
        }
        literal.push(b'\'');
        let read = truncate(
            if quoted {
                name
            } else {
                name.to_ascii_lowercase()
            },
            clip,
        );
        placeheld.extend_from_slice(if read == schema {
            b"'<schema>'"
        } else {
            &literal
        });
        printed.extend_from_slice(&literal);
    }
    printed.push(b'\n');
    placeheld.push(b'\n');
    Some((printed, placeheld))
}

/// What `with_placeholder` writes for the schema's name.
const PLACEHOLDER: &[u8] = b"<schema>.";

/// The built-in types whose constants are names (`'insta7.t'::regclass`).
const REG_TYPES: &[&[u8]] = &[
    b"regclass",
    b"regcollation",
    b"regconfig",
    b"regdictionary",
    b"regnamespace",
    b"regoper",
    b"regoperator",
    b"regproc",
    b"regprocedure",
    b"regrole",
    b"regtype",
];

/// Text shard_drift compares (a definition as PostgreSQL's deparsers print
/// it, or a row of its own) with `<schema>.` for `prefix`, a schema's name
/// as a qualified name writes it (`quote_ident(name) || '.'`), where it
/// qualifies a name and only where a name starts (schema `t` leaves
/// `events_rest.at` alone): in the text; in the literal of a constant
/// that names an object (`nextval('insta7.orders_id_seq'::regclass)`):
/// one of a reg* type, or of a user's type (printed qualified), which may
/// be a domain over one, as the text does not tell; and anywhere in a
/// dollar-quoted function body, read as create_shards reads bodies
/// (`names_schema`). Never in a constant of another built-in type
/// (`'insta7.x'::text`, `'insta7.x'::tsvector`), nor in a literal of no
/// type (a trigger's argument, an enum's label), nor in a quoted name:
/// create_shards copies those as they are, so a shard's `DEFAULT
/// 'insta7.x'` is not its template's `DEFAULT 'tmpl.x'`, and a copy's
/// `'tmpl.x'` is its template's. (The deparsers write a literal as `'...'`
/// with quotes doubled, then its type after `::` but for a few types none
/// of which names anything, built-in types unqualified under shard_drift's
/// search_path; quote_literal as `E'...'` when it holds a backslash,
/// doubled too. A quote never closed is read as any other byte.)
pub fn with_placeholder(text: &[u8], prefix: &[u8]) -> Vec<u8> {
    requalified(text, prefix, PLACEHOLDER)
}

/// `text` with `replacement` for `prefix` wherever `with_placeholder`
/// writes the placeholder: create_shards moves a view's names qualified
/// with its template (those pg_catalog's hide) to the copy's schema, and a
/// foreign key's referenced table.
pub fn requalified(text: &[u8], prefix: &[u8], replacement: &[u8]) -> Vec<u8> {
    // (most text holds no spelling of the name: what both share, up to a
    // quote, which a literal doubles)
    let shared = prefix.split(|&c| c == b'\'').next().unwrap_or_default();
    if !shared.is_empty() && find(text, shared).is_none() {
        return text.to_vec();
    }
    let b = text;
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let starts = name_starts(b, i);
        if starts && !prefix.is_empty() && b[i..].starts_with(prefix) {
            out.extend_from_slice(replacement);
            i += prefix.len();
            continue;
        }
        let c = b[i];
        let escaped = starts && (c == b'E' || c == b'e') && b.get(i + 1) == Some(&b'\'');
        let end = if c == b'\'' || escaped {
            let open = i + usize::from(escaped);
            let (end, closed) = literal_end(b, open, escaped);
            if closed && names_follow(&b[end..]) {
                // (prefix and replacement as the literal writes them)
                let as_written = |text: &[u8]| {
                    let mut written = Vec::with_capacity(text.len());
                    for &p in text {
                        if p == b'\'' || (escaped && p == b'\\') {
                            written.push(p);
                        }
                        written.push(p);
                    }
                    written
                };
                out.extend_from_slice(&b[i..=open]);
                names_requalified(
                    &b[open + 1..end - 1],
                    &as_written(prefix),
                    &as_written(replacement),
                    &mut out,
                );
                out.push(b'\'');
                i = end;
                continue;
            }
            if closed {
                end
            } else {
                i + 1
            }
        } else if c == b'"' {
            quoted_name_end(b, i).unwrap_or(i + 1)
        } else if c == b'$' && starts {
            match dollar_quote(b, i) {
                Some((body, close, end)) => {
                    out.extend_from_slice(&b[i..body]);
                    names_requalified(&b[body..close], prefix, replacement, &mut out);
                    out.extend_from_slice(&b[close..end]);
                    i = end;
                    continue;
                }
                None => i + 1,
            }
        } else {
            i + 1
        };
        out.extend_from_slice(&b[i..end]);
        i = end;
    }
    out
}

/// Whether a name may start at `i`: not inside one, nor right after a quote
/// closing one.
fn name_starts(b: &[u8], i: usize) -> bool {
    i == 0 || !(ident_continue(b[i - 1]) || b[i - 1] == b'"')
}

/// `prefix` replaced in `b` wherever a name starts, quoted names left alone.
fn names_requalified(b: &[u8], prefix: &[u8], replacement: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < b.len() {
        if name_starts(b, i) && !prefix.is_empty() && b[i..].starts_with(prefix) {
            out.extend_from_slice(replacement);
            i += prefix.len();
        } else {
            let end = if b[i] == b'"' {
                quoted_name_end(b, i).unwrap_or(i + 1)
            } else {
                i + 1
            };
            out.extend_from_slice(&b[i..end]);
            i = end;
        }
    }
}

/// Past the string literal whose quote is at `open` (`''` inside it is a
/// quote; with `escaped`, a backslash escapes the next byte), and whether
/// it was closed (else: the end).
fn literal_end(b: &[u8], open: usize, escaped: bool) -> (usize, bool) {
    let mut i = open + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if escaped => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return (i + 1, true),
            _ => i += 1,
        }
    }
    (b.len(), false)
}

/// Past the quoted name whose quote is at `open` (`""` inside it is a
/// quote), if it is closed.
fn quoted_name_end(b: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    while i < b.len() {
        if b[i] == b'"' {
            if b.get(i + 1) == Some(&b'"') {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// Whether a literal followed by `rest` names something: a cast to a reg*
/// type or to a user's type, printed qualified (or an array of either).
fn names_follow(rest: &[u8]) -> bool {
    let Some(rest) = rest.strip_prefix(b"::") else {
        return false;
    };
    let first = if rest.first() == Some(&b'"') {
        quoted_name_end(rest, 0).unwrap_or(rest.len())
    } else {
        rest.iter().take_while(|&&c| ident_continue(c)).count()
    };
    rest.get(first) == Some(&b'.') || REG_TYPES.contains(&&rest[..first])
}

/// A dollar-quoted string starting at `i` (`$tag$ ... $tag$`, the tag
/// empty or a name without `$`): where its body starts, where its closing
/// tag starts (or the end, if none), and the end. `$1` is a parameter.
fn dollar_quote(b: &[u8], i: usize) -> Option<(usize, usize, usize)> {
    let tag_len = b[i + 1..]
        .iter()
        .take_while(|&&c| ident_continue(c) && c != b'$')
        .count();
    let close_at = i + 1 + tag_len;
    if b.get(i + 1).is_some_and(u8::is_ascii_digit) || b.get(close_at) != Some(&b'$') {
        return None;
    }
    let tag = &b[i..=close_at];
    let body = close_at + 1;
    Some(match find(&b[body..], tag) {
        Some(n) => (body, body + n, body + n + tag.len()),
        None => (body, b.len(), b.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql_text::{clip_utf8, quote_identifier};
    use proptest::prelude::*;

    #[test]
    fn search_path_lines_as_printed() {
        let lines = |setting: &str, schema: &str| {
            search_path_lines(setting.as_bytes(), schema.as_bytes(), &clip_utf8)
                .map(|(a, b)| (String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap()))
        };
        for (setting, schema, printed, placeheld) in [
            (
                "pg_catalog, tm",
                "tm",
                "'pg_catalog', 'tm'",
                "'pg_catalog', '<schema>'",
            ),
            (
                "TD, pg_catalog",
                "td",
                "'TD', 'pg_catalog'",
                "'<schema>', 'pg_catalog'",
            ),
            ("\"TD\", td", "td", "'TD', 'td'", "'TD', '<schema>'"),
            (
                "\"it's\", \"a\"\"b\"",
                "it's",
                "'it''s', 'a\"b'",
                "'<schema>', 'a\"b'",
            ),
            ("\"\"", "tm", "''", "''"),
            ("\"$user\", tm2", "tm", "'$user', 'tm2'", "'$user', 'tm2'"),
        ] {
            assert_eq!(
                lines(setting, schema),
                Some((
                    format!(" SET search_path TO {printed}\n"),
                    format!(" SET search_path TO {placeheld}\n")
                )),
                "{setting:?}"
            );
        }
        assert_eq!(lines("a,", "a"), None);
    }

    fn placeholder(text: &str, schema: &str) -> String {
        let prefix = format!("{}.", quote_identifier(schema));
        String::from_utf8(with_placeholder(text.as_bytes(), prefix.as_bytes())).unwrap()
    }

    #[test]
    fn requalified_where_the_placeholder_would_be() {
        let moved = |text: &str, from: &str, to: &str| {
            let (from, to) = (
                format!("{}.", quote_identifier(from)),
                format!("{}.", quote_identifier(to)),
            );
            String::from_utf8(requalified(text.as_bytes(), from.as_bytes(), to.as_bytes())).unwrap()
        };
        for (text, from, to, expected) in [
            // a view's name pg_catalog hides, and a regclass constant of one
            (
                " SELECT a, tm.upper(b) AS u FROM tm.pg_settings WHERE r = 'tm.pg_class'::regclass",
                "tm",
                "insta1",
                " SELECT a, insta1.upper(b) AS u FROM insta1.pg_settings WHERE r = 'insta1.pg_class'::regclass",
            ),
            // strings and quoted names as they are
            (
                " SELECT 'tm.x'::text AS \"tm.y\" FROM tm.t",
                "tm",
                "insta1",
                " SELECT 'tm.x'::text AS \"tm.y\" FROM insta1.t",
            ),
            // a foreign key's table; a column named like the text
            (
                "FOREIGN KEY (\"k REFERENCES tm.x\") REFERENCES tm.p(\"k REFERENCES tm.x\") ON DELETE CASCADE",
                "tm",
                "insta1",
                "FOREIGN KEY (\"k REFERENCES tm.x\") REFERENCES insta1.p(\"k REFERENCES tm.x\") ON DELETE CASCADE",
            ),
            // quoted both ways, a quote in a literal doubled
            (
                "\"T m\".v, 'T m.x'::regclass, '\"T m\".x'::regclass",
                "T m",
                "it's",
                "\"it's\".v, 'T m.x'::regclass, '\"it''s\".x'::regclass",
            ),
        ] {
            assert_eq!(moved(text, from, to), expected, "{text:?}");
        }
    }

    #[test]
    fn the_placeholder_stands_for_names_only() {
        for (text, schema, expected) in [
            // names, where one starts
            (
                "CREATE INDEX i ON insta7.t USING btree (a)",
                "insta7",
                "CREATE INDEX i ON <schema>.t USING btree (a)",
            ),
            (
                "(t.a + events_rest.at)",
                "t",
                "(<schema>.a + events_rest.at)",
            ),
            (
                "column x: insta7.state[] COLLATE insta7.c",
                "insta7",
                "column x: <schema>.state[] COLLATE <schema>.c",
            ),
            (
                "\"Insta 7\".orders, x\"Insta 7\".y",
                "Insta 7",
                "<schema>.orders, x\"Insta 7\".y",
            ),
            // a reg* constant names an object, as may one of a user's type
            // (a domain over regclass)
            (
                "nextval('insta7.s'::regclass)",
                "insta7",
                "nextval('<schema>.s'::regclass)",
            ),
            (
                "(tableoid <> ALL ('{insta7.a,insta7.b}'::regclass[]))",
                "insta7",
                "(tableoid <> ALL ('{<schema>.a,<schema>.b}'::regclass[]))",
            ),
            (
                "'insta7.f(integer)'::regprocedure",
                "insta7",
                "'<schema>.f(integer)'::regprocedure",
            ),
            ("'\"it''s\".t'::regclass", "it's", "'<schema>.t'::regclass"),
            (
                "'{insta7.users}'::public.regress_rel[]",
                "insta7",
                "'{<schema>.users}'::public.regress_rel[]",
            ),
            ("'insta7.x'::regrole", "insta7", "'<schema>.x'::regrole"),
            // a constant of another built-in type, a literal of no type, or
            // a quoted name, is copied as it is
            (
                "DEFAULT 'insta7.x'::text",
                "insta7",
                "DEFAULT 'insta7.x'::text",
            ),
            (
                "to_regclass('insta7.t'::text)",
                "insta7",
                "to_regclass('insta7.t'::text)",
            ),
            (
                "(('insta7.t'::text)::regclass)",
                "insta7",
                "(('insta7.t'::text)::regclass)",
            ),
            (
                "'insta7.x'::character varying, 'insta7.x'::\"char\"[], '''insta7.x'''::tsvector, 'insta7.x'::public.citext",
                "insta7",
                "'insta7.x'::character varying, 'insta7.x'::\"char\"[], '''insta7.x'''::tsvector, '<schema>.x'::public.citext",
            ),
            (
                "EXECUTE FUNCTION insta7.f('insta7.x')",
                "insta7",
                "EXECUTE FUNCTION <schema>.f('insta7.x')",
            ),
            (
                "'it''s insta7.x' || insta7.f()",
                "insta7",
                "'it''s insta7.x' || <schema>.f()",
            ),
            (
                "E'a\\'insta7.x' || insta7.f()",
                "insta7",
                "E'a\\'insta7.x' || <schema>.f()",
            ),
            (
                "\"a insta7.b\" insta7.c",
                "insta7",
                "\"a insta7.b\" <schema>.c",
            ),
            // a quote never closed is any other byte
            ("'insta7.x", "insta7", "'<schema>.x"),
            (
                "CREATE STATISTICS stats\" ON a, b FROM insta7.t",
                "insta7",
                "CREATE STATISTICS stats\" ON a, b FROM <schema>.t",
            ),
            // a function's body is code, its strings too (dynamic SQL)
            (
                "AS $function$ SELECT 'insta7.x' FROM insta7.t $function$ insta7.u",
                "insta7",
                "AS $function$ SELECT '<schema>.x' FROM <schema>.t $function$ <schema>.u",
            ),
            (
                "AS $$ insta7.t $$, $1 insta7.u",
                "insta7",
                "AS $$ <schema>.t $$, $1 <schema>.u",
            ),
            ("AS $f$ insta7.t", "insta7", "AS $f$ <schema>.t"),
            ("a$b$ 'insta7.x'", "insta7", "a$b$ 'insta7.x'"),
        ] {
            assert_eq!(placeholder(text, schema), expected, "{text:?}");
        }
    }

    proptest! {
        // Text without quotes or dollar signs: the placeholder wherever
        // the schema's name starts a qualified name, as shard_drift's
        // regular expression wrote it before
        // (`regexp_replace(text, '(^|[^[:alnum:]_$"])t\\.', '\\1<schema>.', 'g')`).
        #[test]
        fn unquoted_text_as_the_pattern_had_it(
            parts in prop::collection::vec(prop::sample::select(
                vec!["t.", "t", ".", "a", "_", " ", "(", "é", "1", ","]), 0..30)
        ) {
            let text = parts.concat();
            let b = text.as_bytes();
            let mut plain = Vec::new();
            let mut i = 0;
            while i < b.len() {
                let boundary = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] >= 0x80 || b"_$\"".contains(&b[i - 1]));
                if boundary && b[i..].starts_with(b"t.") {
                    plain.extend_from_slice(b"<schema>.");
                    i += 2;
                } else {
                    plain.push(b[i]);
                    i += 1;
                }
            }
            prop_assert_eq!(with_placeholder(b, b"t."), plain);
        }

        // A string, of a built-in type but a reg* one or of none, is
        // copied as it is, and what follows it is read as before.
        #[test]
        fn a_string_is_copied(
            inner in "[a-z7 .'\"$]{0,20}",
            cast in prop::sample::select(vec!["::text", "::name", "::character varying", "::jsonb[]", "::tsvector", ""])
        ) {
            let literal = format!("'{}'", inner.replace('\'', "''"));
            let text = format!("{literal}{cast} insta7.t");
            prop_assert_eq!(placeholder(&text, "insta7"), format!("{literal}{cast} <schema>.t"));
        }
    }
}
