package release

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A differentially private release draws its noise once. The release
// stage computes a candidate (the noisy items) from the exact counts;
// before anything of the release is written, the Writer stores that
// candidate as the release's draw in table release_draws, which only the
// release stage's user can read (the analyst sees views, docs/sql.md).
// Every later attempt at the same release key — a restart, a redo after a
// crash at any step of the write, a second release stage — finds the
// stored draw and writes it instead of its own candidate, so the noise an
// analyst can ever see is one draw, spent once in the ledger. The write
// order of a DP release is: draw, ledger row, items, undecrypted lines,
// releases row; each step is idempotent on redo.
//
// Two stages that draw the same key at the same moment can each store a
// draw; each takes the smallest (drawn_at, draw id) it can read, and the
// releases row is written only after the draw was read again and is still
// that one. Run one release stage per dataset: ClickHouse 18.16 has no
// compare-and-set, so two simultaneous first attempts are not coordinated
// beyond that (docs/decisions.md).

// drawVersion is the version of an encoded draw (drawBody).
const drawVersion = 1

// drawBody is the stored form of a threshold DP release's draw: the
// release key's items and undecrypted lines as written.
type drawBody struct {
	V     int           `json:"v"`
	Items []Item        `json:"items"`
	Undec []Undecrypted `json:"undec"`
}

// pddDrawBody is the stored form of a noisy PDD day's draw.
type pddDrawBody struct {
	V     int      `json:"v"`
	Round PDDRound `json:"round"`
}

// maxDraw bounds a stored draw (64 MiB): larger ones are refused on write
// and on read.
const maxDraw = 64 << 20

// ErrBadDraw is returned (wrapped) when a stored draw does not decode or
// belongs to another key: the release is not written; delete the draw's
// row (release_draws) only if you accept that the release draws new noise.
var ErrBadDraw = errors.New("stored release draw is unreadable")

// DecodeDraw decodes a stored threshold-release draw of key: the items and
// undecrypted lines it holds. Errors wrap ErrBadDraw (bad JSON, another
// version, a line of another key, over 64 MiB).
func DecodeDraw(key Key, b []byte) ([]Item, []Undecrypted, error) {
	if len(b) > maxDraw {
		return nil, nil, fmt.Errorf("release %s: %w: %d bytes", key, ErrBadDraw, len(b))
	}
	var d drawBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, nil, fmt.Errorf("release %s: %w: %v", key, ErrBadDraw, err)
	}
	if d.V != drawVersion {
		return nil, nil, fmt.Errorf("release %s: %w: version %d, this build reads %d", key, ErrBadDraw, d.V, drawVersion)
	}
	for i, it := range d.Items {
		if it.Key() != key {
			return nil, nil, fmt.Errorf("release %s: %w: item %d belongs to %s", key, ErrBadDraw, i, it.Key())
		}
	}
	for i, u := range d.Undec {
		if u.Key() != key {
			return nil, nil, fmt.Errorf("release %s: %w: undecrypted line %d belongs to %s", key, ErrBadDraw, i, u.Key())
		}
	}
	return d.Items, d.Undec, nil
}

// decodePDDDraw decodes a stored PDD draw of (campaign, day).
func decodePDDDraw(campaign string, day time.Time, b []byte) (PDDRound, error) {
	what := pddKey(campaign, day)
	if len(b) > maxDraw {
		return PDDRound{}, fmt.Errorf("pdd release %s: %w: %d bytes", what, ErrBadDraw, len(b))
	}
	var d pddDrawBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return PDDRound{}, fmt.Errorf("pdd release %s: %w: %v", what, ErrBadDraw, err)
	}
	if d.V != drawVersion {
		return PDDRound{}, fmt.Errorf("pdd release %s: %w: version %d, this build reads %d", what, ErrBadDraw, d.V, drawVersion)
	}
	if d.Round.Campaign != campaign || dayArg(d.Round.Day) != dayArg(day) {
		return PDDRound{}, fmt.Errorf("pdd release %s: %w: it is the draw of %s", what, ErrBadDraw, pddKey(d.Round.Campaign, d.Round.Day))
	}
	return d.Round, nil
}

