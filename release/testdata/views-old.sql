-- crowdlog analyst views (ClickHouse 18.16 and current releases), created
-- by release.Open after schema.sql in the release database (for user
-- default), and by release.OpenAnalystDatabase (crowdlog clickhouse init)
-- in the analyst database <database>_analyst over the published copies of
-- the same tables (release/analystdb.go): the analyst reads only those.
-- Names stay unqualified so the text runs in either. Statements are
-- separated by semicolons; comments are whole lines. Every view reads only
-- completed releases (keys with a row in releases) through FINAL.
--
-- Composite artifacts (reformulation, click, ltr) are fields joined by
-- ' → ' (space, U+2192, space); inside a field a backslash is written
-- \u005c and U+2192 is written \u2192 (docs/applications.md). The views
-- split on ' → ' and decode each field with two replaceAll calls, first
-- \u2192 then \u005c, which is exact for this escaping.

-- One row per released reformulation q1 → q2 (app reformulation).
CREATE VIEW IF NOT EXISTS reformulation_pairs AS
SELECT
    epoch, policy, k,
    replaceAll(replaceAll(splitByString(' → ', item)[1], '\\u2192', '→'), '\\u005c', '\\') AS source,
    replaceAll(replaceAll(splitByString(' → ', item)[2], '\\u2192', '→'), '\\u005c', '\\') AS target,
    impressions, users
FROM released_items FINAL
WHERE app = 'reformulation'
  AND (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases);

-- Reformulation proportions per source query q1 (CrowdLogging section 3.3:
-- "dog → puppy 50%, dog → dog food 20%, dog → ? 30%"), per (epoch, policy, k).
-- One row per released pair (is_remainder = 0) and, for every source whose
-- query-app count was released under the same (epoch, policy, k), one
-- remainder row (is_remainder = 1, target = '?').
--   source_released    = sum of the released reformulations' impressions of q1
--   source_impressions = q1's impressions in the query app's release, 0 when
--                        the query app did not release q1 (same epoch, policy, k)
--   share_of_released  = impressions / source_released: the share among
--                        the released reformulations of q1 (NULL on remainder rows)
--   share_of_source    = impressions / source_impressions: the share of all
--                        instances of q1 that were followed, in the same
--                        session, by target; NULL when source_impressions = 0.
--                        On the remainder row it is 1 - source_released /
--                        source_impressions: instances of q1 followed by an
--                        unreleased reformulation (fewer than k users/reports)
--                        or by no query at all (last query of a session).
-- Remainder impressions = source_impressions - source_released, users = 0
-- (unknown).
CREATE VIEW IF NOT EXISTS reformulation_proportions AS
SELECT
    epoch, policy, k, source, target, toUInt8(0) AS is_remainder, impressions, users,
    source_released, source_impressions,
    toNullable(impressions / source_released) AS share_of_released,
    if(source_impressions = 0, NULL, impressions / source_impressions) AS share_of_source
FROM
(
    SELECT epoch, policy, k, source, target, impressions, users, source_released
    FROM reformulation_pairs
    ANY INNER JOIN
    (
        SELECT epoch, policy, k, source, sum(impressions) AS source_released
        FROM reformulation_pairs
        GROUP BY epoch, policy, k, source
    ) USING (epoch, policy, k, source)
)
ANY LEFT JOIN
(
    SELECT epoch, policy, k, item AS source, impressions AS source_impressions
    FROM released_items FINAL
    WHERE app = 'query'
      AND (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases)
) USING (epoch, policy, k, source)
UNION ALL
SELECT
    epoch, policy, k, source, '?' AS target, toUInt8(1) AS is_remainder,
    toUInt64(if(source_impressions > source_released, source_impressions - source_released, 0)) AS impressions,
    toUInt64(0) AS users,
    source_released, source_impressions,
    CAST(NULL AS Nullable(Float64)) AS share_of_released,
    toNullable(1 - source_released / source_impressions) AS share_of_source
