//! The catalogs as the gate's walks read them (`Catalogs`): index scans
//! under the catalog snapshot and catalog-cache lookups, and the two SQL
//! functions over the walks. Catalogs, indexes and columns are found by
//! name once a session (`Layout`), not by numbers copied from headers.

use super::kind::*;
use super::{Catalogs, Object, Relation};
use crate::functions::{arg, oid_array};
use crate::BackendCell;
use pgrx::pg_guard;
use pgrx::pg_sys::{self, Datum, FunctionCallInfo, Oid};

/// The catalogs scanned, by their place in `Scans::open`.
#[derive(Clone, Copy)]
enum Table {
    Depend,
    Inherits,
    Rewrite,
    Policy,
    Index,
    Amproc,
    Amop,
    Constraint,
}
const TABLES: usize = 8;

/// Where things are in this server's catalogs: found by name once a
/// session (they do not change while it runs).
#[derive(Clone, Copy)]
struct Layout {
    tables: [Oid; TABLES],
    /// pg_depend's two indexes: by dependent, by referenced object.
    depender: Oid,
    referenced: Oid,
    /// pg_inherits' by parent and by child; pg_rewrite's and pg_policy's
    /// by relation; pg_index's by table; pg_amproc's and pg_amop's by family.
    inherits_parent: Oid,
    inherits_child: Oid,
    rewrite_rel: Oid,
    policy_rel: Oid,
    index_rel: Oid,
    amproc_family: Oid,
    amop_family: Oid,
    /// pg_constraint's by table.
    constraint_rel: Oid,
    /// Column numbers: pg_depend's (classid, objid, refclassid, refobjid,
    /// refobjsubid, deptype), pg_inherits' (inhrelid, inhparent), the
    /// oid and relation of pg_rewrite and pg_policy, pg_index's
    /// (indexrelid, indrelid), pg_amproc's (amprocfamily, amproc),
    /// pg_amop's (amopfamily, amopopr), pg_constraint's (contype, conrelid,
    /// confrelid), pg_range's (rngsubopc, rngcanonical, rngsubdiff).
    depend: [i16; 6],
    inherits: [i16; 2],
    rewrite: [i16; 2],
    policy: [i16; 2],
    index: [i16; 2],
    amproc: [i16; 2],
    amop: [i16; 2],
    constraint: [i16; 3],
    range: [i16; 3],
}

static LAYOUT: BackendCell<Option<Layout>> = BackendCell::new(None);

/// A relation of pg_catalog by name, or an internal error.
unsafe fn catalog(name: &std::ffi::CStr) -> Oid {
    // SAFETY: a catalog-cache lookup by name.
    let oid = unsafe {
        pg_sys::get_relname_relid(name.as_ptr(), Oid::from(pg_sys::PG_CATALOG_NAMESPACE))
    };
    if oid == pg_sys::InvalidOid {
        pgrx::error!("insta_id: catalog relation {name:?} not found");
    }
    oid
}

/// Column numbers of catalog `table` by name, or an internal error.
unsafe fn columns<const N: usize>(table: Oid, names: [&std::ffi::CStr; N]) -> [i16; N] {
    names.map(|name| {
        // SAFETY: a catalog-cache lookup by name.
        let attnum = unsafe { pg_sys::get_attnum(table, name.as_ptr()) };
        if attnum <= 0 {
            pgrx::error!("insta_id: catalog column {name:?} not found");
        }
        attnum
    })
}

