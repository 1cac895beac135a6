//! The gate's walks over the catalogs (src/sql/gate.sql): which relations a
//! statement may reach (`_gate_relations`), and whose objects and code it
//! may run (`_gate_objects`, whose owners `_gate_owner` reads and decides
//! from). The walks are plain Rust over `Catalogs`, tested below with a
//! catalog of their own; `Scans` answers each question with one index scan
//! or catalog-cache lookup. (They were recursive SQL: starting the
//! executor on plans of about a hundred nodes at each call, and their
//! hashing and sorting, were a third of a migration's time a shard.)
//!
//! They read the catalogs as DDL does, under the catalog snapshot: what
//! committed before the call, with the invalidations the gate's locks took
//! in (`_gate_lock` walks again after each round of locks).

use std::collections::{BTreeSet, HashSet};

/// The catalogs' OIDs (fixed by PostgreSQL; `scans` checks them against
/// its headers).
pub mod kind {
    pub const CLASS: u32 = 1259;
    pub const PROC: u32 = 1255;
    pub const TYPE: u32 = 1247;
    pub const OPERATOR: u32 = 2617;
    pub const OPCLASS: u32 = 2616;
    pub const CONSTRAINT: u32 = 2606;
    pub const TRIGGER: u32 = 2620;
    pub const ATTRDEF: u32 = 2604;
    pub const POLICY: u32 = 3256;
    pub const REWRITE: u32 = 2618;
    pub const STATISTIC_EXT: u32 = 3381;
    pub const NAMESPACE: u32 = 2615;
}
use kind::*;

/// Objects below this OID are PostgreSQL's own (FirstNormalObjectId): a
/// superuser's, and far too many to walk.
const FIRST_NORMAL: u32 = 16384;

/// An object as pg_depend names it: (catalog, OID).
pub type Object = (u32, u32);

/// A relation as pg_class describes it: its kind. (Not relhassubclass or
/// relhasrules, as the catalog cache holds them: a partition attached,
/// which the gate's lock does not hold off, is visible to a scan before
/// its invalidation reaches the cache. pg_inherits and pg_rewrite are
/// scanned.)
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relation {
    pub kind: u8,
}

impl Relation {
    /// The kinds a statement names: tables, partitioned tables, views,
    /// materialized views, foreign tables.
    fn named(&self) -> bool {
        matches!(self.kind, b'r' | b'p' | b'v' | b'm' | b'f')
    }
    /// Whether anything can be reached from it: not from a sequence or a
    /// composite type, which have no children, rules, policies or foreign
    /// keys. (An index can: a foreign key depends on the one it uses.)
    fn leads_on(&self) -> bool {
        !matches!(self.kind, b'S' | b'c')
    }
}

/// What the walks ask of the catalogs. Every answer is one index scan or
/// one catalog-cache lookup.
pub trait Catalogs {
    /// pg_depend's rows on `object` (any of its columns): each dependent,
    /// with the referenced column (0: the object itself) and the type.
    fn dependents(&mut self, object: Object) -> Vec<(Object, i32, u8)>;
    /// pg_depend's rows of `object` (and of any of its columns): each
    /// object referenced.
    fn references(&mut self, object: Object) -> Vec<Object>;
    /// pg_class: the relation's kind; None for a relation that is gone.
    fn relation(&mut self, rel: u32) -> Option<Relation>;
    /// pg_inherits: the relation's children.
    fn children(&mut self, rel: u32) -> Vec<u32>;
    /// pg_inherits: the relation's parents.
    fn parents(&mut self, rel: u32) -> Vec<u32>;
    /// pg_rewrite: the relation's rules.
    fn rules(&mut self, rel: u32) -> Vec<u32>;
    /// pg_policy: the relation's policies.
    fn policies(&mut self, rel: u32) -> Vec<u32>;
    /// pg_constraint: the tables the relation's own foreign keys reference.
    fn referenced(&mut self, rel: u32) -> Vec<u32>;
    /// pg_constraint: a foreign key's (table, referenced table); None for
    /// any other constraint.
    fn foreign_key(&mut self, constraint: u32) -> Option<(u32, u32)>;
    /// pg_index: the relation's indexes.
    fn indexes(&mut self, rel: u32) -> Vec<u32>;
    /// pg_operator: an operator's commutator and negator (no dependency
    /// records them, and the planner puts them in place of the operator:
    /// a NOT (a = b) in a CHECK runs the negator's function).
    fn operator_links(&mut self, operator: u32) -> Vec<u32>;
    /// pg_amproc and pg_amop: an operator class's family's support
    /// functions and operators.
    fn family_members(&mut self, opclass: u32) -> Vec<Object>;
    /// pg_range: a range type's subtype difference and canonical
    /// functions and its subtype's operator class (none: not a range).
    fn range_parts(&mut self, ty: u32) -> Vec<Object>;
    /// pg_type.typrelid: a composite type's relation.
    fn row_relation(&mut self, ty: u32) -> Option<u32>;
}