FROM
(
    SELECT epoch, policy, k, source, sum(impressions) AS source_released
    FROM reformulation_pairs
    GROUP BY epoch, policy, k, source
)
ANY INNER JOIN
(
    SELECT epoch, policy, k, item AS source, impressions AS source_impressions
    FROM released_items FINAL
    WHERE app = 'query'
      AND (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases)
) USING (epoch, policy, k, source);

-- One row per released query→URL click (app click); url at the level the
-- clients mined with (--url-level).
CREATE VIEW IF NOT EXISTS click_pairs AS
SELECT
    epoch, policy, k,
    replaceAll(replaceAll(splitByString(' → ', item)[1], '\\u2192', '→'), '\\u005c', '\\') AS query,
    replaceAll(replaceAll(splitByString(' → ', item)[2], '\\u2192', '→'), '\\u005c', '\\') AS url,
    impressions, users
FROM released_items FINAL
WHERE app = 'click'
  AND (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases);

-- One row per released URL (app url): URL popularity.
CREATE VIEW IF NOT EXISTS url_popularity AS
SELECT epoch, policy, k, item AS url, impressions, users
FROM released_items FINAL
WHERE app = 'url'
  AND (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases);

-- One row per released learning-to-rank feature value (app ltr):
-- feature is rank, dwell or length; bucket its bucket name.
CREATE VIEW IF NOT EXISTS ltr_features AS
SELECT
    epoch, policy, k,
    replaceAll(replaceAll(splitByString(' → ', item)[1], '\\u2192', '→'), '\\u005c', '\\') AS query,
    replaceAll(replaceAll(splitByString(' → ', item)[2], '\\u2192', '→'), '\\u005c', '\\') AS url,
    splitByString(' → ', item)[3] AS feature,
    replaceAll(replaceAll(splitByString(' → ', item)[4], '\\u2192', '→'), '\\u005c', '\\') AS bucket,
    impressions, users
FROM released_items FINAL
WHERE app = 'ltr'
  AND (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases);

-- One row per released keyword (app keyword): token frequency.
CREATE VIEW IF NOT EXISTS keyword_counts AS
SELECT epoch, policy, k, item AS keyword, impressions, users
FROM released_items FINAL
WHERE app = 'keyword'
  AND (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM releases);

-- Private Data Donor mode (docs/pdd-release.md): the daily keyword time
-- series of a campaign. One row per (campaign, day, keyword) with a
-- non-zero released count, only for complete days (a pdd_rounds row; the
-- INNER join drops the rows of a day still being written), with the day's
-- confidence = clients decrypted / clients active (PDD section 4.5).
-- count is exact, or noisy when pdd_rounds.epsilon > 0.
CREATE VIEW IF NOT EXISTS keyword_daily AS
SELECT campaign, day, keyword, count, confidence
FROM
(
    SELECT campaign, day, keyword, count
    FROM pdd_keyword_counts FINAL
)
ANY INNER JOIN
(
    SELECT campaign, day, confidence
    FROM pdd_rounds FINAL
) USING (campaign, day);

-- ---------------------------------------------------------------------------
-- The analyst's views (docs/sql.md). Every view below reads only completed
-- releases, through completed_releases, and carries the epoch's time range
-- and "not measured" as NULL:
--
--   epoch_start, epoch_end  Nullable(DateTime('UTC')): the epoch is the
--       half-open interval [epoch_start, epoch_end), derived from its name:
--         START-LENGTH scheduled epochs (randomness --epoch-length, START as
--           20060102T150405Z, LENGTH as 24h, 90m or 45s): START, START+LENGTH;
--         YYYY-MM-DD (a day; PDD days too): that day;
--         YYYY-MM (a month, as in docs/operations.md): that month;
--         YYYY (a year): that year;
--       NULL for every other name (e.g. "all", the default of `crowdlog run`)
--       and for names of that shape that are not a real date (2006-13).
--   users  Nullable(UInt64): NULL where the policy does not measure users
--       (users_measured = 0: dp-a, whose users column holds 0 in the
--       tables; docs/policies.md), the exact or noisy count otherwise.
--
-- Written for ClickHouse 18.16 (no window functions, no UDFs, multiIf
-- evaluates every branch, so the name is parsed with toDateTimeOrNull and
-- checked by a round trip through toString) and current releases.

