// # PDD simulation
//
// The PDD simulation (`crowdlog simulate pdd`, RunPDD) is Private Data Donor §4
// (Primault et al., WWW 2019, "Configuring PDD through simulation") extended
// with crowdlog's dropout recovery. It estimates, without any cryptography,
// how much of the crowd's keyword counts a group-blinded daily aggregation
// loses for each group size gs and delay δ (docs/pdd-simulation.md).
//
// Model (RunPDD; every random draw comes from the seed, so a seed gives the
// same numbers every time with the same Go and gonum versions):
//   - U users over D days (days 0..D−1). Connectivity (PDD §4.1): user u is
//     active on A = round(Beta(α=2.2170, β=0.4634)·D) days drawn uniformly
//     without replacement from the D days.
//   - Search volume (§4.1): on each active day, round(Normal(μ=1.3020,
//     σ²=0.7603)) searches, clipped at 0.
//   - Search content: each search is a query instance drawn uniformly from
//     the query instances (apps.QueryApp) of a real log, so queries are
//     weighted by frequency; it counts its tokens that are in the monitored
//     keyword list (package keywords, google-10000-english by default).
//   - nnz(u, s) is the number of non-zero entries of user u's round-s
//     vector V_{s,u}: the distinct monitored keywords of the day's searches.
//     PDD recovers V or 0 for a whole client-round, so PDD eq. 4 is
//     MRE = Σ_lost nnz / Σ_all nnz over (round, user).
//   - Groups (§3.4): at the start of day d = s+1 the server groups, for
//     round s, the users active on day s. With the heuristic (PDD eq. 5,
//     when δ > 0 and d > δ) only users active on at least (d−1)/δ of days
//     0..d−2 are kept. Candidates are shuffled (seeded, the same permutation
//     for every configuration) and dealt round-robin into
//     G = max(1, floor(N/gs)) groups. A group of fewer than 2 is never
//     formed; its user's data is lost.
//   - Submission: a member submits if active on a day in [d, d+δ].
//     PDD: a group is decrypted iff every member submitted. Recovery
//     (crowdlog): with S the members who submitted and t = floor(n/2)+1, a
//     group with |S| < n is recovered iff |S| ≥ t and at least t members of
//     S are active in the recovery window [d+δ+1, d+δ+R]; then S's data is
//     decrypted (the others' is lost), else the whole group is lost.
//   - Ungrouped users (inactive on day s, or excluded by the heuristic) lose
//     their round-s data.
//   - Rounds s with s+1+δmax+R ≤ D−1 (δmax the largest delay of the grid)
//     are scored, the same rounds for every configuration. Confidence (PDD
//     §4.5) of a round is decrypted clients / clients active on day s; the
//     reported confidence is its mean over scored rounds with active clients.
//
// The population (activity and nnz per user and day) is drawn once and every
// configuration of the grid is evaluated on it (common random numbers).
//
// Prio3 mode (pddprio3.go) is scored on the same population and rounds: a
// client active on day s reports on its first active day after s, and the
// report counts iff that day is at most s + grace (grace = δ+1 for each
// delay δ of the grid, so the same clients drop out as in the groups modes
// at δ). The client clips its counts (SumVec: 2^b − 1; presence: 0/1 for at
// most w keywords, the highest counts first). MRE generalizes PDD eq. 4 to
// the mean over non-zero entries of |c − ĉ|/c; coverage is reports counted /
// clients active on day s (the groups modes' confidence); the released
// confidence of a Prio3 batch is 1.
package simulate
