// Package spent is the spent-token store of Privacy Pass redemption
// (RFC 9576 §3.5 double-spend prevention): a JetStream key-value bucket
// (protocol.SpentTokensBucket) in which a token's spend id is created once
// and never overwritten, so every replica of a verifier (the randomness
// service) refuses a second spend, across restarts.
//
// A spend records a binding next to the id: 32 bytes naming what the token
// paid for (the randomness service uses SHA-256 of the epoch and the blinded
// element). Spending the same id again with the same binding is a retry of
// the same request (its answer was lost) and is not a double spend;
// answering it again reveals nothing new because a VOPRF evaluation of the
// same element is the same. Another binding is a double spend.
//
// Spend publishes a whole batch asynchronously (one JetStream publish per
// token with "expected last subject sequence 0", the create-only
// condition KeyValue.Create uses) and then waits for the acks: a request of
// 100 tokens costs about one round trip, not 100.
package spent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
)

// Spend is one token to mark spent: ID is the token's spend id
// (token.Token.SpendID), Binding what it paid for (see the package doc).
type Spend struct {
	ID      [32]byte
	Binding [32]byte
}

// Options of Open.
type Options struct {
	// Bucket is the key-value bucket; "" means protocol.SpentTokensBucket.
	Bucket string
	// TTL is how long a spend is kept (0: forever). Set it longer than a
	// token key lives (its epoch plus grace): a spend may be forgotten only
	// once its token no longer verifies. Applies when the bucket is created.
	TTL time.Duration
	// Replicas of a new bucket; 0 means natsconn.Replicas (1 on a single
	// server, up to 3 on a cluster). An existing bucket keeps its own.
	Replicas int
}

// maxPending bounds the asynchronous publishes in flight per Store (a few
// full randomness batches of 4096 elements).
const maxPending = 1 << 15

// Store marks tokens spent in a JetStream key-value bucket. Safe for
// concurrent use.
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string // "$KV.<bucket>."
}

// Open binds the spent-token bucket (BucketConfig; natsconn.OpenKeyValue:
// looked up, never changed, created only where the credential may).
// Errors say to run `crowdlog streams` when it is missing.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Store, error) {
	if o.Bucket == "" {
		o.Bucket = protocol.SpentTokensBucket
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		return nil, fmt.Errorf("spent: %w", err)
	}
	if o.Replicas <= 0 {
		o.Replicas = natsconn.Replicas(nc)
	}
	kv, err := natsconn.OpenKeyValue(ctx, js, BucketConfig(o))
	if err != nil {
		return nil, fmt.Errorf("spent: %w", err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("spent: status of bucket %s: %w", o.Bucket, err)
	}
	if err := CheckTTL(st.TTL(), o.TTL); err != nil {
		return nil, fmt.Errorf("spent: bucket %s: %w", o.Bucket, err)
	}
	return &Store{js: js, kv: kv, prefix: "$KV." + o.Bucket + "."}, nil
}

// ErrTTLTooShort: the spent-token bucket forgets a spend before the
// opener's tokens stop verifying, so a forgotten token could be spent
// again (a double spend after the bucket's TTL).
var ErrTTLTooShort = errors.New("spent-token bucket forgets spends too early")

// CheckTTL compares the bucket's TTL have with the TTL the opener needs
// (both 0: forever): the bucket must keep spends at least as long. Errors
// wrap ErrTTLTooShort and name the `crowdlog streams --spend-ttl` value
// that fixes it.
func CheckTTL(have, need time.Duration) error {
	if have == 0 || (need > 0 && have >= need) {
		return nil
	}
	want := "0 (forever)"
	if need > 0 {
		want = need.String()
	}
	return fmt.Errorf("%w: it keeps a spend %v, this service needs %s (a spend forgotten while its token still verifies can be spent again); recreate it with `crowdlog streams --spend-ttl %s`", ErrTTLTooShort, have, want, strings.Fields(want)[0])
}

// Key is the bucket key of a spend id: its lower-case hex.
func Key(id [32]byte) string { return hex.EncodeToString(id[:]) }

// Spend marks every spend spent, in one asynchronous batch, and reports
// which were double spends: double[i] is true when spends[i].ID was spent
// before (by any replica, or earlier in this batch) with another binding.
// A spend whose ID was spent with the same binding is not double (a
// retried request). Spends that were not double are recorded even when
// others of the batch were: the caller decides whether the request as a
// whole goes on. Errors (ctx ended, JetStream unavailable, no ack in
// time) leave the outcome of each spend unknown: treat the request as
// refused; a retry with the same bindings is accepted.
func (s *Store) Spend(ctx context.Context, spends []Spend) (double []bool, err error) {
	double = make([]bool, len(spends))
	futures := make([]jetstream.PubAckFuture, len(spends))
	for i, sp := range spends {
		m := nats.NewMsg(s.prefix + Key(sp.ID))
		m.Data = append([]byte(nil), sp.Binding[:]...)
		if futures[i], err = s.js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
			return nil, fmt.Errorf("spent: publish spend %d of %d: %w", i+1, len(spends), err)
		}
	}
	var conflicts []int
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if !wrongLastSequence(err) {
				return nil, fmt.Errorf("spent: spend %d of %d: %w", i+1, len(spends), err)
			}
			conflicts = append(conflicts, i)
		case <-ctx.Done():
			return nil, fmt.Errorf("spent: waiting for %d spend acks: %w", len(spends), ctx.Err())
		}
	}
	for _, i := range conflicts {
		e, err := s.kv.Get(ctx, Key(spends[i].ID))
		if err != nil {
			return nil, fmt.Errorf("spent: read the earlier spend of a token: %w", err)
		}
		double[i] = string(e.Value()) != string(spends[i].Binding[:])
	}
	return double, nil
}

// Spent reports whether id was spent, and with which binding.
func (s *Store) Spent(ctx context.Context, id [32]byte) (binding [32]byte, ok bool, err error) {
	e, err := s.kv.Get(ctx, Key(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return binding, false, nil
	}
	if err != nil {
		return binding, false, fmt.Errorf("spent: %w", err)
	}
	copy(binding[:], e.Value())
	return binding, true, nil
}

// wrongLastSequence reports a create-only conflict: the key exists (code
// 10071, or 10164 on replicated streams).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// BucketConfig is the configuration of the spent-token bucket of o
// (o.Bucket, protocol.SpentTokensBucket when empty): file storage,
// history 1, o.TTL per entry (0: kept), o.Replicas copies (<= 0: 1). The
// admin step (`crowdlog streams`) creates it.
func BucketConfig(o Options) jetstream.KeyValueConfig {
	if o.Bucket == "" {
		o.Bucket = protocol.SpentTokensBucket
	}
	return jetstream.KeyValueConfig{Bucket: o.Bucket,
		Description: "crowdlog spent Privacy Pass tokens (spend id → binding)", History: 1,
		TTL: o.TTL, Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1)}
}