/// The relations a statement on `rels` (and, with `nsp`, on any relation of
/// schema nsp) may reach: those, their partitions and inheritance children
/// and parents, the tables their foreign keys link in either direction
/// (with `keys`: a statement that writes, whose rows PostgreSQL checks and
/// cascades through them), and the tables their rules' actions and
/// policies' subqueries name (a view's too, through its rule), until
/// nothing new is found; in OID order, of the kinds a statement names
/// (tables, partitioned tables, views, materialized views, foreign
/// tables). A read (keys false) runs no foreign key's code: followed, a
/// table many shards reference would bring every shard into each read's
/// reach, its locks and its owners.
pub fn relations(cat: &mut impl Catalogs, nsp: Option<u32>, rels: &[u32], keys: bool) -> Vec<u32> {
    let mut seen: HashSet<u32> = HashSet::new();
    let mut todo: Vec<u32> = Vec::new();
    let mut start: Vec<u32> = rels.to_vec();
    if let Some(nsp) = nsp {
        // (the schema's relations by their dependency on it)
        start.extend(
            cat.dependents((NAMESPACE, nsp))
                .into_iter()
                .filter(|&((c, _), sub, t)| c == CLASS && sub == 0 && t == b'n')
                .map(|((_, rel), _, _)| rel),
        );
    }
    for rel in start {
        if seen.insert(rel) {
            todo.push(rel);
        }
    }
    let mut out: Vec<u32> = Vec::new();
    while let Some(x) = todo.pop() {
        let Some(rel) = cat.relation(x).filter(Relation::leads_on) else {
            continue;
        };
        if rel.named() {
            out.push(x);
        }
        let mut next = cat.children(x);
        next.extend(cat.parents(x));
        let rules = cat.rules(x).into_iter().map(|r| (REWRITE, r));
        let parts: Vec<Object> = rules
            .chain(cat.policies(x).into_iter().map(|p| (POLICY, p)))
            .collect();
        for part in parts {
            next.extend(
                cat.references(part)
                    .into_iter()
                    .filter(|&(c, o)| c == CLASS && o != x)
                    .map(|(_, o)| o),
            );
        }
        if keys {
            // Its own foreign keys, read by table; the keys of others that
            // reference it, found by their dependency on it, which is
            // normal (a constraint's on its own table is automatic: NOT
            // NULLs' and CHECKs' too, far more of them).
            next.extend(cat.referenced(x));
            let referencing: BTreeSet<u32> = cat
                .dependents((CLASS, x))
                .into_iter()
                .filter(|&((c, _), _, t)| c == CONSTRAINT && t == b'n')
                .map(|((_, con), _, _)| con)
                .collect();
            for con in referencing {
                if let Some((from, to)) = cat.foreign_key(con) {
                    next.push(if from == x { to } else { from });
                }
            }
        }
        for rel in next {
            if seen.insert(rel) {
                todo.push(rel);
            }
        }
    }
    out.sort_unstable();
    out
}

/// The kinds of a relation's parts: triggers, constraints, defaults and
/// generated columns, policies, rules, indexes and sequences, statistics.
const PART_KINDS: [u32; 7] = [
    TRIGGER,
    CONSTRAINT,
    ATTRDEF,
    POLICY,
    REWRITE,
    CLASS,
    STATISTIC_EXT,
];

