// Package report renders what crowdlog released into one self-contained
// HTML page (`crowdlog report`): the top artifacts of every completed
// release (app, epoch, policy, k), the share of impressions released per
// epoch, the top artifacts of a release series across its epochs (a
// weekly replay, `crowdlog run --epoch-length 168h`), the counts-only
// summary of what stayed encrypted (CrowdLogging
// §3.3), the privacy-budget ledger (docs/policies.md) and, per Private Data
// Donor campaign (Primault et al., WWW 2019; groups or Prio3 mode), the
// daily counts of its top and named keywords with the band of their
// Laplace noise, each day's confidence, and the days released and
// withheld (tables pdd_rounds, pdd_keyword_counts, pdd_withheld).
//
// It reads the tables release.Writer writes (release/schema.sql), and only
// the columns that schema.sql defines, so columns or views added later do
// not change it: from the analyst database (release.AnalystDatabase, made
// by `crowdlog clickhouse init`), which holds copies of the published rows
// under the same table names, so an analyst can run it; from the release
// database itself only as user default when no analyst database exists.
// Like the analyst views (release/views.sql) it shows only completed
// releases: keys with a row in releases, read through FINAL. The ledger is
// shown whole: a spend counts against its budget from the moment it is
// written, before its release completes.
//
// Plots are inline SVG drawn with gonum.org/v1/plot; every string read
// from the database is escaped (html/template, and gonum's SVG text
// escaping inside plots). The page loads nothing from elsewhere.
package report

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	chgo "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/release"
)

// ErrNoDatabase is wrapped by Load's error when the database does not
// exist on the server (neither its analyst database nor, for user
// default, the release database).
var ErrNoDatabase = errors.New("no such database")

// ErrNoRelease is wrapped by Load's error when the database has no
// completed release yet (no crowdlog tables, or an empty releases table).
var ErrNoRelease = errors.New("no completed release yet")

// Defaults of Options.
const (
	DefaultTop         = 10
	DefaultMaxReleases = 20
	DefaultTimeout     = 2 * time.Minute
)

// Options says where to read and how much to show.
type Options struct {
	// Addr is the ClickHouse native-protocol address "host:port" (the TCP
	// port, not HTTP). Required.
	Addr string
	// User and Password log in: the analyst made by `crowdlog clickhouse
	// init` (its password); when User is "", the Login of Load's context
	// (infra/clickhouse.WithLogin), else user default without a password.
	// TLS comes from that Login too.
	User, Password string
	// Database is the release database; release.DefaultDatabase when "".
	// Load reads its analyst database release.AnalystDatabase(Database)
	// when that exists, else (user default only) Database itself.
	Database string
	// Top is the number of artifacts shown per release, by impressions;
	// DefaultTop when ≤ 0.
	Top int
	// MaxReleases is the number of releases given a section of their own
	// (top artifacts, undecrypted summary), the most recently released
	// first; the share plot and the release table cover every release.
	// DefaultMaxReleases when ≤ 0.
	MaxReleases int
	// TrendTop is the number of artifacts followed across the epochs of
	// each release series with two epochs or more (Trend); DefaultTrendTop
	// when ≤ 0.
	TrendTop int
	// PDDTop is the number of keywords followed per PDD campaign, by
	// released count summed over its days; DefaultPDDTop when ≤ 0.
	PDDTop int
	// Keywords are followed in every PDD campaign besides its top ones
	// (--keyword), in this order (at most 16 keywords per campaign in all).
	Keywords []string
	// Budget, when a coordinate is > 0, is drawn as the limit of every
	// (dataset, epoch) in the ledger: the value given to the release
	// stage's --budget-epsilon / --budget-delta. The database does not
	// record it.
	Budget release.Budget
}

func (o Options) withDefaults() Options {
	if o.Database == "" {
		o.Database = release.DefaultDatabase
	}
	if o.Top <= 0 {
		o.Top = DefaultTop
	}
	if o.MaxReleases <= 0 {
		o.MaxReleases = DefaultMaxReleases
	}
	if o.TrendTop <= 0 {
		o.TrendTop = DefaultTrendTop
	}
	if o.PDDTop <= 0 {
		o.PDDTop = DefaultPDDTop
	}
	return o
}

// Release is one completed release and what the report shows of it.
type Release struct {
	release.Key
	// Items and Impressions are the releases row's: the number of
	// released_items rows and the sum of their impressions.
	Items, Impressions uint64
	ReleasedAt         time.Time
	// Top are its Options.Top released items with the most impressions
	// (release.SortItems order). Filled only for releases given a
	// section (Data.Detailed).
	Top []release.Item
	// Undecrypted are its undecrypted_summary lines, Reports descending.
	Undecrypted []release.Undecrypted
}

