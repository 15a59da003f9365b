-- crowdlog release schema (ClickHouse 18.16 and current releases).
-- Tables live in the database chosen by the writer (default "crowdlog").
-- Statements are separated by semicolons; comments are whole lines.
--
-- LowCardinality: release.Open applies this text as written on servers
-- where LowCardinality in tables is experimental (18.16), and with the
-- columns app, epoch, policy, dataset and campaign as
-- LowCardinality(String) elsewhere (release.SchemaStatementsFor, which
-- rewrites the lines "    <name> String,": keep those columns one per
-- line, never last). Existing tables are never altered. The analyst views
-- (views.sql, docs/sql.md) read either form.
--
-- Idempotence: the release stage writes released_items and
-- undecrypted_summary first and the releases row LAST. A key
-- (app, epoch, policy, k) that has a releases row is complete and is never
-- written again. A key without one may hold rows of an interrupted attempt:
-- the writer deletes them (ALTER TABLE ... DELETE, a mutation, available
-- since 1.1.54388, so on 18.16) and waits for the mutation before
-- re-inserting. ReplacingMergeTree on the full row key is a second line of
-- defence (two writers racing on one key): duplicates collapse at merge
-- time and SELECT ... FINAL hides them at once.

-- One row per released histogram entry. item = normalized artifact,
-- variant = its original (secondary) form or "". For threshold policies
-- impressions and users are exact counts; for DP policies the noisy
-- released values.
CREATE TABLE IF NOT EXISTS released_items (
    app String,
    epoch String,
    policy String,
    k UInt32,
    item String,
    variant String,
    impressions UInt64,
    users UInt64,
    released_at DateTime
) ENGINE = ReplacingMergeTree(released_at)
ORDER BY (app, epoch, policy, k, item, variant);

-- Counts-only summary of what stayed encrypted when the epoch closed
-- (CrowdLogging section 3.3): tags undecrypted tags each had reports
-- reports from users distinct users.
CREATE TABLE IF NOT EXISTS undecrypted_summary (
    app String,
    epoch String,
    policy String,
    k UInt32,
    reports UInt64,
    users UInt64,
    tags UInt64,
    released_at DateTime
) ENGINE = ReplacingMergeTree(released_at)
ORDER BY (app, epoch, policy, k, reports, users);

-- Release log: one row per completed release of (app, epoch, policy, k),
-- written last. items = number of released_items rows, impressions = their
-- sum.
CREATE TABLE IF NOT EXISTS releases (
    app String,
    epoch String,
    policy String,
    k UInt32,
    items UInt64,
    impressions UInt64,
    released_at DateTime
) ENGINE = ReplacingMergeTree(released_at)
ORDER BY (app, epoch, policy, k);

-- Privacy budget ledger (docs/policies.md): one row per differentially
-- private release, append-only, written BEFORE the release's rows, so no
-- release is ever visible without its spend. A release's spend is found by
-- its release key (app, epoch, policy, k); a redo after a crash finds its
-- row and does not spend again. Budgets are per (dataset, epoch): the
-- writer refuses a release whose epsilon or delta would push the sum of
-- the (dataset, epoch) rows over the configured budget.
CREATE TABLE IF NOT EXISTS privacy_ledger (
    dataset String,
    epoch String,
    app String,
    policy String,
    k UInt32,
    epsilon Float64,
    delta Float64,
    params String,
    spent_at DateTime
) ENGINE = MergeTree
ORDER BY (dataset, epoch, spent_at, app, policy, k);

-- The noise of each differentially private release, drawn once
-- (release/draws.go): before anything of a DP release (or a noisy PDD
-- day) is written, the release stage stores its noisy rows here as one
-- draw; a restart, a redo after a crash or a second release stage writes
-- the stored draw instead of drawing again, so analysts never see two
-- draws of one release. Secret: only the release stage's user reads it
-- (the analyst reads the views only, docs/sql.md). body is the draw's
-- JSON; the canonical draw of a key is its smallest (drawn_at, draw).
CREATE TABLE IF NOT EXISTS release_draws (
    app String,
    epoch String,
    policy String,
    k UInt32,
    draw String,
    body String,
    drawn_at DateTime
) ENGINE = MergeTree
ORDER BY (app, epoch, policy, k, drawn_at, draw);