impl Layout {
    unsafe fn get() -> Layout {
        if let Some(layout) = LAYOUT.get() {
            return layout;
        }
        // SAFETY: catalog-cache lookups by name, in a transaction.
        let layout = unsafe {
            let tables = [
                catalog(c"pg_depend"),
                catalog(c"pg_inherits"),
                catalog(c"pg_rewrite"),
                catalog(c"pg_policy"),
                catalog(c"pg_index"),
                catalog(c"pg_amproc"),
                catalog(c"pg_amop"),
                catalog(c"pg_constraint"),
            ];
            // (the kinds the walks compare pg_depend's classids with)
            for (name, oid) in [
                (c"pg_class", CLASS),
                (c"pg_proc", PROC),
                (c"pg_type", TYPE),
                (c"pg_operator", OPERATOR),
                (c"pg_opclass", OPCLASS),
                (c"pg_constraint", CONSTRAINT),
                (c"pg_trigger", TRIGGER),
                (c"pg_attrdef", ATTRDEF),
                (c"pg_policy", POLICY),
                (c"pg_rewrite", REWRITE),
                (c"pg_statistic_ext", STATISTIC_EXT),
                (c"pg_namespace", NAMESPACE),
            ] {
                if catalog(name).to_u32() != oid {
                    pgrx::error!("insta_id: catalog {name:?} is not OID {oid}");
                }
            }
            let range = catalog(c"pg_range");
            Layout {
                tables,
                depender: catalog(c"pg_depend_depender_index"),
                referenced: catalog(c"pg_depend_reference_index"),
                inherits_parent: catalog(c"pg_inherits_parent_index"),
                inherits_child: catalog(c"pg_inherits_relid_seqno_index"),
                rewrite_rel: catalog(c"pg_rewrite_rel_rulename_index"),
                policy_rel: catalog(c"pg_policy_polrelid_polname_index"),
                index_rel: catalog(c"pg_index_indrelid_index"),
                amproc_family: catalog(c"pg_amproc_fam_proc_index"),
                amop_family: catalog(c"pg_amop_fam_strat_index"),
                constraint_rel: catalog(c"pg_constraint_conrelid_contypid_conname_index"),
                depend: columns(
                    tables[Table::Depend as usize],
                    [
                        c"classid",
                        c"objid",
                        c"refclassid",
                        c"refobjid",
                        c"refobjsubid",
                        c"deptype",
                    ],
                ),
                inherits: columns(
                    tables[Table::Inherits as usize],
                    [c"inhrelid", c"inhparent"],
                ),
                rewrite: columns(tables[Table::Rewrite as usize], [c"oid", c"ev_class"]),
                policy: columns(tables[Table::Policy as usize], [c"oid", c"polrelid"]),
                index: columns(tables[Table::Index as usize], [c"indexrelid", c"indrelid"]),
                amproc: columns(tables[Table::Amproc as usize], [c"amprocfamily", c"amproc"]),
                amop: columns(tables[Table::Amop as usize], [c"amopfamily", c"amopopr"]),
                constraint: columns(
                    tables[Table::Constraint as usize],
                    [c"contype", c"conrelid", c"confrelid"],
                ),
                range: columns(range, [c"rngsubopc", c"rngcanonical", c"rngsubdiff"]),
            }
        };
        LAYOUT.set(Some(layout));
        layout
    }
}

/// The catalogs, opened (ACCESS SHARE) as a walk first needs them and
/// closed by `close`. (On an error the transaction's abort closes them.)
struct Scans {
    layout: Layout,
    open: [Option<pg_sys::Relation>; TABLES],
}

impl Scans {
    /// The catalogs as of now: the catalog cache first takes in what
    /// others committed (scans take a catalog snapshot of their own).
    unsafe fn new() -> Scans {
        // SAFETY: in a transaction.
        unsafe {
            pg_sys::AcceptInvalidationMessages();
            Scans {
                layout: Layout::get(),
                open: [None; TABLES],
            }
        }
    }

    unsafe fn close(self) {
        for rel in self.open.into_iter().flatten() {
            // SAFETY: opened by `scan` with this lock.
            unsafe { pg_sys::table_close(rel, pg_sys::AccessShareLock as _) };
        }
    }