// UndecryptedReports returns Σ Reports·Tags over the summary lines: the
// reports that stayed encrypted at epoch close. Under the coarse summary
// (release.SummaryCoarse) Reports is a bucket's lower bound, so this is a
// lower bound too.
func (r Release) UndecryptedReports() uint64 {
	var n uint64
	for _, u := range r.Undecrypted {
		n += u.Reports * u.Tags
	}
	return n
}

// UndecryptedTags returns Σ Tags: the artifacts that stayed encrypted.
func (r Release) UndecryptedTags() uint64 {
	var n uint64
	for _, u := range r.Undecrypted {
		n += u.Tags
	}
	return n
}

// Share returns Impressions / (Impressions + UndecryptedReports()), the
// share of the epoch's reports that were released, in [0, 1]; ok is false
// when the release published no summary lines (DP policies withhold them,
// --summary none drops them), where the share is unknown. Under the
// coarse summary it is an upper bound.
func (r Release) Share() (share float64, ok bool) {
	if len(r.Undecrypted) == 0 {
		return 0, false
	}
	total := r.Impressions + r.UndecryptedReports()
	if total == 0 {
		return 0, false
	}
	return float64(r.Impressions) / float64(total), true
}

// LedgerTotal is the spend of one (dataset, epoch) of the privacy ledger.
type LedgerTotal struct {
	Dataset, Epoch string
	Epsilon, Delta float64
	Rows           int
}