-- Private Data Donor mode (docs/pdd-release.md; PDD = Primault et al., WWW
-- 2019). Keyword counts per (campaign, day, keyword) from the group sums of
-- blinded vectors, exact or with Laplace noise. Named pdd_keyword_counts
-- because keyword_counts is the analyst view of the threshold keyword app
-- (views.sql). Only non-zero counts are rows; count is signed because a
-- noisy count may be negative (clamping it would bias sums over days).
-- Written before the day's pdd_rounds row; a day without that row is
-- incomplete: the writer deletes its rows (a mutation, waited for) and
-- rewrites them, and the keyword_daily view never shows them.
CREATE TABLE IF NOT EXISTS pdd_keyword_counts (
    campaign String,
    day Date,
    keyword String,
    count Int64,
    released_at DateTime
) ENGINE = ReplacingMergeTree(released_at)
ORDER BY (campaign, day, keyword);

-- One row per released PDD day (a round), written LAST: its presence marks
-- the day complete and a restarted release stage skips it. active = clients
-- active on the day, grouped = those put in groups, decrypted = members
-- whose vectors the released sums cover; groups = groups of the round, split
-- into complete (every member submitted), recovered (dropouts removed by
-- recovery) and lost (nothing recoverable). confidence = decrypted / active
-- (PDD section 4.5; 0 when active = 0). epsilon = Laplace epsilon per
-- (day, keyword) with sensitivity max_count (0 = exact counts).
CREATE TABLE IF NOT EXISTS pdd_rounds (
    campaign String,
    day Date,
    active UInt32,
    grouped UInt32,
    decrypted UInt32,
    groups UInt32,
    groups_complete UInt32,
    groups_recovered UInt32,
    groups_lost UInt32,
    confidence Float64,
    epsilon Float64,
    max_count UInt32,
    released_at DateTime
) ENGINE = ReplacingMergeTree(released_at)
ORDER BY (campaign, day);

-- One row per PDD day a release withheld, with the reason: budget (the
-- day's noisy release would have passed the privacy budget; nothing of it
-- was written and a later run with a larger budget may still release it),
-- below_min_batch (Prio3 mode: fewer reports than the minimum batch size,
-- so the aggregators never revealed the batch). detail says the same in
-- words, without counts of people. A day that has a pdd_rounds row as well
-- was released after all (pdd_rounds wins). A day whose groups were all
-- lost has a pdd_rounds row (groups_lost = groups) and no row here.
CREATE TABLE IF NOT EXISTS pdd_withheld (
    campaign String,
    day Date,
    reason String,
    detail String,
    recorded_at DateTime
) ENGINE = ReplacingMergeTree(recorded_at)
ORDER BY (campaign, day, reason);

-- One row per PDD campaign configuration a release stage wrote days of:
-- mode (groups or prio3), epsilon (the per-day ε of its noise; 0 = exact
-- counts), sensitivity (groups: max_count, the clients' per-keyword clip;
-- prio3: S, one person's daily L1 bound), k (prio3: the minimum batch size;
-- groups: the group size when the release stage was told it, else 0) and
-- params (the measurement, key=value). Written with the campaign's first
-- day (released or withheld) of each run, so exact campaigns, which spend
-- nothing from privacy_ledger, still say what they are. A campaign run
-- again with another configuration has one row per configuration.
CREATE TABLE IF NOT EXISTS pdd_campaigns (
    campaign String,
    mode String,
    epsilon Float64,
    sensitivity UInt32,
    k UInt64,
    params String,
    recorded_at DateTime
) ENGINE = ReplacingMergeTree(recorded_at)
ORDER BY (campaign, mode, epsilon, sensitivity, k, params);
