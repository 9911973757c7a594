//! The store's schema: versioned steps, applied once each, in order, in a
//! transaction (see `SqlStore::migrate`). A step is never edited once
//! released; a change is a new step.

/// Versioned schema steps, applied once each, in order, in a transaction.
pub(super) const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE IF NOT EXISTS deliveries (
        id TEXT PRIMARY KEY,
        event TEXT NOT NULL,
        dedupe TEXT UNIQUE,
        installation BIGINT,
        payload TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        lease_until BIGINT,
        error TEXT
    );
    CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries (status, received_at);
    CREATE TABLE IF NOT EXISTS commands (
        id TEXT PRIMARY KEY,
        repo TEXT NOT NULL,
        issue BIGINT NOT NULL,
        login TEXT NOT NULL,
        command TEXT NOT NULL,
        argument TEXT,
        received_at BIGINT NOT NULL
    );",
    ),
    (
        2,
        "CREATE TABLE IF NOT EXISTS operations (
        id TEXT PRIMARY KEY,
        repo TEXT NOT NULL,
        issue BIGINT NOT NULL,
        installation BIGINT NOT NULL,
        active INTEGER NOT NULL,
        status_comment BIGINT,
        context TEXT NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS operations_issue ON operations (repo, issue, created_at);
    CREATE TABLE IF NOT EXISTS op_log (
        op TEXT NOT NULL,
        seq BIGINT NOT NULL,
        events TEXT NOT NULL,
        PRIMARY KEY (op, seq)
    );
    CREATE TABLE IF NOT EXISTS op_effects (
        op TEXT NOT NULL,
        seq BIGINT NOT NULL,
        idx BIGINT NOT NULL,
        effect TEXT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (op, seq, idx)
    );
    CREATE TABLE IF NOT EXISTS op_runs (
        dispatch TEXT PRIMARY KEY,
        op TEXT NOT NULL,
        run_id BIGINT,
        html_url TEXT,
        base_sha TEXT
    );
    CREATE TABLE IF NOT EXISTS op_units (
        op TEXT NOT NULL,
        unit TEXT NOT NULL,
        number BIGINT NOT NULL,
        issue_id BIGINT NOT NULL,
        flags TEXT NOT NULL DEFAULT 'none',
        PRIMARY KEY (op, unit)
    );",
    ),
    (
        3,
        "ALTER TABLE operations ADD COLUMN owner TEXT;
    ALTER TABLE operations ADD COLUMN lease_until BIGINT",
    ),
    (
        4,
        // The head a sprint's pull request was verified at: merged with it, so a
        // branch that moves after verification is refused.
        "ALTER TABLE op_runs ADD COLUMN verified_sha TEXT",
    ),
    (
        5,
        // The sprint's pull request: verification and the merge read it by
        // number (one request) instead of looking it up by branch.
        "ALTER TABLE op_runs ADD COLUMN pull BIGINT",
    ),
    (
        6,
        // Spend across operations (see `spend.rs`): each dispatch once, the
        // line of dispatches waiting for a slot, and one row per installation
        // whose lock makes an admission one transaction at a time.
        "CREATE TABLE IF NOT EXISTS spend (
        dispatch TEXT PRIMARY KEY,
        installation BIGINT NOT NULL,
        repo TEXT NOT NULL,
        op TEXT NOT NULL,
        model TEXT NOT NULL,
        cost BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        ended_ms BIGINT
    );
    CREATE INDEX IF NOT EXISTS spend_window ON spend (installation, at_ms);
    CREATE TABLE IF NOT EXISTS spend_waiting (
        dispatch TEXT PRIMARY KEY,
        installation BIGINT NOT NULL,
        op TEXT NOT NULL,
        since_ms BIGINT NOT NULL,
        seen_ms BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS spend_scopes (
        installation BIGINT PRIMARY KEY,
        version BIGINT NOT NULL
    )",
    ),
    (
        7,
        // A delivery's body in a table of its own, written once: SQLite
        // rewrites a whole row on every update, and the claim, the lease
        // renewals and the end each updated a row holding the body (often
        // 10 KB and more) — three copies of it through the log per delivery.
        "CREATE TABLE IF NOT EXISTS delivery_payloads (
        id TEXT PRIMARY KEY,
        payload TEXT NOT NULL
    );
    INSERT INTO delivery_payloads (id, payload) SELECT id, payload FROM deliveries;
    ALTER TABLE deliveries DROP COLUMN payload",
    ),
    (
        8,
        // The line of pending deliveries in claim order, to the tie-break: a
        // claim reads its first few from the index instead of sorting every
        // pending delivery (a backlog of thousands made each claim a sort of
        // them all).
        "CREATE INDEX IF NOT EXISTS deliveries_queue ON deliveries (status, received_at, id);
    DROP INDEX IF EXISTS deliveries_pending",
    ),
    (
        9,
        // The replica holding a delivery's lease, so a replica that starts
        // again takes back at once what it held when it stopped.
        "ALTER TABLE deliveries ADD COLUMN holder TEXT",
    ),
    (
        10,
        // Which run of the holding replica holds a delivery: a replica can
        // then take back what its earlier runs held at any time, without
        // touching what it holds now (see `SqlStore::release_held`).
        "ALTER TABLE deliveries ADD COLUMN incarnation TEXT",
    ),
    (
        11,
        // What is read on every event, found by index rather than by reading
        // every row ever written, which makes each event cost more than the
        // last: a run by its id on every `workflow_run`, an operation's runs
        // on every status publication, the agents in flight on every
        // admission (6 hours of an installation's dispatches, most of them
        // ended) and the line waiting for a slot.
        "CREATE INDEX IF NOT EXISTS op_runs_run_id ON op_runs (run_id);
    CREATE INDEX IF NOT EXISTS op_runs_op ON op_runs (op);
    CREATE INDEX IF NOT EXISTS spend_in_flight ON spend (installation, at_ms) WHERE ended_ms IS NULL;
    CREATE INDEX IF NOT EXISTS spend_waiting_line ON spend_waiting (installation, seen_ms)",
    ),
    (
        12,
        // A dispatch's dollars, in millionths: what it was expected to cost
        // when admitted, then what its agent reported it cost. The daily
        // caps in dollars are summed from it as those in units are from
        // `cost`.
        "ALTER TABLE spend ADD COLUMN usd BIGINT NOT NULL DEFAULT 0",
    ),
    (
        13,
        // What each decision was decided from (the input and the time the
        // engine was given), so `supervise replay` can decide it again.
        "ALTER TABLE op_log ADD COLUMN cause TEXT",
    ),
];