    /// Every row of `table` that `index` finds equal to `keys` (column,
    /// OID), each as the values of `read`'s columns (a NULL as 0).
    fn scan<const N: usize>(
        &mut self,
        table: Table,
        index: Oid,
        keys: &[(i16, u32)],
        read: [i16; N],
    ) -> Vec<[u32; N]> {
        let mut rows = Vec::new();
        let mut scankeys = [pg_sys::ScanKeyData::default(); 2];
        assert!(keys.len() <= scankeys.len());
        // SAFETY: a catalog opened ACCESS SHARE, an index scan of it under
        // the catalog snapshot (systable_beginscan with no snapshot), its
        // tuples read by column number while the scan holds them; every
        // column read is an oid, a char or an int4 (a Datum's low bits).
        unsafe {
            let rel = *self.open[table as usize].get_or_insert_with(|| {
                pg_sys::table_open(
                    self.layout.tables[table as usize],
                    pg_sys::AccessShareLock as _,
                )
            });
            for (key, &(column, value)) in scankeys.iter_mut().zip(keys) {
                pg_sys::ScanKeyInit(
                    key,
                    column,
                    pg_sys::BTEqualStrategyNumber as _,
                    Oid::from(pg_sys::F_OIDEQ),
                    Datum::from(Oid::from(value)),
                );
            }
            let scan = pg_sys::systable_beginscan(
                rel,
                index,
                true,
                std::ptr::null_mut(),
                keys.len() as i32,
                scankeys.as_mut_ptr(),
            );
            loop {
                let tuple = pg_sys::systable_getnext(scan);
                if tuple.is_null() {
                    break;
                }
                rows.push(read.map(|column| {
                    let mut isnull = false;
                    let value =
                        pg_sys::heap_getattr(tuple, column as i32, (*rel).rd_att, &mut isnull);
                    if isnull {
                        0
                    } else {
                        value.value() as u32
                    }
                }));
            }
            pg_sys::systable_endscan(scan);
        }
        rows
    }

    /// Columns of an object's row in a catalog cache (None: gone), each
    /// an oid or a char.
    fn cached<const N: usize>(
        cache: pg_sys::SysCacheIdentifier::Type,
        objid: u32,
        read: [i16; N],
    ) -> Option<[u32; N]> {
        // SAFETY: a catalog-cache lookup by OID, its columns copied out
        // before the tuple is released.
        unsafe {
            let tuple = pg_sys::SearchSysCache1(cache as _, Datum::from(Oid::from(objid)));
            if tuple.is_null() {
                return None;
            }
            let values = read.map(|column| {
                let mut isnull = false;
                let value = pg_sys::SysCacheGetAttr(cache as _, tuple, column, &mut isnull);
                if isnull {
                    0
                } else {
                    value.value() as u32
                }
            });
            pg_sys::ReleaseSysCache(tuple);
            Some(values)
        }
    }
}

impl Catalogs for Scans {
    fn dependents(&mut self, (classid, objid): Object) -> Vec<(Object, i32, u8)> {
        let [c, o, rc, ro, rs, t] = self.layout.depend;
        self.scan(
            Table::Depend,
            self.layout.referenced,
            &[(rc, classid), (ro, objid)],
            [c, o, rs, t],
        )
        .into_iter()
        .map(|[c, o, sub, t]| ((c, o), sub as i32, t as u8))
        .collect()
    }

    fn references(&mut self, (classid, objid): Object) -> Vec<Object> {
        let [c, o, rc, ro, _, _] = self.layout.depend;
        self.scan(
            Table::Depend,
            self.layout.depender,
            &[(c, classid), (o, objid)],
            [rc, ro],
        )
        .into_iter()
        .map(|[c, o]| (c, o))
        .collect()
    }