/// The objects whose owners decide who runs a statement in schema `nsp` on
/// relations `reach` (`relations`' answer), each with whether it is code
/// those use (true: a superuser's does not count) or counts whoever owns
/// it (false); in order, each pair once.
///
/// - What counts whoever owns it: the relations, and every object of the
///   schema, which is first on search_path while the statement runs (an
///   unqualified name in it, a migration's or an owner's function body's,
///   may resolve to any of them, an operator planted there by a role with
///   CREATE on the schema among them), and the relations' statistics
///   objects.
/// - Their parts (not counted themselves: a part is its table's): indexes
///   (an exclusion constraint's too, which depends on its table only
///   through a column its expression names), constraints, defaults and
///   generated columns, triggers, policies, rules, statistics objects.
/// - The code the parts use, and the code that code uses: functions,
///   their types and what their SQL-standard bodies call, operators and
///   their functions, commutators and negators, operator classes and
///   their families' support functions and operators, domains and their
///   CHECKs, range types' functions and operator classes, the fields of
///   composite types. Built-in objects are skipped. Calls inside function
///   bodies are text, not dependencies: not seen; they run as the owner
///   chosen, as that function's own caller would run them.
pub fn objects(cat: &mut impl Catalogs, nsp: u32, reach: &[u32]) -> Vec<(u32, u32, bool)> {
    let mut inside: BTreeSet<Object> = reach.iter().map(|&rel| (CLASS, rel)).collect();
    inside.extend(
        cat.dependents((NAMESPACE, nsp))
            .into_iter()
            .filter(|&(_, sub, t)| sub == 0 && t == b'n')
            .map(|(object, _, _)| object),
    );
    let mut parts: BTreeSet<Object> = inside.clone();
    for &object in &inside {
        parts.extend(
            cat.dependents(object)
                .into_iter()
                .filter(|&((c, _), _, t)| (t == b'a' || t == b'i') && PART_KINDS.contains(&c))
                .map(|(part, _, _)| part),
        );
        if object.0 == CLASS {
            parts.extend(
                cat.indexes(object.1)
                    .into_iter()
                    .map(|index| (CLASS, index)),
            );
        }
    }
    let mut used: BTreeSet<Object> = BTreeSet::new();
    let mut todo: Vec<Object> = Vec::new();
    let add = |object: Object, used: &mut BTreeSet<Object>, todo: &mut Vec<Object>| {
        if object.1 >= FIRST_NORMAL && used.insert(object) {
            todo.push(object);
        }
    };
    for &part in &parts {
        for object in cat.references(part) {
            if [PROC, OPERATOR, OPCLASS, TYPE].contains(&object.0) {
                add(object, &mut used, &mut todo);
            }
        }
    }
    let code = |&(c, _): &Object| [PROC, TYPE, OPERATOR].contains(&c);
    while let Some((c, o)) = todo.pop() {
        let mut next: Vec<Object> = Vec::new();
        match c {
            // a function's argument and result types (a domain's CHECK runs
            // on the value a function returns) and what a body of SQL's own
            // calls; an operator's function
            PROC => next.extend(cat.references((c, o)).into_iter().filter(code)),
            OPERATOR => {
                next.extend(cat.references((c, o)).into_iter().filter(code));
                next.extend(cat.operator_links(o).into_iter().map(|x| (OPERATOR, x)));
            }
            OPCLASS => next.extend(cat.family_members(o)),
            TYPE => {
                // a type's functions; a domain's CHECKs and what they use
                next.extend(cat.references((c, o)).into_iter().filter(code));
                for ((dc, con), _, _) in cat.dependents((TYPE, o)) {
                    if dc == CONSTRAINT {
                        next.extend(cat.references((CONSTRAINT, con)).into_iter().filter(code));
                    }
                }
                next.extend(cat.range_parts(o));
                // a composite type's fields
                if let Some(rel) = cat.row_relation(o) {
                    next.extend(
                        cat.references((CLASS, rel))
                            .into_iter()
                            .filter(|&(rc, _)| rc == TYPE),
                    );
                }
            }
            _ => {}
        }
        for object in next {
            add(object, &mut used, &mut todo);
        }
    }
    let mut out: BTreeSet<(u32, u32, bool)> = inside.iter().map(|&(c, o)| (c, o, false)).collect();
    out.extend(
        parts
            .iter()
            .filter(|&&(c, _)| c == STATISTIC_EXT)
            .map(|&(c, o)| (c, o, false)),
    );
    out.extend(used.iter().map(|&(c, o)| (c, o, true)));
    out.into_iter().collect()
}