// storedDraw is one row of release_draws.
type storedDraw struct {
	id   string
	at   time.Time
	body []byte
}

// readDraw returns the canonical stored draw of key — the smallest
// (drawn_at, draw id) — and whether there is one.
func (w *Writer) readDraw(ctx context.Context, key Key) (storedDraw, bool, error) {
	var d storedDraw
	var body string
	err := w.conn.QueryRow(ctx, "SELECT draw, drawn_at, body FROM release_draws"+keyWhere+
		" ORDER BY drawn_at, draw LIMIT 1", keyArgs(key)...).Scan(&d.id, &d.at, &body)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return storedDraw{}, false, nil
		}
		return storedDraw{}, false, fmt.Errorf("release %s: read its stored draw (release_draws): %w", key, err)
	}
	d.body = []byte(body)
	return d, true, nil
}

// draw returns the canonical draw of key: the stored one when there is
// one (candidate is then not used), else candidate() after storing it.
// The "draw" hook runs after a new draw was stored.
func (w *Writer) draw(ctx context.Context, key Key, candidate func() ([]byte, error)) (storedDraw, error) {
	d, ok, err := w.readDraw(ctx, key)
	if err != nil || ok {
		return d, err
	}
	body, err := candidate()
	if err != nil {
		return storedDraw{}, err
	}
	if len(body) > maxDraw {
		return storedDraw{}, fmt.Errorf("release %s: draw of %d bytes is over %d; release fewer items", key, len(body), maxDraw)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return storedDraw{}, err
	}
	b, err := w.conn.PrepareBatch(ctx, "INSERT INTO release_draws (app, epoch, policy, k, draw, body, drawn_at)")
	if err != nil {
		return storedDraw{}, fmt.Errorf("release %s: prepare release_draws insert: %w", key, err)
	}
	if err := b.Append(key.App, key.Epoch, key.Policy, uint32(key.K), hex.EncodeToString(id[:]), string(body),
		time.Now().UTC().Truncate(time.Second)); err != nil {
		b.Abort()
		return storedDraw{}, fmt.Errorf("release %s: append draw: %w", key, err)
	}
	if err := b.Send(); err != nil {
		return storedDraw{}, fmt.Errorf("release %s: store the draw (nothing of the release was written; it will be drawn again): %w", key, err)
	}
	if err := w.runHook("draw"); err != nil {
		return storedDraw{}, err
	}
	// read back: a stage that stored a draw at the same moment may have won
	d, ok, err = w.readDraw(ctx, key)
	if err == nil && !ok {
		err = fmt.Errorf("release %s: the draw just stored is not readable (release_draws)", key)
	}
	return d, err
}

// checkDraw returns an error when the canonical draw of key is no longer
// id (a second release stage stored an earlier one meanwhile): the caller
// stops before writing the releases row and the next attempt writes the
// canonical draw.
func (w *Writer) checkDraw(ctx context.Context, key Key, id string) error {
	d, ok, err := w.readDraw(ctx, key)
	if err != nil {
		return err
	}
	if !ok || d.id != id {
		return fmt.Errorf("release %s: another release stage stored an earlier draw while this one wrote; the release will be redone with it (run one release stage per dataset)", key)
	}
	return nil
}

// encodePDDDraw is the stored form of a noisy PDD day.
func encodePDDDraw(r PDDRound) ([]byte, error) {
	return json.Marshal(pddDrawBody{V: drawVersion, Round: r})
}

// encodeDraw is the stored form of a threshold release's items and lines.
func encodeDraw(items []Item, undec []Undecrypted) ([]byte, error) {
	if items == nil {
		items = []Item{}
	}
	if undec == nil {
		undec = []Undecrypted{}
	}
	return json.Marshal(drawBody{V: drawVersion, Items: items, Undec: undec})
}