    fn relation(&mut self, rel: u32) -> Option<Relation> {
        // SAFETY: a catalog-cache lookup by OID, its fixed columns copied
        // out before the tuple is released.
        unsafe {
            let cache = pg_sys::SysCacheIdentifier::RELOID;
            let tuple = pg_sys::SearchSysCache1(cache as _, Datum::from(Oid::from(rel)));
            if tuple.is_null() {
                return None;
            }
            let form = &*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tuple);
            let found = Relation {
                kind: form.relkind as u8,
            };
            pg_sys::ReleaseSysCache(tuple);
            Some(found)
        }
    }

    fn children(&mut self, rel: u32) -> Vec<u32> {
        let [child, parent] = self.layout.inherits;
        self.scan(
            Table::Inherits,
            self.layout.inherits_parent,
            &[(parent, rel)],
            [child],
        )
        .into_iter()
        .map(|[c]| c)
        .collect()
    }

    fn parents(&mut self, rel: u32) -> Vec<u32> {
        let [child, parent] = self.layout.inherits;
        self.scan(
            Table::Inherits,
            self.layout.inherits_child,
            &[(child, rel)],
            [parent],
        )
        .into_iter()
        .map(|[p]| p)
        .collect()
    }

    fn rules(&mut self, rel: u32) -> Vec<u32> {
        let [rule, rule_rel] = self.layout.rewrite;
        self.scan(
            Table::Rewrite,
            self.layout.rewrite_rel,
            &[(rule_rel, rel)],
            [rule],
        )
        .into_iter()
        .map(|[r]| r)
        .collect()
    }

    fn policies(&mut self, rel: u32) -> Vec<u32> {
        let [policy, policy_rel] = self.layout.policy;
        self.scan(
            Table::Policy,
            self.layout.policy_rel,
            &[(policy_rel, rel)],
            [policy],
        )
        .into_iter()
        .map(|[p]| p)
        .collect()
    }

    fn referenced(&mut self, rel: u32) -> Vec<u32> {
        let [contype, conrelid, confrelid] = self.layout.constraint;
        self.scan(
            Table::Constraint,
            self.layout.constraint_rel,
            &[(conrelid, rel)],
            [contype, confrelid],
        )
        .into_iter()
        .filter(|&[kind, _]| kind as u8 == b'f')
        .map(|[_, to]| to)
        .collect()
    }

    fn foreign_key(&mut self, constraint: u32) -> Option<(u32, u32)> {
        Scans::cached(
            pg_sys::SysCacheIdentifier::CONSTROID,
            constraint,
            self.layout.constraint,
        )
        .filter(|&[contype, _, _]| contype as u8 == b'f')
        .map(|[_, from, to]| (from, to))
    }

    fn indexes(&mut self, rel: u32) -> Vec<u32> {
        let [index, table] = self.layout.index;
        self.scan(
            Table::Index,
            self.layout.index_rel,
            &[(table, rel)],
            [index],
        )
        .into_iter()
        .map(|[i]| i)
        .collect()
    }

    fn operator_links(&mut self, operator: u32) -> Vec<u32> {
        Scans::cached(
            pg_sys::SysCacheIdentifier::OPEROID,
            operator,
            [
                pg_sys::Anum_pg_operator_oprcom as i16,
                pg_sys::Anum_pg_operator_oprnegate as i16,
            ],
        )
        .map_or_else(Vec::new, |links| {
            links.into_iter().filter(|&x| x != 0).collect()
        })
    }

    fn family_members(&mut self, opclass: u32) -> Vec<Object> {
        let Some([family]) = Scans::cached(
            pg_sys::SysCacheIdentifier::CLAOID,
            opclass,
            [pg_sys::Anum_pg_opclass_opcfamily as i16],
        ) else {
            return Vec::new();
        };
        let [proc_family, proc] = self.layout.amproc;
        let [op_family, op] = self.layout.amop;
        let mut out: Vec<Object> = self
            .scan(
                Table::Amproc,
                self.layout.amproc_family,
                &[(proc_family, family)],
                [proc],
            )
            .into_iter()
            .map(|[p]| (PROC, p))
            .collect();
        out.extend(
            self.scan(
                Table::Amop,
                self.layout.amop_family,
                &[(op_family, family)],
                [op],
            )
            .into_iter()
            .map(|[o]| (OPERATOR, o)),
        );
        out
    }

    fn range_parts(&mut self, ty: u32) -> Vec<Object> {
        Scans::cached(pg_sys::SysCacheIdentifier::RANGETYPE, ty, self.layout.range).map_or_else(
            Vec::new,
            |[opc, canonical, diff]| {
                [(PROC, diff), (PROC, canonical), (OPCLASS, opc)]
                    .into_iter()
                    .filter(|&(_, o)| o != 0)
                    .collect()
            },
        )
    }

    fn row_relation(&mut self, ty: u32) -> Option<u32> {
        Scans::cached(
            pg_sys::SysCacheIdentifier::TYPEOID,
            ty,
            [pg_sys::Anum_pg_type_typrelid as i16],
        )
        .map(|[rel]| rel)
        .filter(|&rel| rel != 0)
    }
}