pub mod scans;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A catalog of pg_depend rows and a few other facts.
    #[derive(Default)]
    struct Fake {
        depend: Vec<(Object, i32, Object, i32, u8)>,
        inherits: Vec<(u32, u32)>,
        rules: HashMap<u32, Vec<Object>>,
        keys: HashMap<u32, (u32, u32)>,
        kinds: HashMap<u32, u8>,
        indexes: HashMap<u32, Vec<u32>>,
        links: HashMap<u32, Vec<u32>>,
        families: HashMap<u32, Vec<Object>>,
        ranges: HashMap<u32, Vec<Object>>,
        rows: HashMap<u32, u32>,
    }

    impl Fake {
        fn parts(&self, rel: u32, kind: u32) -> Vec<u32> {
            let all = self.rules.get(&rel).cloned().unwrap_or_default();
            all.into_iter()
                .filter(|p| p.0 == kind)
                .map(|p| p.1)
                .collect()
        }
        fn dep(&mut self, from: Object, to: Object, t: u8) -> &mut Self {
            self.depend.push((from, 0, to, 0, t));
            self
        }
    }

    impl Catalogs for Fake {
        fn dependents(&mut self, object: Object) -> Vec<(Object, i32, u8)> {
            self.depend
                .iter()
                .filter(|d| d.2 == object)
                .map(|d| (d.0, d.3, d.4))
                .collect()
        }
        fn references(&mut self, object: Object) -> Vec<Object> {
            self.depend
                .iter()
                .filter(|d| d.0 == object)
                .map(|d| d.2)
                .collect()
        }
        fn relation(&mut self, rel: u32) -> Option<Relation> {
            self.kinds.get(&rel).map(|&kind| Relation { kind })
        }
        fn children(&mut self, rel: u32) -> Vec<u32> {
            self.inherits
                .iter()
                .filter(|i| i.1 == rel)
                .map(|i| i.0)
                .collect()
        }
        fn parents(&mut self, rel: u32) -> Vec<u32> {
            self.inherits
                .iter()
                .filter(|i| i.0 == rel)
                .map(|i| i.1)
                .collect()
        }
        fn rules(&mut self, rel: u32) -> Vec<u32> {
            self.parts(rel, REWRITE)
        }
        fn policies(&mut self, rel: u32) -> Vec<u32> {
            self.parts(rel, POLICY)
        }
        fn referenced(&mut self, rel: u32) -> Vec<u32> {
            self.keys
                .values()
                .filter(|k| k.0 == rel)
                .map(|k| k.1)
                .collect()
        }
        fn foreign_key(&mut self, constraint: u32) -> Option<(u32, u32)> {
            self.keys.get(&constraint).copied()
        }
        fn indexes(&mut self, rel: u32) -> Vec<u32> {
            self.indexes.get(&rel).cloned().unwrap_or_default()
        }
        fn operator_links(&mut self, operator: u32) -> Vec<u32> {
            self.links.get(&operator).cloned().unwrap_or_default()
        }
        fn family_members(&mut self, opclass: u32) -> Vec<Object> {
            self.families.get(&opclass).cloned().unwrap_or_default()
        }
        fn range_parts(&mut self, ty: u32) -> Vec<Object> {
            self.ranges.get(&ty).cloned().unwrap_or_default()
        }
        fn row_relation(&mut self, ty: u32) -> Option<u32> {
            self.rows.get(&ty).copied()
        }
    }

    const NSP: u32 = 20000;

    /// Schema NSP: tables 20001 (orders, with a foreign key 20100 to
    /// 20002) and 20002 (accounts); partitioned 20003 with partition 20004
    /// whose foreign key 20101 points to 20002; view 20005 over 20001 by
    /// its rule 20200; sequence 20006; a table 20009 of another schema
    /// with a policy 20300 whose subquery reads 20001.
    fn shard() -> Fake {
        let mut f = Fake::default();
        for (rel, kind) in [
            (20001, b'r'),
            (20002, b'r'),
            (20003, b'p'),
            (20004, b'r'),
            (20005, b'v'),
            (20006, b'S'),
            (20009, b'r'),
        ] {
            f.kinds.insert(rel, kind);
        }
        for rel in [20001, 20002, 20003, 20004, 20005, 20006] {
            f.dep((CLASS, rel), (NAMESPACE, NSP), b'n');
        }
        f.dep((CONSTRAINT, 20100), (CLASS, 20001), b'a').dep(
            (CONSTRAINT, 20100),
            (CLASS, 20002),
            b'n',
        );
        f.keys.insert(20100, (20001, 20002));
        f.inherits.push((20004, 20003));
        f.dep((CONSTRAINT, 20101), (CLASS, 20004), b'a').dep(
            (CONSTRAINT, 20101),
            (CLASS, 20002),
            b'n',
        );
        f.keys.insert(20101, (20004, 20002));
        f.rules.insert(20005, vec![(REWRITE, 20200)]);
        f.dep((REWRITE, 20200), (CLASS, 20005), b'i')
            .dep((REWRITE, 20200), (CLASS, 20001), b'n');
        f.rules.insert(20009, vec![(POLICY, 20300)]);
        f.dep((POLICY, 20300), (CLASS, 20009), b'a')
            .dep((POLICY, 20300), (CLASS, 20001), b'n');
        f
    }

    #[test]
    fn a_write_follows_foreign_keys_both_ways_and_partitions() {
        let mut f = shard();
        assert_eq!(
            relations(&mut f, None, &[20002], true),
            [20001, 20002, 20003, 20004]
        );
        // a read does not follow keys
        assert_eq!(relations(&mut f, None, &[20002], false), [20002]);
        assert_eq!(relations(&mut f, None, &[20004], false), [20003, 20004]);
    }

    #[test]
    fn a_view_reaches_what_its_rule_reads_but_not_the_other_way() {
        let mut f = shard();
        assert_eq!(relations(&mut f, None, &[20005], false), [20001, 20005]);
        assert_eq!(relations(&mut f, None, &[20001], false), [20001]);
        // a policy's subquery, from the table that has the policy
        assert_eq!(relations(&mut f, None, &[20009], false), [20001, 20009]);
    }

    #[test]
    fn a_schema_brings_its_relations_of_the_kinds_a_statement_names() {
        let mut f = shard();
        // (the sequence is walked, not returned; a relation gone is dropped)
        assert_eq!(
            relations(&mut f, Some(NSP), &[], false),
            [20001, 20002, 20003, 20004, 20005]
        );
        assert_eq!(relations(&mut f, None, &[99999], true), Vec::<u32>::new());
        // an index is walked, not returned: a foreign key depends on it
        f.kinds.insert(20007, b'i');
        f.dep((CONSTRAINT, 20100), (CLASS, 20007), b'n');
        assert_eq!(
            relations(&mut f, None, &[20007], true),
            [20001, 20002, 20003, 20004]
        );
    }

    #[test]
    fn code_is_followed_through_operators_types_and_classes() {
        let mut f = shard();
        // table 20001: a CHECK 20400 using operator 30000 (its function
        // 30001, its negator 30002 with function 30003); a column of
        // domain 30010 whose CHECK 30011 calls 30012; an index 20500
        // whose operator class 30020 has support function 30021; a
        // trigger 20600 calling 30030, which returns composite type 30040
        // of relation 30041 with a field of range type 30050 (subtype
        // difference 30051); a built-in function 100 and a statistics
        // object 20700.
        f.dep((CONSTRAINT, 20400), (CLASS, 20001), b'a').dep(
            (CONSTRAINT, 20400),
            (OPERATOR, 30000),
            b'n',
        );
        f.dep((OPERATOR, 30000), (PROC, 30001), b'n');
        f.links.insert(30000, vec![30002]);
        f.dep((OPERATOR, 30002), (PROC, 30003), b'n');
        f.dep((CLASS, 20001), (TYPE, 30010), b'n');
        f.dep((CONSTRAINT, 30011), (TYPE, 30010), b'a').dep(
            (CONSTRAINT, 30011),
            (PROC, 30012),
            b'n',
        );
        f.indexes.insert(20001, vec![20500]);
        f.dep((CLASS, 20500), (OPCLASS, 30020), b'n');
        f.families.insert(30020, vec![(PROC, 30021)]);
        f.dep((TRIGGER, 20600), (CLASS, 20001), b'a')
            .dep((TRIGGER, 20600), (PROC, 30030), b'n');
        f.dep((PROC, 30030), (TYPE, 30040), b'n')
            .dep((PROC, 30030), (PROC, 100), b'n');
        f.rows.insert(30040, 30041);
        f.dep((CLASS, 30041), (TYPE, 30050), b'n');
        f.ranges.insert(30050, vec![(PROC, 30051), (OPCLASS, 0)]);
        f.dep((STATISTIC_EXT, 20700), (CLASS, 20001), b'a');
        let got = objects(&mut f, NSP, &[20001]);
        let mut expect: Vec<(u32, u32, bool)> = vec![
            (PROC, 30001, true),
            (PROC, 30003, true),
            (PROC, 30012, true),
            (PROC, 30021, true),
            (PROC, 30030, true),
            (PROC, 30051, true),
            (TYPE, 30010, true),
            (TYPE, 30040, true),
            (TYPE, 30050, true),
            (OPERATOR, 30000, true),
            (OPERATOR, 30002, true),
            (OPCLASS, 30020, true),
            (STATISTIC_EXT, 20700, false),
        ];
        for rel in [20001, 20002, 20003, 20004, 20005, 20006] {
            expect.push((CLASS, rel, false));
        }
        expect.sort_unstable();
        assert_eq!(got, expect);
    }

    #[test]
    fn an_object_of_the_schema_used_by_its_tables_counts_twice() {
        let mut f = shard();
        f.dep((PROC, 20800), (NAMESPACE, NSP), b'n');
        f.dep((TRIGGER, 20600), (CLASS, 20001), b'a')
            .dep((TRIGGER, 20600), (PROC, 20800), b'n');
        let got = objects(&mut f, NSP, &[20001]);
        assert!(got.contains(&(PROC, 20800, false)) && got.contains(&(PROC, 20800, true)));
    }
}