// Data is everything the report shows.
type Data struct {
	// Database is the database read: the analyst database, or the
	// release database when user default had no analyst database to read.
	Database string
	// Releases are all completed releases, by (app, epoch, policy, k).
	Releases []Release
	// Detailed are the indexes in Releases of the releases given a
	// section, at most Options.MaxReleases, most recent first.
	Detailed []int
	// Trends are the release series with two epochs or more (at most
	// eight, those with the most impressions; TrendsDropped counts the
	// rest), each with its TrendTop artifacts across its epochs. Empty
	// when every series has one epoch.
	Trends        []Trend
	TrendsDropped int
	TrendTop      int
	// Ledger are the privacy_ledger rows by dataset, epoch and spending
	// order; Totals their sums per (dataset, epoch), same order.
	Ledger []release.Spend
	Totals []LedgerTotal
	Budget release.Budget
	Top    int
	// PDD are the Private Data Donor campaigns (groups and Prio3 mode),
	// by name; empty when the database has none.
	PDD []Campaign
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Load reads the report's data from ClickHouse as opts.User: from the
// analyst database of opts.Database when it exists, else, as user default,
// from opts.Database. Errors wrap ErrNoDatabase when neither may be read
// and ErrNoRelease when the database read holds no completed release;
// both say what to do. ctx bounds the call (DefaultTimeout when it has no
// deadline).
func Load(ctx context.Context, opts Options) (*Data, error) {
	opts = opts.withDefaults()
	if opts.Addr == "" {
		return nil, errors.New("report: no ClickHouse address: give --clickhouse host:port (the native TCP port)")
	}
	if !identRE.MatchString(opts.Database) {
		return nil, fmt.Errorf("report: database name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", opts.Database)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	login := clickhouse.LoginFrom(ctx) // --clickhouse-user, --clickhouse-tls…
	if opts.User == "" && login.User != "" {
		opts.User, opts.Password = login.User, login.Password
	}
	user, session := opts.User, "default"
	if user == "" {
		user = "default"
	}
	if user != "default" {
		// an analyst may use its analyst database only
		session = release.AnalystDatabase(opts.Database)
	}
	conn, err := clickhouse.Open(&chgo.Options{
		Addr:        []string{opts.Addr},
		Protocol:    chgo.Native, // HTTP fails on 18.16 (docs/decisions.md)
		Auth:        chgo.Auth{Database: session, Username: user, Password: opts.Password},
		TLS:         login.TLS,
		DialTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("report: open ClickHouse %s: %w", opts.Addr, err)
	}
	defer conn.Close()
	if err := conn.Ping(ctx); err != nil {
		return nil, fmt.Errorf("report: ClickHouse at %s (native protocol, the TCP port) as %s in database %s does not answer (a wrong password, or no such database: `crowdlog clickhouse init` creates it): %w",
			opts.Addr, user, session, err)
	}
	opts.User = user
	return LoadConn(ctx, conn, opts)
}

// LoadConn is Load on a connection already made, logged in as opts.User
// (user default when ""; opts.Addr and opts.Password are not used): it
// reads the analyst database of opts.Database when the connection sees
// it, else, as user default, opts.Database. The connection stays open.
// Errors are Load's. ctx bounds the call (DefaultTimeout when it has no
// deadline).
func LoadConn(ctx context.Context, conn driver.Conn, opts Options) (*Data, error) {
	opts = opts.withDefaults()
	if !identRE.MatchString(opts.Database) {
		return nil, fmt.Errorf("report: database name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", opts.Database)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	user := opts.User
	if user == "" {
		user = "default"
	}
	db, err := pickDatabase(ctx, conn, opts.Database, user)
	if err != nil {
		return nil, err
	}
	if err := checkDatabase(ctx, conn, db); err != nil {
		return nil, err
	}
	r := reader{conn: conn, db: "`" + db + "`."}
	d := &Data{Database: db, Budget: opts.Budget, Top: opts.Top, TrendTop: opts.TrendTop}
	if d.Releases, err = r.releases(ctx); err != nil {
		return nil, err
	}
	if d.Ledger, err = r.ledger(ctx); err != nil {
		return nil, err
	}
	d.Totals = totals(d.Ledger)
	if d.PDD, err = r.campaigns(ctx, db, opts.PDDTop, opts.Keywords, d.Ledger); err != nil {
		return nil, err
	}
	if len(d.Releases) == 0 && len(d.PDD) == 0 {
		return nil, fmt.Errorf("report: database %s: %w (tables releases and pdd_rounds are empty): run `crowdlog run`, `crowdlog pdd` or a release stage first, or pick another --database", db, ErrNoRelease)
	}
	if err := r.undecrypted(ctx, d.Releases); err != nil {
		return nil, err
	}
	d.Detailed = newest(d.Releases, opts.MaxReleases)
	if err := r.top(ctx, d.Releases, d.Detailed, opts.Top); err != nil {
		return nil, err
	}
	d.Trends, d.TrendsDropped = trendSeries(d.Releases)
	if err := r.trends(ctx, d.Trends, opts.TrendTop); err != nil {
		return nil, err
	}
	return d, nil
}

// pickDatabase returns the database Load reads for release database db:
// its analyst database when the server lists it to user, else db itself
// for user default, else an ErrNoDatabase error. 18.16 lists to a user
// only the databases it may use (and system).
func pickDatabase(ctx context.Context, conn driver.Conn, db, user string) (string, error) {
	adb := release.AnalystDatabase(db)
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", adb).Scan(&n); err != nil {
		return "", fmt.Errorf("report: list databases: %w", err)
	}
	switch {
	case n > 0:
		return adb, nil
	case user == "default":
		return db, nil
	}
	return "", fmt.Errorf("report: database %q (the analysts' copy of %q): %w for user %s: check --database, or run `crowdlog clickhouse init` to create it",
		adb, db, ErrNoDatabase, user)
}

// checkDatabase returns an ErrNoDatabase error when db does not exist and
// an ErrNoRelease error when it lacks the tables the report reads.
func checkDatabase(ctx context.Context, conn driver.Conn, db string) error {
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", db).Scan(&n); err != nil {
		return fmt.Errorf("report: list databases: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("report: database %q: %w on this server: check --database (crowdlog writes to %q unless told otherwise)", db, ErrNoDatabase, release.DefaultDatabase)
	}
	rows, err := conn.Query(ctx, "SELECT name FROM system.tables WHERE database = ?", db)
	if err != nil {
		return fmt.Errorf("report: list tables of %s: %w", db, err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return fmt.Errorf("report: list tables of %s: %w", db, err)
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("report: list tables of %s: %w", db, err)
	}
	for _, t := range []string{"releases", "released_items", "undecrypted_summary", "privacy_ledger"} {
		if !have[t] {
			return fmt.Errorf("report: database %s has no table %s: %w: run `crowdlog run` or the release stage first, or pick another --database", db, t, ErrNoRelease)
		}
	}
	return nil
}

type reader struct {
	conn driver.Conn
	db   string // "`name`." prefix of table names
}

// completed is the filter of the analyst views: keys with a releases row.
func (r reader) completed() string {
	return " WHERE (app, epoch, policy, k) IN (SELECT app, epoch, policy, k FROM " + r.db + "releases)"
}

func (r reader) releases(ctx context.Context) ([]Release, error) {
	rows, err := r.conn.Query(ctx, "SELECT app, epoch, policy, k, items, impressions, released_at FROM "+r.db+
		"releases FINAL ORDER BY app, epoch, policy, k")
	if err != nil {
		return nil, fmt.Errorf("report: read releases: %w", err)
	}
	defer rows.Close()
	var out []Release
	for rows.Next() {
		var rel Release
		var k uint32
		if err := rows.Scan(&rel.App, &rel.Epoch, &rel.Policy, &k, &rel.Items, &rel.Impressions, &rel.ReleasedAt); err != nil {
			return nil, fmt.Errorf("report: scan releases: %w", err)
		}
		rel.K = int(k)
		out = append(out, rel)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("report: read releases: %w", err)
	}
	return out, nil
}

func index(rels []Release) map[release.Key]int {
	m := make(map[release.Key]int, len(rels))
	for i, r := range rels {
		m[r.Key] = i
	}
	return m
}

func (r reader) undecrypted(ctx context.Context, rels []Release) error {
	rows, err := r.conn.Query(ctx, "SELECT app, epoch, policy, k, reports, users, tags FROM "+r.db+
		"undecrypted_summary FINAL"+r.completed()+" ORDER BY app, epoch, policy, k, reports DESC, users DESC")
	if err != nil {
		return fmt.Errorf("report: read undecrypted_summary: %w", err)
	}
	defer rows.Close()
	at := index(rels)
	for rows.Next() {
		var u release.Undecrypted
		var k uint32
		if err := rows.Scan(&u.App, &u.Epoch, &u.Policy, &k, &u.Reports, &u.Users, &u.Tags); err != nil {
			return fmt.Errorf("report: scan undecrypted_summary: %w", err)
		}
		u.K = int(k)
		if i, ok := at[u.Key()]; ok {
			rels[i].Undecrypted = append(rels[i].Undecrypted, u)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("report: read undecrypted_summary: %w", err)
	}
	return nil
}

// top fills Top of the releases at idx with their n items of most
// impressions (LIMIT n BY the key, which ClickHouse 18.16 has).
func (r reader) top(ctx context.Context, rels []Release, idx []int, n int) error {
	if len(idx) == 0 {
		return nil
	}
	want := map[release.Key]bool{}
	for _, i := range idx {
		want[rels[i].Key] = true
	}
	q := fmt.Sprintf("SELECT app, epoch, policy, k, item, variant, impressions, users FROM %sreleased_items FINAL%s"+
		" ORDER BY app, epoch, policy, k, impressions DESC, item, variant LIMIT %d BY app, epoch, policy, k",
		r.db, r.completed(), n)
	rows, err := r.conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("report: read released_items: %w", err)
	}
	defer rows.Close()
	at := index(rels)
	for rows.Next() {
		var it release.Item
		var k uint32
		if err := rows.Scan(&it.App, &it.Epoch, &it.Policy, &k, &it.Item, &it.Variant, &it.Impressions, &it.Users); err != nil {
			return fmt.Errorf("report: scan released_items: %w", err)
		}
		it.K = int(k)
		if i, ok := at[it.Key()]; ok && want[it.Key()] {
			rels[i].Top = append(rels[i].Top, it)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("report: read released_items: %w", err)
	}
	for _, i := range idx {
		release.SortItems(rels[i].Top)
	}
	return nil
}

func (r reader) ledger(ctx context.Context) ([]release.Spend, error) {
	rows, err := r.conn.Query(ctx, "SELECT dataset, epoch, app, policy, k, epsilon, delta, params, spent_at FROM "+r.db+
		"privacy_ledger ORDER BY dataset, epoch, spent_at, app, policy, k")
	if err != nil {
		return nil, fmt.Errorf("report: read privacy_ledger: %w", err)
	}
	defer rows.Close()
	var out []release.Spend
	for rows.Next() {
		var s release.Spend
		var k uint32
		if err := rows.Scan(&s.Dataset, &s.Epoch, &s.App, &s.Policy, &k, &s.Epsilon, &s.Delta, &s.Params, &s.SpentAt); err != nil {
			return nil, fmt.Errorf("report: scan privacy_ledger: %w", err)
		}
		s.K = int(k)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("report: read privacy_ledger: %w", err)
	}
	return out, nil
}

// totals sums ledger rows (sorted by dataset, epoch) per (dataset, epoch).
func totals(ledger []release.Spend) []LedgerTotal {
	var out []LedgerTotal
	for _, s := range ledger {
		if n := len(out); n == 0 || out[n-1].Dataset != s.Dataset || out[n-1].Epoch != s.Epoch {
			out = append(out, LedgerTotal{Dataset: s.Dataset, Epoch: s.Epoch})
		}
		t := &out[len(out)-1]
		t.Epsilon += s.Epsilon
		t.Delta += s.Delta
		t.Rows++
	}
	return out
}

// newest returns the indexes of the max most recently released releases,
// most recent first (ties by key order).
func newest(rels []Release, max int) []int {
	idx := make([]int, len(rels))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rels[idx[a]].ReleasedAt.After(rels[idx[b]].ReleasedAt) })
	if len(idx) > max {
		idx = idx[:max]
	}
	return idx
}