-- One row per completed release (a releases row) with its epoch's time
-- range and whether its policy measures users.
CREATE VIEW IF NOT EXISTS completed_releases AS
SELECT
    app, epoch, policy, k,
    epoch_start,
    CAST(multiIf(
        match(epoch, '^[0-9]{8}T[0-9]{6}Z-[0-9]+[hms]$'),
            epoch_start + toUInt32OrZero(extract(epoch, '-([0-9]+)[hms]$'))
                * multiIf(endsWith(epoch, 'h'), 3600, endsWith(epoch, 'm'), 60, 1),
        match(epoch, '^[0-9]{4}-[0-9]{2}-[0-9]{2}$'), epoch_start + 86400,
        match(epoch, '^[0-9]{4}-[0-9]{2}$'), addMonths(epoch_start, 1),
        match(epoch, '^[0-9]{4}$'), addYears(epoch_start, 1),
        NULL) AS Nullable(DateTime('UTC'))) AS epoch_end,
    toUInt8(policy != 'dp-a') AS users_measured,
    items, impressions, released_at
FROM
(
    SELECT
        app, epoch, policy, k, items, impressions, released_at,
        if(start_text != '' AND toString(parsed_start) = start_text, parsed_start, NULL) AS epoch_start
    FROM
    (
        SELECT
            app, epoch, policy, k, items, impressions, released_at,
            multiIf(
                match(epoch, '^[0-9]{8}T[0-9]{6}Z-[0-9]+[hms]$'),
                    concat(substring(epoch, 1, 4), '-', substring(epoch, 5, 2), '-', substring(epoch, 7, 2), ' ',
                           substring(epoch, 10, 2), ':', substring(epoch, 12, 2), ':', substring(epoch, 14, 2)),
                match(epoch, '^[0-9]{4}-[0-9]{2}-[0-9]{2}$'), concat(epoch, ' 00:00:00'),
                match(epoch, '^[0-9]{4}-[0-9]{2}$'), concat(epoch, '-01 00:00:00'),
                match(epoch, '^[0-9]{4}$'), concat(epoch, '-01-01 00:00:00'),
                '') AS start_text,
            toDateTimeOrNull(start_text, 'UTC') AS parsed_start
        FROM releases FINAL
    )
);

-- One row per released query (app query): the normalized query, its most
-- frequent original form (variant, "" when it equals the query; always ""
-- under a DP policy, whose rows publish the normalized item only).
CREATE VIEW IF NOT EXISTS released_queries AS
SELECT
    epoch, epoch_start, epoch_end, policy, k,
    item AS query,
    variant,
    impressions,
    if(users_measured = 1, toNullable(users_raw), NULL) AS users
FROM
(
    SELECT app, epoch, policy, k, item, variant, impressions, users AS users_raw
    FROM released_items FINAL
    WHERE app = 'query'
)
ANY INNER JOIN
(
    SELECT app, epoch, policy, k, epoch_start, epoch_end, users_measured
    FROM completed_releases
    WHERE app = 'query'
) USING (app, epoch, policy, k);

-- One row per released reformulation source → target (app reformulation);
-- proportions per source: reformulation_proportions.
CREATE VIEW IF NOT EXISTS released_reformulations AS
SELECT
    epoch, epoch_start, epoch_end, policy, k,
    replaceAll(replaceAll(splitByString(' → ', item)[1], '\\u2192', '→'), '\\u005c', '\\') AS source,
    replaceAll(replaceAll(splitByString(' → ', item)[2], '\\u2192', '→'), '\\u005c', '\\') AS target,
    impressions,
    if(users_measured = 1, toNullable(users_raw), NULL) AS users
FROM
(
    SELECT app, epoch, policy, k, item, variant, impressions, users AS users_raw
    FROM released_items FINAL
    WHERE app = 'reformulation'
)
ANY INNER JOIN
(
    SELECT app, epoch, policy, k, epoch_start, epoch_end, users_measured
    FROM completed_releases
    WHERE app = 'reformulation'
) USING (app, epoch, policy, k);

