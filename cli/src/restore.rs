//! A shard's schema on the new server (insta-id move), restored as the one
//! owner of its objects, never as the operator (issue 40). PostgreSQL runs
//! an owner's code while a schema is restored: a stored generated column's
//! expression, an index expression folded with constant arguments, a CHECK,
//! a domain's check on a partition bound. Applied by a superuser, as psql
//! applied pg_dump's output before, that code ran as the superuser. Now the
//! operator makes the schema, owned by that owner, and the rest of pg_dump's
//! output runs through insta_id._run_in_schema as the owner, in a
//! security-restricted operation (the way PostgreSQL's CREATE INDEX and
//! REFRESH run an owner's code), then the schema gets its own owner back.
//! What is taken out of the dump, and why, is decided here.

/// pg_dump -s -n <schema> without what the operator does itself: the
/// schema's `CREATE SCHEMA` (its owner may not create schemas) and the
/// `ALTER SCHEMA ... OWNER TO` after it (its owner may be another role),
/// and psql's `\restrict` and `\unrestrict` lines (meta-commands; no psql
/// reads this). `schema` is the name as pg_dump quotes it (quote_ident).
/// Before the schema's CREATE only pg_dump's header may come: anything else
/// means a dump this reading does not know, and is refused.
pub fn owners_part(dump: &str, schema: &str) -> Result<String, String> {
    let create = format!("CREATE SCHEMA {schema};");
    let owner = format!("ALTER SCHEMA {schema} OWNER TO ");
    let mut out: Vec<&str> = Vec::new();
    let mut created = false;
    let mut owner_pending = false;
    for line in dump.lines() {
        if is_restrict(line) {
            continue;
        }
        if !created {
            if line == create {
                created = true;
                owner_pending = true;
                continue;
            }
            if !is_header(line) {
                return Err(format!(
                    "pg_dump's output has a statement before the schema's CREATE SCHEMA: {}",
                    line.chars().take(80).collect::<String>()
                ));
            }
        } else if owner_pending && !line.is_empty() && !line.starts_with("--") {
            owner_pending = false;
            if line.starts_with(&owner) && line.ends_with(';') {
                continue;
            }
        }
        out.push(line);
    }
    if !created {
        return Err(format!("pg_dump's output has no {create}"));
    }
    Ok(out.join("\n") + "\n")
}

/// psql's `\restrict <key>` or `\unrestrict <key>` (pg_dump since the fix
/// of CVE-2025-8714): one word after the command, nothing else.
fn is_restrict(line: &str) -> bool {
    let mut words = line.split(' ');
    matches!(words.next(), Some("\\restrict") | Some("\\unrestrict"))
        && words
            .next()
            .is_some_and(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric()))
        && words.next().is_none()
}

/// A line of pg_dump's header: blank, a comment, or a session setting.
fn is_header(line: &str) -> bool {
    line.is_empty()
        || line.starts_with("--")
        || (line.starts_with("SET ") && line.ends_with(';'))
        || (line.starts_with("SELECT pg_catalog.set_config(") && line.ends_with(';'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "--\n-- PostgreSQL database dump\n--\n\n\\restrict AbC123\n\n\
SET statement_timeout = 0;\nSELECT pg_catalog.set_config('search_path', '', false);\n\n\
--\n-- Name: insta7; Type: SCHEMA; Schema: -; Owner: app\n--\n\n\
CREATE SCHEMA insta7;\n\n\nALTER SCHEMA insta7 OWNER TO app;\n\n\
CREATE TABLE insta7.t (\n    id bigint\n);\n\nALTER SCHEMA insta7 OWNER TO app;\n\n\
GRANT USAGE ON SCHEMA insta7 TO writer;\n\n\\unrestrict AbC123\n";

    #[test]
    fn the_schema_is_the_operators_the_rest_the_owners() {
        let part = owners_part(DUMP, "insta7").unwrap();
        assert!(!part.contains("CREATE SCHEMA"));
        assert!(!part.contains("restrict"));
        // only the owner right after the CREATE goes; a later line is kept
        assert_eq!(part.matches("ALTER SCHEMA insta7 OWNER TO app;").count(), 1);
        assert!(part.contains("CREATE TABLE insta7.t (\n    id bigint\n);"));
        assert!(part.contains("GRANT USAGE ON SCHEMA insta7 TO writer;"));
        assert!(part.starts_with("--\n-- PostgreSQL database dump"));
    }

    #[test]
    fn anything_unexpected_is_refused() {
        // no CREATE SCHEMA of that name (pg_dump quoted it otherwise)
        assert!(owners_part(DUMP, "\"insta7\"").is_err());
        // a statement before the schema's CREATE
        let early = DUMP.replace("SET statement_timeout = 0;", "CREATE TABLE x ();");
        assert!(owners_part(&early, "insta7").is_err());
        // a meta-command that is not pg_dump's \restrict stays, for the
        // server to refuse: nothing here runs psql
        let meta = DUMP.replace("\\restrict AbC123", "\\! id");
        assert!(owners_part(&meta, "insta7").is_err());
        assert!(!is_restrict("\\restrict key extra"));
        assert!(!is_restrict("\\restrict"));
        assert!(is_restrict("\\unrestrict k3Y"));
    }
}
