//! Reading SQL text taken from the catalogs, pure Rust: the shard helpers
//! never paste such text into a statement. A stored `search_path` is split
//! the way PostgreSQL splits it and each name is requoted; a function body is
//! scanned for names qualified with a schema, token by token.
//!
//! Text is bytes in the database's encoding, never converted: every byte
//! that matters to the scan (quotes, commas, dots, white space, ASCII
//! letters) is ASCII, which every server encoding keeps as itself. Where a
//! long name is cut, the caller says where (`Clip`: PostgreSQL's
//! `pg_mbcliplen` for the database's encoding; tests cut UTF-8).

/// The longest identifier PostgreSQL keeps (NAMEDATALEN - 1); longer ones are
/// truncated by the parser.
pub const MAX_IDENTIFIER_BYTES: usize = 63;

/// Where to cut a name longer than `MAX_IDENTIFIER_BYTES`: the length of its
/// longest prefix of whole characters that fits.
pub type Clip<'a> = &'a dyn Fn(&[u8]) -> usize;

pub(crate) fn is_space(b: u8) -> bool {
    // scanner_isspace: what the SQL lexer takes for white space.
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

pub(crate) fn truncate(mut name: Vec<u8>, clip: Clip) -> Vec<u8> {
    if name.len() > MAX_IDENTIFIER_BYTES {
        let end = clip(&name);
        name.truncate(end);
    }
    name
}

/// `Clip` for UTF-8: back from byte 63 to the start of a character.
pub fn clip_utf8(name: &[u8]) -> usize {
    let mut end = MAX_IDENTIFIER_BYTES.min(name.len());
    while end > 0 && end < name.len() && (name[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    end
}

/// The names of a comma-separated identifier list as PostgreSQL reads a list
/// setting such as `search_path` (SplitIdentifierString): a name in double
/// quotes is taken as written (`""` is one quote, and `""` alone an empty
/// name, as `SET search_path = ''` stores it), any other is folded to lower
/// case (ASCII letters) and ends at a comma or white space; names are
/// truncated to 63 bytes. `None` for a malformed list (an unterminated quote,
/// an empty unquoted name, text after a name that is not a comma), which
/// PostgreSQL would refuse too. An empty list is `Some(vec![])`.
pub fn split_identifier_list(list: &[u8], clip: Clip) -> Option<Vec<Vec<u8>>> {
    Some(
        split_list(list)?
            .into_iter()
            .map(|(name, quoted)| {
                truncate(
                    if quoted {
                        name
                    } else {
                        name.to_ascii_lowercase()
                    },
                    clip,
                )
            })
            .collect(),
    )
}

/// A list's names as written, quotes taken off (`""` inside is one quote),
/// each with whether it was quoted: what PostgreSQL's SplitGUCList gives,
/// and what SplitIdentifierString folds and truncates.
pub(crate) fn split_list(list: &[u8]) -> Option<Vec<(Vec<u8>, bool)>> {
    let b = list;
    let mut i = 0;
    let skip_space = |mut i: usize| {
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        i
    };
    i = skip_space(i);
    let mut names = Vec::new();
    if i == b.len() {
        return Some(names);
    }
    loop {
        let name = if b[i] == b'"' {
            let mut name = Vec::new();
            i += 1;
            loop {
                match b.get(i) {
                    None => return None,
                    Some(b'"') if b.get(i + 1) == Some(&b'"') => {
                        name.push(b'"');
                        i += 2;
                    }
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(&c) => {
                        name.push(c);
                        i += 1;
                    }
                }
            }
            (name, true)
        } else {
            let start = i;
            while i < b.len() && b[i] != b',' && !is_space(b[i]) {
                i += 1;
            }
            if i == start {
                return None;
            }
            (b[start..i].to_vec(), false)
        };
        names.push(name);
        i = skip_space(i);
        match b.get(i) {
            None => return Some(names),
            Some(b',') => i = skip_space(i + 1),
            Some(_) => return None,
        }
        if i == b.len() {
            return None; // a trailing comma: an empty name
        }
    }
}

/// `name` as it must be written in SQL: bare when it is lower case letters,
/// digits and underscores not starting with a digit, else in double quotes.
/// (PostgreSQL's quote_ident also quotes keywords; SQL is built with
/// quote_ident itself. This is for tests.)
#[cfg(test)]
pub fn quote_identifier(name: &str) -> String {
    let plain = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

pub(crate) fn ident_continue(c: u8) -> bool {
    ident_start(c) || c.is_ascii_digit() || c == b'$'
}

/// Skips white space and comments (`-- ...` to the end of the line, `/* */`
/// nested as PostgreSQL nests them) from `i`.
fn skip_space_and_comments(b: &[u8], mut i: usize) -> usize {
    loop {
        if i < b.len() && is_space(b[i]) {
            i += 1;
        } else if b[i..].starts_with(b"--") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else {
            return i;
        }
    }
}

/// Whether `body` (a function's source) names `schema` as the qualifier of a
/// name: an identifier spelling `schema` (unquoted and folded to lower case,
/// or in double quotes exactly), then a dot, with white space or comments
/// allowed between. String literals and comments are scanned as code too, so
/// dynamic SQL (`EXECUTE 'SELECT * FROM tmpl.t'`) is caught; a name that
/// merely contains `schema` (`evt.id` for schema `t`) is not.
pub fn names_schema(body: &[u8], schema: &[u8], clip: Clip) -> bool {
    let b = body;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let token = if c == b'"' {
            let mut name = Vec::new();
            i += 1;
            while i < b.len() {
                if b[i] == b'"' {
                    if b.get(i + 1) == Some(&b'"') {
                        name.push(b'"');
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                name.push(b[i]);
                i += 1;
            }
            Some(name)
        } else if ident_start(c) {
            let start = i;
            while i < b.len() && ident_continue(b[i]) {
                i += 1;
            }
            Some(b[start..i].to_ascii_lowercase())
        } else if c.is_ascii_digit() || c == b'$' {
            // a number or a parameter ($1) or a dollar-quote tag's start: not a name
            i += 1;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            None
        } else {
            i += 1;
            None
        };
        if let Some(name) = token {
            if truncate(name, clip) == schema {
                let next = skip_space_and_comments(b, i);
                if b.get(next) == Some(&b'.') {
                    return true;
                }
            }
        }
    }
    false
}

/// Where `needle` first starts in `haystack`.
pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// If a column default's node tree, as `without_locations` leaves it, is
/// a call of next_id (the function of OID `next_id`) on two constants,
/// neither NULL, an integer and a regclass: the shard number and the
/// sequence's OID it draws from. shard_drift keys and prints such a
/// default with placeholders for them, without deparsing it (six of the
/// ten defaults of a rich shard), once they are checked to be the shard's
/// own. (A by-value constant's text is its Datum's eight bytes, in the
/// machine's order, each a signed decimal.)
pub fn next_id_call(tree: &[u8], next_id: u32) -> Option<(i32, u32)> {
    const ARGS: &[u8] = b" :args (";
    let head = format!("{{FUNCEXPR :funcid {next_id} ");
    let rest = tree.strip_prefix(head.as_bytes())?;
    // (the fields before :args are scalars)
    let at = find(rest, ARGS)?;
    if rest[..at].contains(&b'{') {
        return None;
    }
    let mut args = &rest[at + ARGS.len()..];
    let mut values = [0u32; 2];
    for (n, constant) in [&b"{CONST :consttype 23 "[..], b"{CONST :consttype 2205 "]
        .into_iter()
        .enumerate()
    {
        let fields = args.strip_prefix(constant)?;
        let end = fields.iter().position(|b| *b == b'}')?;
        values[n] = const_value(&fields[..end])?;
        args = &fields[end + 1..];
        if n == 0 {
            args = args.strip_prefix(b" ")?;
        }
    }
    (args == b")}").then_some((values[0] as i32, values[1]))
}

/// The value of a 4-byte by-value constant, from the fields of its CONST
/// node after its type (none if NULL or if a node is nested): its Datum's
/// eight bytes, in the machine's order, each a signed decimal.
fn const_value(fields: &[u8]) -> Option<u32> {
    const VALUE: &[u8] = b" :constvalue 4 [ ";
    if fields.contains(&b'{') || find(fields, b" :constisnull false ").is_none() {
        return None;
    }
    let v = find(fields, VALUE)? + VALUE.len();
    let bytes: Vec<u8> = std::str::from_utf8(fields[v..].strip_suffix(b" ]")?)
        .ok()?
        .split(' ')
        .map(|b| b.parse::<i8>().map(|b| b as u8))
        .collect::<Result<_, _>>()
        .ok()?;
    Some(u64::from_ne_bytes(<[u8; 8]>::try_from(bytes.as_slice()).ok()?) as u32)
}

/// The OIDs of a node tree's regclass constants (not NULL), in order. A
/// CHECK's or a generated column's that names its own table is the one
/// reference PostgreSQL records no dependency for (on the table as a
/// whole: it records its columns), and LIKE would copy it as it is, the
/// template's table in every copy.
pub fn tree_regclasses(tree: &[u8]) -> Vec<u32> {
    const CONST: &[u8] = b"{CONST :consttype 2205 ";
    let mut oids = Vec::new();
    let mut i = 0;
    while let Some(at) = find(&tree[i..], CONST) {
        let fields = &tree[i + at + CONST.len()..];
        let end = fields
            .iter()
            .position(|b| *b == b'}')
            .unwrap_or(fields.len());
        oids.extend(const_value(&fields[..end]));
        i += at + CONST.len();
    }
    oids
}

/// Where in its statement's text a node was written: a token's position
/// (` :location N`), which moves with the length of the schema's name the
/// statement was written with, and a query's own (` :stmt_location N
/// :stmt_len N`), which PostgreSQL 15 keeps in a view's query as the view
/// was written (later versions store neither), so that no copy of a view
/// made by hand matched it.
const POSITION_FIELDS: [&[u8]; 3] = [b" :location ", b" :stmt_location ", b" :stmt_len "];

/// A node tree's text (pg_node_tree) without its positions
/// (`POSITION_FIELDS`): what shard_drift compares of an index's, a
/// constraint's, a trigger's or a policy's expression. The same as
/// `regexp_replace(tree, ' :(location|stmt_location|stmt_len) -?[0-9]+',
/// '', 'g')`, at a tenth of its cost (a regular expression's automaton is
/// built at each call).
pub fn without_locations(tree: &[u8]) -> Vec<u8> {
    cut_fields(tree, &POSITION_FIELDS).0
}

/// A view's query tree (pg_rewrite.ev_action) as shard_drift keys it:
/// without positions and without the OIDs of the relations it reads (a
/// range table entry's and its permissions' ` :relid N`, and ` :resorigtbl
/// N`, the table a column of its own comes from), which `tree_relids`
/// gives in their order. Two views print alike, their schemas' names
/// aside, when these trees are equal and each relation is, in each view's
/// own schema, the same name (or the same relation, elsewhere): every other
/// object a tree names, it names by OID, and a difference there is a
/// difference of the trees. (A string in a tree has its spaces escaped, so
/// ` :relid ` is a field, never text.)
pub fn without_relids(tree: &[u8]) -> Vec<u8> {
    cut_fields(tree, &[RELATION_FIELDS, &POSITION_FIELDS].concat()).0
}

/// The OIDs of the relations a query tree names (0 for a column that is
/// not a table's), in order; see `without_relids`.
pub fn tree_relids(tree: &[u8]) -> Vec<u32> {
    cut_fields(tree, RELATION_FIELDS)
        .1
        .into_iter()
        .filter_map(|n| u32::try_from(n).ok())
        .collect()
}

const RELATION_FIELDS: &[&[u8]] = &[b" :relid ", b" :resorigtbl "];

/// The type of each constant in a node tree (` :consttype N`), then of
/// each empty ARRAY[] (an ARRAYEXPR's ` :array_typeid N` when its
/// ` :elements` are `<>`): what PostgreSQL may record no dependency for
/// in a CHECK's, an index's, a trigger's or a policy's expression. A
/// constant's value can hold OIDs (a `regclass[]`, a row value), and an
/// empty ARRAY[] has no element to depend through; shard_drift looks
/// those types up. (`{` in a string is escaped: a node starts a node.)
pub fn tree_const_types(tree: &[u8]) -> Vec<u32> {
    const ARRAY: &[u8] = b"{ARRAYEXPR :array_typeid ";
    const ELEMENTS: &[u8] = b" :elements ";
    let mut types: Vec<u32> = cut_fields(tree, &[b" :consttype "])
        .1
        .into_iter()
        .filter_map(|n| u32::try_from(n).ok())
        .collect();
    let mut i = 0;
    while let Some(at) = find(&tree[i..], ARRAY) {
        let start = i + at + ARRAY.len();
        let digits = tree[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        // (the fields before :elements are scalars: the next one is its own)
        let rest = &tree[start + digits..];
        let empty =
            find(rest, ELEMENTS).is_some_and(|e| rest[e + ELEMENTS.len()..].starts_with(b"<>"));
        if let (true, Ok(Ok(n))) = (
            empty && digits > 0,
            std::str::from_utf8(&tree[start..start + digits]).map(str::parse::<u32>),
        ) {
            types.push(n);
        }
        i = start;
    }
    types
}

/// Whether a query tree, as `without_relids` leaves it, may name an
/// object of a user's by OID: an integer of FirstNormalObjectId (16384)
/// or more in any field or OID list but those that hold no OID (type
/// modifiers, a constant's length, a statement's length and position,
/// integer lists and bitmapsets), or a constant of any type but the
/// scalars below, whose values hold no OID (a regclass holds one and
/// prints it as a name; so can a catalog's row type, `'(...)'::pg_amproc`).
/// shard_drift takes no shard's view for a template view whose tree does:
/// the same OID in both trees is one object, printed with the template's
/// schema in one and not the other. (A token starting with a digit inside
/// a string or a name is written after a backslash, so it never stands
/// alone; a field not listed here can only make this say yes.)
pub fn names_objects(tree: &[u8]) -> bool {
    const FIRST_NORMAL_OBJECT_ID: u64 = 16384;
    // bool, bytea, char, name, int8, int2, int4, text, oid (printed as a
    // number), json, cidr, float4, float8, unknown, money, macaddr, inet,
    // bpchar, varchar, date, time, timestamp, timestamptz, interval,
    // timetz, bit, varbit, numeric, uuid, jsonb, and their arrays
    // (pg_type.h)
    const SCALAR_TYPES: [u64; 50] = [
        16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 650, 700, 701, 705, 790, 829, 869, 1042, 1043,
        1082, 1083, 1114, 1184, 1186, 1266, 1560, 1562, 1700, 2950, 3802, 1000, 1001, 1002, 1003,
        1016, 1005, 1007, 1009, 1028, 199, 1021, 1022, 1014, 1015, 1182, 1115, 1185, 1187, 1231,
        3807,
    ];
    let no_oid = |field: &[u8]| {
        field
            .to_ascii_lowercase()
            .windows(6)
            .any(|w| w == b"typmod")
            || matches!(field, b"constvalue" | b"stmt_len" | b"stmt_location")
    };
    let mut field: &[u8] = b"";
    let mut list = 0u8;
    let mut i = 0;
    while i < tree.len() {
        let b = tree[i];
        if b == b':' && i > 0 && tree[i - 1] == b' ' {
            let name = tree[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            field = &tree[i + 1..i + 1 + name];
            list = 0;
            i += 1 + name;
            continue;
        }
        if b == b'('
            && matches!(tree.get(i + 1), Some(b'i' | b'o' | b'b' | b'x'))
            && tree.get(i + 2) == Some(&b' ')
        {
            list = tree[i + 1];
            i += 3;
            continue;
        }
        if b == b')' {
            list = 0;
        }
        if !b.is_ascii_digit() {
            i += 1;
            continue;
        }
        let end = i + tree[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        let standalone = (i == 0 || matches!(tree[i - 1], b' ' | b'('))
            && (end == tree.len() || matches!(tree[end], b' ' | b')' | b'}'));
        if standalone && !matches!(list, b'i' | b'b' | b'x') && !no_oid(field) {
            // (past u64: past any OID's reach too)
            let n = std::str::from_utf8(&tree[i..end])
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
                .unwrap_or(u64::MAX);
            if n >= FIRST_NORMAL_OBJECT_ID || (field == b"consttype" && !SCALAR_TYPES.contains(&n))
            {
                return true;
            }
        }
        i = end;
    }
    false
}

/// `tree` without each of `tokens` (each ` :<field> `) followed by an
/// integer (the token and the integer cut), and those integers in order.
/// A token followed by anything else is kept. (Tokens are looked for only
/// where a field starts, and the rest copied a run at a time: this runs
/// over every view's and constraint's tree of thousands of shards.)
fn cut_fields(tree: &[u8], tokens: &[&[u8]]) -> (Vec<u8>, Vec<i64>) {
    let mut out = Vec::with_capacity(tree.len());
    let mut values = Vec::new();
    let mut copied = 0;
    let mut i = 0;
    while i + 1 < tree.len() {
        if tree[i] != b' ' || tree[i + 1] != b':' {
            i += 1;
            continue;
        }
        let cut = tokens.iter().find_map(|token| {
            let mut j = i + token.len();
            if !tree[i..].starts_with(token) {
                return None;
            }
            let negative = tree.get(j) == Some(&b'-');
            if negative {
                j += 1;
            }
            let digits = tree[j..].iter().take_while(|b| b.is_ascii_digit()).count();
            (digits > 0).then(|| {
                let n = std::str::from_utf8(&tree[j..j + digits])
                    .ok()
                    .and_then(|d| d.parse::<i64>().ok())
                    .map_or(i64::MAX, |n| if negative { -n } else { n });
                (j + digits, n)
            })
        });
        match cut {
            Some((end, n)) => {
                out.extend_from_slice(&tree[copied..i]);
                values.push(n);
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    out.extend_from_slice(&tree[copied..]);
    (out, values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn node_trees_without_locations() {
        for (tree, expected) in [
            (
                "{OPEXPR :opno 1755 :location 38 :args ({VAR :varno 1 :location -1})}",
                "{OPEXPR :opno 1755 :args ({VAR :varno 1})}",
            ),
            ("{CONST :location 7}", "{CONST}"),
            // (a query's own position, as PostgreSQL 15 keeps it)
            ("{QUERY :stmt_location 0 :stmt_len 36}", "{QUERY}"),
            // (not a position: kept, as the regular expression keeps it)
            (" :location x", " :location x"),
            (" :location -", " :location -"),
            (":location 5", ":location 5"),
            ("", ""),
        ] {
            assert_eq!(
                String::from_utf8(without_locations(tree.as_bytes())).unwrap(),
                expected,
                "{tree}"
            );
        }
    }

    #[test]
    fn view_trees_without_relids() {
        // (PostgreSQL 16's form: a range table entry and its permissions)
        let tree = "({QUERY :rtable ({RANGETBLENTRY :eref {ALIAS :aliasname o :colnames (\"id\" \"a\\ :relid\\ 5\")} \
                    :rtekind 0 :relid 16523 :relkind r :location 14}) \
                    :rteperminfos ({RTEPERMISSIONINFO :relid 16523 :inh true}) \
                    :jointree {FROMEXPR :fromlist ({RANGETBLREF :rtindex 1}) :quals {OPEXPR :opno 96 :location 40}} \
                    :targetList ({TARGETENTRY :expr {VAR :varno 1 :varattno 1 :location 7} :resno 1 \
                    :resorigtbl 16523 :resorigcol 1} {TARGETENTRY :resno 2 :resorigtbl 0 :resorigcol 0})})";
        assert_eq!(tree_relids(tree.as_bytes()), [16523, 16523, 16523, 0]);
        let cut = String::from_utf8(without_relids(tree.as_bytes())).unwrap();
        assert!(
            !cut.contains("16523") && !cut.contains(":location "),
            "{cut}"
        );
        // (an escaped string that reads like the field: kept)
        assert!(cut.contains("\"a\\ :relid\\ 5\""), "{cut}");
        assert!(cut.contains(":rtekind 0 :relkind r}"), "{cut}");
        assert!(cut.contains(":resno 1 :resorigcol 1}"), "{cut}");
        // (PostgreSQL 15 keeps the statement's position as written)
        let written = |at: &str, len: &str| {
            without_relids(
                format!("({{QUERY :commandType 1 :stmt_location {at} :stmt_len {len}}})")
                    .as_bytes(),
            )
        };
        assert_eq!(written("0", "36"), written("-1", "0"));
        assert_eq!(written("0", "36"), b"({QUERY :commandType 1})");
        for (tree, relids) in [
            (" :relid 4294967295", vec![u32::MAX]),
            (" :relid 4294967296", vec![]),
            (" :relid x", vec![]),
            (":relid 5", vec![]),
            ("", vec![]),
        ] {
            assert_eq!(tree_relids(tree.as_bytes()), relids, "{tree}");
        }
    }

    #[test]
    fn view_trees_that_name_objects() {
        for (tree, names) in [
            (
                "{FUNCEXPR :funcid 2108 :funcresulttype 1700 :args <>}",
                false,
            ),
            ("{FUNCEXPR :funcid 16390 :funcresulttype 16}", true),
            ("{VAR :vartype 16401}", true),
            ("{SORTGROUPCLAUSE :eqop 96 :sortop 97} (o 23 16405)", true),
            (
                "{CONST :consttype 2205 :constvalue 4 [ 1 64 0 0 0 0 0 0 ]}",
                true,
            ),
            ("{CONST :consttype 2210 :constlen -1}", true),
            (
                "{CONST :consttype 23 :constvalue 4 [ 5 0 0 0 0 0 0 0 ]}",
                false,
            ),
            (
                "{CONST :consttype 25 :consttypmod -1 :constcollid 100}",
                false,
            ),
            ("{CONST :consttype 1231 :consttypmod -1}", false),
            // (pg_amproc's row type on 18: its regproc fields are OIDs; aclitem)
            ("{CONST :consttype 10019 :constlen -1}", true),
            ("{CONST :consttype 1033 :constlen 16}", true),
            // (inside names and strings: never alone)
            (
                "{ALIAS :aliasname \\16400 :colnames (\"a\\ 16400\")}",
                false,
            ),
            // (no OID there)
            ("{VAR :vartype 1700 :vartypmod 786438 :varcollid 0}", false),
            (
                "{RANGETBLENTRY :coltypes (o 1700) :coltypmods (i 786438) :colcollations (o 0)}",
                false,
            ),
            ("{QUERY :stmt_location 20000 :stmt_len 17000}", false),
            (
                "{CONST :consttype 25 :constlen -1 :constbyval false :constvalue 20004 [ 0 ]}",
                false,
            ),
            ("{RTEPERMISSIONINFO :selectedCols (b 9 10)}", false),
            (" :typmod 16384}", false),
            ("", false),
        ] {
            assert_eq!(names_objects(tree.as_bytes()), names, "{tree}");
        }
    }

    #[test]
    fn constant_types_of_a_tree() {
        // (PostgreSQL 18's text of CHECK (tableoid <> ALL ('{o}'::regclass[]))
        // and of CHECK (cardinality(ARRAY[]::e[]) = 0))
        let regarr = "{SCALARARRAYOPEXPR :opno 608 :args ({VAR :varno 1 :varattno -6 :vartype 26} \
                      {ARRAYCOERCEEXPR :arg {CONST :consttype 2210 :consttypmod -1 :constlen -1 \
                      :constvalue 28 [ 112 0 0 0 1 0 0 0 ]} :resulttype 1028}) :location -1}";
        assert_eq!(tree_const_types(regarr.as_bytes()), [2210]);
        let empty = "{OPEXPR :opno 96 :args ({FUNCEXPR :funcid 2176 :args ({ARRAYEXPR :array_typeid 16385 \
                     :array_collid 0 :element_typeid 16386 :elements <> :multidims false :location -1})} \
                     {CONST :consttype 23 :constvalue 4 [ 0 0 0 0 0 0 0 0 ]})}";
        assert_eq!(tree_const_types(empty.as_bytes()), [23, 16385]);
        for (tree, types) in [
            // (an array with elements: their types are the constants')
            (
                "{ARRAYEXPR :array_typeid 16385 :element_typeid 16386 :elements ({CONST :consttype 16386})}",
                vec![16386],
            ),
            (
                "{ARRAYEXPR :array_typeid 1007 :elements <>} {ARRAYEXPR :array_typeid 1009 :elements <>}",
                vec![1007, 1009],
            ),
            // (in a string, a node's brace is escaped)
            ("{ALIAS :aliasname a\\{ARRAYEXPR\\ :array_typeid\\ 5}", vec![]),
            ("{ARRAYEXPR :array_typeid x :elements <>}", vec![]),
            ("{ARRAYEXPR :array_typeid 4294967296 :elements <>}", vec![]),
            ("{ARRAYEXPR :array_typeid 7", vec![]),
            ("", vec![]),
        ] {
            assert_eq!(tree_const_types(tree.as_bytes()), types, "{tree}");
        }
    }

    #[test]
    fn next_id_calls_as_stored() {
        // (PostgreSQL 18's pg_attrdef.adbin of next_id(401, 'insta401.orders_id_seq'),
        // the sequence's OID 17687, without positions; next_id's OID 17003;
        // a little-endian machine's bytes)
        let call = |shard: &str, seq: &str| {
            format!(
                "{{FUNCEXPR :funcid 17003 :funcresulttype 20 :funcretset false :funcvariadic false \
                 :funcformat 0 :funccollid 0 :inputcollid 0 :args ({shard} {seq})}}"
            )
        };
        let constant = |ty: u32, datum: u64| {
            let bytes: Vec<String> = datum
                .to_ne_bytes()
                .iter()
                .map(|b| (*b as i8).to_string())
                .collect();
            format!(
                "{{CONST :consttype {ty} :consttypmod -1 :constcollid 0 :constlen 4 :constbyval true \
                 :constisnull false :constvalue 4 [ {} ]}}",
                bytes.join(" ")
            )
        };
        let shard = constant(23, 401);
        let seq = constant(2205, 17687);
        assert_eq!(
            next_id_call(call(&shard, &seq).as_bytes(), 17003),
            Some((401, 17687))
        );
        // (a negative shard number, as stored: sign-extended)
        assert_eq!(
            next_id_call(call(&constant(23, (-5i64) as u64), &seq).as_bytes(), 17003),
            Some((-5, 17687))
        );
        if cfg!(target_endian = "little") {
            let stored =
                "{CONST :consttype 23 :consttypmod -1 :constcollid 0 :constlen 4 :constbyval true \
                          :constisnull false :constvalue 4 [ -111 1 0 0 0 0 0 0 ]}";
            assert_eq!(
                next_id_call(call(stored, &seq).as_bytes(), 17003),
                Some((401, 17687))
            );
        }
        let null_seq =
            "{CONST :consttype 2205 :consttypmod -1 :constcollid 0 :constlen 4 :constbyval true \
                        :constisnull true :constvalue <>}";
        let short_seq = seq.replace(" 0 0 0 0 ]", " ]");
        let cast_shard = format!("{{FUNCEXPR :funcid 481 :funcresulttype 23 :args ({shard})}}");
        for (tree, next_id) in [
            // another function, or next_id's OID another
            (call(&shard, &seq), 17004),
            (call(&shard, &seq).replace("17003", "1700"), 17003),
            // not two constants of those types, or one NULL or misread
            (call(&seq, &shard), 17003),
            (call(&shard, null_seq), 17003),
            (call(&shard, &short_seq), 17003),
            (call(&cast_shard, &seq), 17003),
            (call(&shard, &format!("{seq} {seq}")), 17003),
            (call(&shard, "").replace(" )", ")"), 17003),
            // more than the call
            (
                format!(
                    "{{OPEXPR :opno 684 :args ({} {shard})}}",
                    call(&shard, &seq)
                ),
                17003,
            ),
            (call(&shard, &seq) + " ", 17003),
            (call(&shard, &seq).replace(" :args", " :x {A} :args"), 17003),
            (String::new(), 17003),
        ] {
            assert_eq!(next_id_call(tree.as_bytes(), next_id), None, "{tree}");
        }
    }

    fn split(list: &str) -> Option<Vec<String>> {
        split_identifier_list(list.as_bytes(), &clip_utf8).map(|v| {
            v.into_iter()
                .map(|n| String::from_utf8(n).expect("UTF-8 in, UTF-8 out"))
                .collect()
        })
    }

    fn names(list: &str) -> Option<Vec<&str>> {
        split(list).map(|v| v.into_iter().map(|s| &*s.leak()).collect())
    }

    fn names_schema(body: &str, schema: &str) -> bool {
        super::names_schema(body.as_bytes(), schema.as_bytes(), &clip_utf8)
    }

    #[test]
    fn splits_a_search_path_as_postgresql_does() {
        assert_eq!(names(""), Some(vec![]));
        assert_eq!(names("  "), Some(vec![]));
        assert_eq!(names("tmpl, public"), Some(vec!["tmpl", "public"]));
        assert_eq!(names("\"$user\", public"), Some(vec!["$user", "public"]));
        assert_eq!(names("Tmpl,\"Tmpl\""), Some(vec!["tmpl", "Tmpl"]));
        assert_eq!(names("\"a,b\" , \"c\"\"d\""), Some(vec!["a,b", "c\"d"]));
        assert_eq!(
            names("pg_catalog,pg_temp"),
            Some(vec!["pg_catalog", "pg_temp"])
        );
        // issue 23, case 2: the rest of the setting is one (odd) name, never SQL
        assert_eq!(
            names("tmpl, x;ALTER/**/ROLE/**/app/**/SUPERUSER;--"),
            Some(vec!["tmpl", "x;alter/**/role/**/app/**/superuser;--"])
        );
    }

    #[test]
    fn refuses_what_postgresql_refuses() {
        for bad in ["a,", ",a", "a,,b", "\"a", "a b", "a \"b\""] {
            assert_eq!(names(bad), None, "{bad:?}");
        }
        // (a quoted empty name is one: SET search_path = '' stores it)
        assert_eq!(names("\"\""), Some(vec![""]));
        assert_eq!(names("\"\", public"), Some(vec!["", "public"]));
    }

    #[test]
    fn truncates_long_names_on_a_character_boundary() {
        let long = "é".repeat(40); // 80 bytes
        let got = split(&format!("\"{long}\"")).unwrap();
        assert_eq!(got[0].len(), 62);
        assert_eq!(split(&"a".repeat(70)).unwrap()[0].len(), 63);
    }

    #[test]
    fn keeps_the_bytes_of_any_encoding() {
        // LATIN1 "Été" (C9 74 E9) is not UTF-8: kept byte for byte, never replaced.
        let ete = b"\xC9t\xE9".to_vec();
        assert_eq!(
            split_identifier_list(b"\"\xC9t\xE9\", public", &clip_utf8),
            Some(vec![ete.clone(), b"public".to_vec()])
        );
        assert!(super::names_schema(
            b"INSERT INTO \"\xC9t\xE9\".log VALUES (1)",
            &ete,
            &clip_utf8
        ));
        assert!(!super::names_schema(
            b"INSERT INTO \"\xC9t\xE8\".log VALUES (1)",
            &ete,
            &clip_utf8
        ));
        // A single-byte encoding's clip cuts at 63 bytes, whatever they are.
        let cut_at_63 = |n: &[u8]| n.len().min(MAX_IDENTIFIER_BYTES);
        let long = vec![0xE9u8; 70];
        assert_eq!(
            split_identifier_list(&long, &cut_at_63).unwrap()[0].len(),
            63
        );
    }

    #[test]
    fn finds_the_schema_in_every_spelling() {
        for body in [
            "INSERT INTO tmpl.audit VALUES (1)",
            "INSERT INTO \"tmpl\".audit VALUES (1)",
            "INSERT INTO TMPL.audit VALUES (1)",
            "INSERT INTO \"tmpl\" .audit",
            "SELECT * FROM tmpl/* a comment */.t",
            "SELECT * FROM tmpl -- a comment\n . t",
            "EXECUTE 'SELECT * FROM tmpl.t'",
            "EXECUTE format('SELECT * FROM %I.t', 'x') || ' tmpl.u'",
            "SELECT mydb.tmpl.t.c",
        ] {
            assert!(names_schema(body, "tmpl"), "{body:?}");
        }
        assert!(names_schema("SELECT \"Tmpl\".f()", "Tmpl"));
        assert!(names_schema("SELECT \"a\"\"b\".f()", "a\"b"));
    }

    #[test]
    fn a_name_that_only_contains_the_schema_is_not_it() {
        for body in [
            "SELECT max(evt.id) FROM events evt",
            "SELECT t FROM x",
            "SELECT at.x, t_1.y, \"t \".z FROM a at, b t_1",
            "SELECT $t$.x$t$",
            "SELECT 1.5, t1.c",
            "SELECT \"T\".c",
        ] {
            assert!(!names_schema(body, "t"), "{body:?}");
        }
        // unquoted names fold to lower case: TMPL is not "Tmpl"
        assert!(!names_schema("SELECT TMPL.f()", "Tmpl"));
    }

    #[test]
    fn regclass_constants_of_a_tree() {
        // (a CHECK (tableoid <> 'tm.o'::regclass OR r IS NULL), as stored,
        // OID 16390 = 6 + 64 * 256; a NULL one; a regclass[] holds none)
        let tree = "{BOOLEXPR :boolop or :args ({OPEXPR :opno 607 :args ({VAR :varno 1} \
                    {CONST :consttype 2205 :consttypmod -1 :constcollid 0 :constlen 4 :constbyval true \
                    :constisnull false :location 22 :constvalue 4 [ 6 64 0 0 0 0 0 0 ]})} \
                    {CONST :consttype 2205 :consttypmod -1 :constcollid 0 :constlen 4 :constbyval true \
                    :constisnull true :location 40 :constvalue <>} \
                    {CONST :consttype 2210 :consttypmod -1 :constcollid 0 :constlen -1 :constbyval false \
                    :constisnull false :location 50 :constvalue 28 [ 112 0 0 0 ]})}";
        assert_eq!(tree_regclasses(tree.as_bytes()), vec![16390]);
        assert_eq!(
            tree_regclasses(
                b"{CONST :consttype 23 :constisnull false :constvalue 4 [ 6 64 0 0 0 0 0 0 ]}"
            ),
            Vec::<u32>::new()
        );
    }

    proptest! {
        // A list of any names, each written with quote_identifier and joined
        // with ", ", reads back as those names.
        #[test]
        fn quoting_then_splitting_gives_the_names_back(
            list in prop::collection::vec("[a-zA-Z0-9_$ ,;\"'/*é-]{1,20}", 0..6)
        ) {
            let written: Vec<String> = list.iter().map(|n| quote_identifier(n)).collect();
            prop_assert_eq!(split(&written.join(", ")), Some(list));
        }

        // Whatever surrounds it, a quoted schema name followed by a dot is found.
        #[test]
        fn a_qualified_name_is_found_anywhere(
            before in "[a-z ();,'+]{0,20}", schema in "[a-zA-Z_ é]{1,12}", after in "[a-z]{1,8}"
        ) {
            let body = format!("{before} {}.{after}", quote_identifier(&schema));
            prop_assert!(names_schema(&body, &schema));
        }

        // Cutting fields out of any text (made of what fields are made
        // of) is what a byte-at-a-time reading of the same rule gives:
        // `regexp_replace(tree, ' :(relid|location) -?[0-9]+', '', 'g')`.
        #[test]
        fn fields_cut_as_a_plain_reading_cuts_them(
            parts in prop::collection::vec(prop::sample::select(
                vec![" :relid ", " :location ", " :relid", " ", ":", "relid", "-", "7", "42", "x", "}", "\\ "]), 0..40)
        ) {
            let tree = parts.concat().into_bytes();
            let tokens: &[&[u8]] = &[b" :relid ", b" :location "];
            let (mut out, mut values, mut i) = (Vec::new(), Vec::new(), 0);
            'plain: while i < tree.len() {
                for token in tokens {
                    if tree[i..].starts_with(token) {
                        let start = i + token.len();
                        let sign = usize::from(tree.get(start) == Some(&b'-'));
                        let digits = tree[start + sign..].iter().take_while(|b| b.is_ascii_digit()).count();
                        if digits > 0 {
                            let n: i64 = std::str::from_utf8(&tree[start..start + sign + digits]).unwrap().parse().unwrap();
                            values.push(n);
                            i = start + sign + digits;
                            continue 'plain;
                        }
                    }
                }
                out.push(tree[i]);
                i += 1;
            }
            prop_assert_eq!(cut_fields(&tree, tokens), (out, values));
        }
    }
}
