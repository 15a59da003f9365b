-- crowdlog analyst views (ClickHouse 18.16 and current releases), created
-- by release.Open after schema.sql, in the same database. Statements are
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
) USING (campaign, day)