-- One row per released query → URL click (app click).
CREATE VIEW IF NOT EXISTS released_clicks AS
SELECT
    epoch, epoch_start, epoch_end, policy, k,
    replaceAll(replaceAll(splitByString(' → ', item)[1], '\\u2192', '→'), '\\u005c', '\\') AS query,
    replaceAll(replaceAll(splitByString(' → ', item)[2], '\\u2192', '→'), '\\u005c', '\\') AS url,
    impressions,
    if(users_measured = 1, toNullable(users_raw), NULL) AS users
FROM
(
    SELECT app, epoch, policy, k, item, variant, impressions, users AS users_raw
    FROM released_items FINAL
    WHERE app = 'click'
)
ANY INNER JOIN
(
    SELECT app, epoch, policy, k, epoch_start, epoch_end, users_measured
    FROM completed_releases
    WHERE app = 'click'
) USING (app, epoch, policy, k);

-- One row per released URL (app url).
CREATE VIEW IF NOT EXISTS released_urls AS
SELECT
    epoch, epoch_start, epoch_end, policy, k,
    item AS url,
    impressions,
    if(users_measured = 1, toNullable(users_raw), NULL) AS users
FROM
(
    SELECT app, epoch, policy, k, item, variant, impressions, users AS users_raw
    FROM released_items FINAL
    WHERE app = 'url'
)
ANY INNER JOIN
(
    SELECT app, epoch, policy, k, epoch_start, epoch_end, users_measured
    FROM completed_releases
    WHERE app = 'url'
) USING (app, epoch, policy, k);

-- One row per released learning-to-rank feature value (app ltr): feature is
-- rank, dwell or length, bucket its bucket name.
CREATE VIEW IF NOT EXISTS released_ltr_features AS
SELECT
    epoch, epoch_start, epoch_end, policy, k,
    replaceAll(replaceAll(splitByString(' → ', item)[1], '\\u2192', '→'), '\\u005c', '\\') AS query,
    replaceAll(replaceAll(splitByString(' → ', item)[2], '\\u2192', '→'), '\\u005c', '\\') AS url,
    splitByString(' → ', item)[3] AS feature,
    replaceAll(replaceAll(splitByString(' → ', item)[4], '\\u2192', '→'), '\\u005c', '\\') AS bucket,
    impressions,
    if(users_measured = 1, toNullable(users_raw), NULL) AS users
FROM
(
    SELECT app, epoch, policy, k, item, variant, impressions, users AS users_raw
    FROM released_items FINAL
    WHERE app = 'ltr'
)
ANY INNER JOIN
(
    SELECT app, epoch, policy, k, epoch_start, epoch_end, users_measured
    FROM completed_releases
    WHERE app = 'ltr'
) USING (app, epoch, policy, k);

-- One row per released keyword (app keyword).
CREATE VIEW IF NOT EXISTS released_keywords AS
SELECT
    epoch, epoch_start, epoch_end, policy, k,
    item AS keyword,
    impressions,
    if(users_measured = 1, toNullable(users_raw), NULL) AS users
FROM
(
    SELECT app, epoch, policy, k, item, variant, impressions, users AS users_raw
    FROM released_items FINAL
    WHERE app = 'keyword'
)
ANY INNER JOIN
(
    SELECT app, epoch, policy, k, epoch_start, epoch_end, users_measured
    FROM completed_releases
    WHERE app = 'keyword'
) USING (app, epoch, policy, k);

-- One row per line of the counts-only summary of what stayed encrypted when
-- a completed release's epoch closed (CrowdLogging section 3.3): tags
-- undecrypted tags each had reports reports; users = distinct shares (share
-- x values) of each, as in undecrypted_summary. Never names an artifact.
CREATE VIEW IF NOT EXISTS released_undecrypted AS
SELECT app, epoch, epoch_start, epoch_end, policy, k, reports, users, tags
FROM
(
    SELECT app, epoch, policy, k, reports, users, tags
    FROM undecrypted_summary FINAL
)
ANY INNER JOIN
(
    SELECT app, epoch, policy, k, epoch_start, epoch_end
    FROM completed_releases
) USING (app, epoch, policy, k);