/// The non-NULL elements of an oid[] argument (a NULL array: none).
unsafe fn arg_oids(fcinfo: FunctionCallInfo, n: usize) -> Vec<u32> {
    // SAFETY: an oid[] argument, read when not NULL.
    unsafe {
        if (*fcinfo).args.as_slice(n + 1)[n].isnull {
            return Vec::new();
        }
        crate::functions::arg_array(fcinfo, n, pg_sys::OIDOID)
            .into_iter()
            .flatten()
            .map(|oid| oid.value() as u32)
            .collect()
    }
}

v1!(pg_finfo_insta_id_gate_relations);
/// `insta_id._gate_relations(nsp oid, rels oid[], keys boolean) RETURNS
/// oid[]`: `super::relations` (nsp NULL: the relations alone; keys NULL:
/// false).
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_gate_relations(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: arguments (oid, oid[], boolean), each possibly NULL; scans
    // in a transaction; an oid[] built by construct_array_builtin.
    unsafe {
        let args = (*fcinfo).args.as_slice(3);
        let nsp = (!args[0].isnull).then(|| args[0].value.value() as u32);
        let rels = arg_oids(fcinfo, 1);
        let keys = !args[2].isnull && args[2].value.value() != 0;
        let mut scans = Scans::new();
        let reach = super::relations(&mut scans, nsp, &rels, keys);
        scans.close();
        oid_array(reach)
    }
}

/// `super::objects` for arguments (nsp oid, reach oid[]), both not NULL.
unsafe fn arg_objects(fcinfo: FunctionCallInfo) -> Vec<(u32, u32, bool)> {
    // SAFETY: arguments (oid, oid[]) of a STRICT function; scans in a
    // transaction.
    unsafe {
        let nsp = arg(fcinfo, 0).value() as u32;
        let reach = arg_oids(fcinfo, 1);
        let mut scans = Scans::new();
        let objects = super::objects(&mut scans, nsp, &reach);
        scans.close();
        objects
    }
}

v1!(pg_finfo_insta_id_gate_objects);
/// `insta_id._gate_objects(nsp oid, reach oid[]) RETURNS TABLE (classid
/// oid, objid oid, used boolean)`: `super::objects`, a row each.
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_gate_objects(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (oid, oid[]) returning a
    // set of (oid, oid, boolean); scans in a transaction.
    unsafe {
        let rows = arg_objects(fcinfo)
            .into_iter()
            .map(|(classid, objid, used)| {
                [
                    Datum::from(Oid::from(classid)),
                    Datum::from(Oid::from(objid)),
                    Datum::from(used),
                ]
            });
        crate::functions::materialize_rows(fcinfo, rows)
    }
}

v1!(pg_finfo_insta_id_gate_owners);
/// `insta_id._gate_owners(nsp oid, reach oid[], hold boolean) RETURNS
/// oid[]`: the owners, in OID order, each once, of what `super::objects`
/// finds, code used whose owner is a superuser not counted. With hold,
/// each owner is read once its object is held (`locks::held_owner`, as
/// the gate always has), so that none changes before the statements run;
/// without, as the catalog cache has it (a check that runs nothing).
#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn insta_id_gate_owners(fcinfo: FunctionCallInfo) -> Datum {
    // SAFETY: a STRICT function with arguments (oid, oid[], boolean);
    // scans, catalog-cache reads and object locks in a transaction; an
    // oid[] built by construct_array_builtin.
    unsafe {
        let objects = arg_objects(fcinfo);
        let hold = arg(fcinfo, 2).value() != 0;
        let mut owners = std::collections::BTreeSet::new();
        for (classid, objid, used) in objects {
            let (classid, objid) = (Oid::from(classid), Oid::from(objid));
            let owner = if hold {
                crate::locks::held_owner(classid, objid)
            } else {
                crate::locks::object_owner(classid, objid)
            };
            match owner {
                Some(owner) if !(used && pg_sys::superuser_arg(owner)) => {
                    owners.insert(owner.to_u32());
                }
                _ => {}
            }
        }
        oid_array(owners)
    }
}
