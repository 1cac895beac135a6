//! The steps a move records on each server, in insta_id_admin.moves (the
//! extension's _move_steps lists them, src/sql/moves.sql): one type per
//! side, so that a re-run reads a step, never a string it may misspell.

/// SQL of a new server's insta_id_admin.moves row (its `steps` column,
/// given as `$steps`): whether the move last paused PgBouncer's entry and
/// has neither resumed nor re-pointed it since, so that PgBouncer holds
/// the shard's clients. Whatever step was recorded last (a kill after the
/// cutover's commit leaves 'sequences'). A macro, so that queries stay
/// literals: a re-run reads it (Mover::arriving), and so does status.
macro_rules! entry_held {
    ($steps:literal) => {
        concat!(
            "coalesce((SELECT e ->> 'step' FROM pg_catalog.jsonb_array_elements(",
            $steps,
            ") WITH ORDINALITY x(e, o) WHERE e ->> 'step' IN ('paused', 'resumed', 'map') ORDER BY o DESC LIMIT 1) = 'paused', false)"
        )
    };
}
pub(crate) use entry_held;

/// The old server's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaving {
    Published,
    Slot,
    /// The shard dropped here: the point of no return.
    Cutover,
    /// The same, the old copy kept, fenced, for a rollback.
    Reserved,
    /// A rollback carried the new server's state onto the kept copy.
    Returning,
    Returned,
}

/// The new server's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arriving {
    Subscribed,
    Copying,
    Copied,
    Paused,
    Resumed,
    Sequences,
    Adopted,
    Map,
    Cleanup,
    Reserved,
    Returned,
}

/// A step of one side, as move_step records it.
pub trait Step: Copy + 'static {
    const SIDE: &'static str;
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;

    /// A recorded step, as the server spelt it.
    fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.as_str() == text)
    }
}

impl Step for Leaving {
    const SIDE: &'static str = "leaving";
    const ALL: &'static [Leaving] = &[
        Leaving::Published,
        Leaving::Slot,
        Leaving::Cutover,
        Leaving::Reserved,
        Leaving::Returning,
        Leaving::Returned,
    ];
    fn as_str(self) -> &'static str {
        match self {
            Leaving::Published => "published",
            Leaving::Slot => "slot",
            Leaving::Cutover => "cutover",
            Leaving::Reserved => "reserved",
            Leaving::Returning => "returning",
            Leaving::Returned => "returned",
        }
    }
}

impl Step for Arriving {
    const SIDE: &'static str = "arriving";
    const ALL: &'static [Arriving] = &[
        Arriving::Subscribed,
        Arriving::Copying,
        Arriving::Copied,
        Arriving::Paused,
        Arriving::Resumed,
        Arriving::Sequences,
        Arriving::Adopted,
        Arriving::Map,
        Arriving::Cleanup,
        Arriving::Reserved,
        Arriving::Returned,
    ];
    fn as_str(self) -> &'static str {
        match self {
            Arriving::Subscribed => "subscribed",
            Arriving::Copying => "copying",
            Arriving::Copied => "copied",
            Arriving::Paused => "paused",
            Arriving::Resumed => "resumed",
            Arriving::Sequences => "sequences",
            Arriving::Adopted => "adopted",
            Arriving::Map => "map",
            Arriving::Cleanup => "cleanup",
            Arriving::Reserved => "reserved",
            Arriving::Returned => "returned",
        }
    }
}

impl Leaving {
    /// The old server let the shard go (its cutover committed): a re-run
    /// only finishes the move.
    pub fn cut_over(self) -> bool {
        matches!(
            self,
            Leaving::Cutover | Leaving::Reserved | Leaving::Returning
        )
    }
}

impl Arriving {
    /// The new server adopted the shard: only ever after the cutover.
    pub fn adopted(self) -> bool {
        matches!(
            self,
            Arriving::Adopted | Arriving::Map | Arriving::Cleanup | Arriving::Reserved
        )
    }

    /// A complete copy, streaming (a cutover tried or not): one a re-run
    /// may take up.
    pub fn copied(self) -> bool {
        matches!(
            self,
            Arriving::Copied | Arriving::Paused | Arriving::Resumed | Arriving::Sequences
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps of `side` in the extension's _move_steps.
    fn in_sql(side: &str) -> Vec<String> {
        let sql = include_str!("../../../src/sql/moves.sql");
        let line = sql
            .lines()
            .find(|l| l.contains(&format!("'{side}' THEN '{{")))
            .expect("_move_steps lists the side");
        let list = line.split("'{").nth(1).unwrap().split("}'").next().unwrap();
        list.split(',').map(str::to_string).collect()
    }

    #[test]
    fn the_steps_are_the_extensions() {
        let names = |all: &[&str]| all.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(&Leaving::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
            in_sql("leaving")
        );
        assert_eq!(
            names(&Arriving::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
            in_sql("arriving")
        );
        for s in Arriving::ALL {
            assert_eq!(Arriving::parse(s.as_str()), Some(*s));
        }
        assert_eq!(Leaving::parse("sequences"), None);
    }
}
