// Package issuer is the Privacy Pass issuer role (RFC 9576 §3.2, §4: the
// issuer and, by default, its attester in one process): it authenticates a
// client identity through an Attester (default: the enrollment list of
// client Ed25519 keys in the keys directory) and issues, per identity and
// epoch, at most Limits.RandomnessTokens randomness tokens, at most
// Limits.ReportTokens report tokens (RFC 9578 §5, package protocol/token)
// and one ARC credential (draft-ietf-privacypass-arc-protocol), all
// blindly: it sees blinded elements only, so neither it nor a verifier can
// link a token to the identity it was issued to.
//
// Requests arrive by NATS request/reply on protocol.IssuerSubject (queue
// group "issuer": more processes share the load); public keys on
// protocol.IssuerPublicKeySubject. The per-identity counts live in the
// JetStream key-value bucket protocol.IssuerCountersBucket and are
// reserved with compare-and-set (Create for the first issuance, Update at
// the read revision after) before the answer leaves the issuer, so
// replicas cannot together over-issue and a restart keeps the counts. The
// bucket holds only counts keyed by SHA-256(identity ‖ epoch ‖ kind), each
// with the SHA-256 of its last RetryRecords requests
// (token.IssueRequest.ContentID, so that a client's retry after a lost
// answer is answered again without being counted twice, by any replica,
// after a restart too), and short-lived replay markers keyed by
// SHA-256(identity ‖ timestamp): nothing the issuer stores or logs names
// an artifact, and of the blinded elements only those hashes (of values the
// issuer sees anyway, unlinkable to a token without the blind, which only
// the client holds: RFC 9497 §3.3).
package issuer

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Queue is the NATS queue group of issuer processes.
const Queue = "issuer"

// Attester authenticates the client behind a request whose signature under
// req.Identity has been checked (RFC 9576 §3.2 attestation). It returns the
// identity that budgets are counted against, or an error wrapping
// token.ErrNotEnrolled (or another reason the client may read). An
// implementation may consult an account system or device attestation; the
// returned identity should be a stable hash, never a name.
type Attester interface {
	Attest(ctx context.Context, req *token.IssueRequest) (identity [32]byte, err error)
}

// Limits are the per-identity, per-epoch budgets: at most RandomnessTokens
// randomness tokens (N: OPRF elements) and ReportTokens report tokens (d)
// per identity and epoch; ARC credentials are always 1 per identity and
// epoch.
type Limits struct {
	RandomnessTokens, ReportTokens int
}

// limit is the budget of kind.
func (l Limits) limit(kind token.Kind) int {
	switch kind {
	case token.KindRandomness:
		return l.RandomnessTokens
	case token.KindReport:
		return l.ReportTokens
	case token.KindARC, token.KindPrio3Helper, token.KindPrio3Leader:
		return 1
	}
	return 0
}

// Refusal reasons, the label of crowdlog_issuer_refused_total.
const (
	ReasonMalformed   = "malformed"
	ReasonSignature   = "bad-signature"
	ReasonStale       = "stale"
	ReasonReplay      = "replay"
	ReasonNotEnrolled = "not-enrolled"
	ReasonBudget      = "over-budget"
	ReasonEpoch       = "epoch"
	ReasonInternal    = "internal"
	ReasonBadElements = "bad-elements"
	// ReasonKind: a kind this operator does not issue (ErrKindNotHeld).
	ReasonKind = "kind"
	// ReasonCorruptCounter: the identity's counter in the counters bucket
	// is not a decimal count (ErrCorruptCounter); the budget is treated
	// as exhausted.
	ReasonCorruptCounter = "corrupt-counter"
	// ReasonReplySubject: the reply subject is not a requester inbox
	// (natsconn.Accept); refused before the identity's counter or a
	// replay marker is touched.
	ReasonReplySubject = "reply-subject"

	replayTTLMargin    = time.Minute
	maxCASAttempts     = 32
	defaultReplyBudget = 10 * time.Second
)

var reasons = []string{ReasonMalformed, ReasonSignature, ReasonStale, ReasonReplay, ReasonNotEnrolled,
	ReasonBudget, ReasonEpoch, ReasonInternal, ReasonBadElements, ReasonKind, ReasonCorruptCounter, ReasonReplySubject}

// Service is the issuer. Set NC, KeysDir, Attester and Limits (or use
// New), then Run.
type Service struct {
	// Ready, when not nil, is closed by Run once its subscriptions have
	// reached the NATS server (a request sent after it is served); tests
	// wait on it instead of sleeping.
	Ready chan struct{}

	NC       *nats.Conn
	KeysDir  string // keys directory: token keys in issuer.keys/, one set per epoch an operator opened (keydir.EnsureIssuerKeys; `crowdlog issuer --epoch`)
	Attester Attester
	Limits   Limits
	Logger   *slog.Logger

	// EpochCheck, when set, refuses epochs it returns an error for (e.g.
	// epochs the pipeline has not opened); nil accepts any valid epoch name
	// (keydir.ValidIssuerEpoch).
	EpochCheck func(epoch string) error
	// Counters is the counters bucket; nil: Run opens (or creates)
	// protocol.IssuerCountersBucket on NC.
	Counters jetstream.KeyValue
	// Now is the clock for request timestamps; nil means time.Now.
	Now     func() time.Time
	Issued  atomic.Int64 // tokens and credentials issued
	Refused atomic.Int64 // requests refused (any reason)
	// Reissued counts requests answered again as retries (RetryRecords):
	// their tokens or credential were counted when first issued, not now.
	Reissued atomic.Int64

	refusedBy sync.Map // reason → *atomic.Int64
	keys      sync.Map // epoch → *epochKeys

	seedOnce sync.Once
	seed     []byte // the prio3 token seed (keydir.Prio3HelperTokenSeed or Prio3LeaderTokenSeed)
	seedErr  error
}

type epochKeys struct {
	rnd, rep *token.PrivateKey
	p3h      *token.PrivateKey // KindPrio3Helper: derived from the helper operator's seed
	p3l      *token.PrivateKey // KindPrio3Leader: derived from the leader operator's seed
	arc      *arc.PrivateKey
	arcPub   []byte
}

// New builds the issuer on keysDir with the enrollment list of keysDir as
// its attester (EnrollmentAttester) and limits. Call Run on the result.
func New(nc *nats.Conn, keysDir string, limits Limits, log *slog.Logger) (*Service, error) {
	if limits.RandomnessTokens < 0 || limits.ReportTokens < 0 {
		return nil, fmt.Errorf("issuer: negative limits %+v", limits)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Service{NC: nc, KeysDir: keysDir, Attester: &EnrollmentAttester{Dir: keysDir}, Limits: limits, Logger: log}, nil
}

func (s *Service) log() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// OpenCounters binds the counters bucket protocol.IssuerCountersBucket on
// nc (CountersConfig; natsconn.OpenKeyValue: looked up, never changed,
// created only where the credential may). Errors say to run `crowdlog
// streams` when it is missing.
func OpenCounters(ctx context.Context, nc *nats.Conn) (jetstream.KeyValue, error) {
	return OpenCountersBucket(ctx, nc, protocol.IssuerCountersBucket)
}

// OpenCountersBucket is OpenCounters on bucket (the randomness operator's
// issuer uses protocol.IssuerRandomnessCountersBucket: Subjects).
func OpenCountersBucket(ctx context.Context, nc *nats.Conn, bucket string) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	kv, err := natsconn.OpenKeyValue(ctx, js, CountersConfig(bucket, natsconn.Replicas(nc)))
	if err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	return kv, nil
}

// CountersConfig is the configuration of the issuers' counters bucket
// (protocol.IssuerCountersBucket or IssuerRandomnessCountersBucket): file
// storage, history 1, per-key TTL allowed for the replay markers, with
// replicas copies. The admin step (`crowdlog streams`) creates it.
func CountersConfig(bucket string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: bucket,
		Description: "crowdlog issuer: tokens issued per hashed identity, epoch and kind; replay markers",
		History:     1, Storage: jetstream.FileStorage, Replicas: replicas,
		LimitMarkerTTL: time.Second}
}

// Run serves until ctx ends. Malformed and refused requests get a refusal
// and are counted; they never stop the service.
func (s *Service) Run(ctx context.Context) error {
	log := s.log()
	if s.Attester == nil {
		return errors.New("issuer: no attester (use issuer.New or set Service.Attester)")
	}
	subj, keysSubj, bucket, err := s.Subjects()
	if err != nil {
		return err
	}
	if s.Counters == nil {
		kv, err := OpenCountersBucket(ctx, s.NC, bucket)
		if err != nil {
			return err
		}
		s.Counters = kv
	}
	respond := func(m *nats.Msg, b []byte, err error) {
		if err != nil {
			log.Error("issuer: encode response", "err", err)
			return
		}
		if err := natsconn.Respond(m, b); err != nil {
			log.Warn("issuer: respond", "err", err)
		}
	}
	// accept refuses, before any counter or replay marker changes, a
	// request whose answer could not go to a requester inbox
	// (natsconn.Accept)
	accept := func(m *nats.Msg) bool {
		if err := natsconn.Accept(m); err != nil {
			s.refuse(ReasonReplySubject, err)
			return false
		}
		return true
	}
	sub, err := s.NC.QueueSubscribe(subj, Queue, func(m *nats.Msg) {
		if !accept(m) {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, defaultReplyBudget)
		defer cancel()
		b, err := s.Handle(rctx, m.Data).MarshalBinary()
		respond(m, b, err)
	})
	if err != nil {
		return fmt.Errorf("issuer: subscribe %s: %w", subj, err)
	}
	defer sub.Unsubscribe()
	psub, err := s.NC.QueueSubscribe(keysSubj, Queue, func(m *nats.Msg) {
		if !accept(m) {
			return
		}
		b, err := s.HandleKeys(m.Data).MarshalBinary()
		respond(m, b, err)
	})
	if err != nil {
		return fmt.Errorf("issuer: subscribe %s: %w", keysSubj, err)
	}
	defer psub.Unsubscribe()
	if err := s.NC.Flush(); err != nil {
		return err
	}
	if s.Ready != nil {
		close(s.Ready)
	}
	log.Info("issuer ready", "subject", subj, "public_keys", keysSubj, "counters", bucket,
		"randomness_tokens", s.Limits.RandomnessTokens, "report_tokens", s.Limits.ReportTokens)
	<-ctx.Done()
	return nil
}

// Subjects returns where this issuer answers and keeps its counters, by the
// kinds its keys directory holds (keydir.IssuerKindsOf): the randomness
// operator's issuer (randomness tokens only) on
// protocol.IssuerRandomnessSubject and IssuerRandomnessPublicKeySubject
// with IssuerRandomnessCountersBucket; every other issuer (single host, or
// the aggregator's operator: report tokens and ARC) on IssuerSubject and
// IssuerPublicKeySubject with IssuerCountersBucket.
func (s *Service) Subjects() (subject, keysSubject, bucket string, err error) {
	held, err := keydir.IssuerKindsOf(s.KeysDir)
	if err != nil {
		return "", "", "", err
	}
	if len(held) == 0 {
		return "", "", "", fmt.Errorf("issuer: %w: the keys directory %s holds no issuer keys (run the issuer at the aggregator's or the randomness operator)", ErrKindNotHeld, s.KeysDir)
	}
	if slices.Equal(held, []string{token.KindRandomness.String()}) {
		return protocol.IssuerRandomnessSubject, protocol.IssuerRandomnessPublicKeySubject, protocol.IssuerRandomnessCountersBucket, nil
	}
	if slices.Equal(held, []string{token.KindPrio3Helper.String()}) {
		return protocol.IssuerPrio3HelperSubject, protocol.IssuerPrio3HelperPublicKeySubject, protocol.IssuerPrio3HelperCountersBucket, nil
	}
	if slices.Equal(held, []string{token.KindPrio3Leader.String()}) {
		return protocol.IssuerPrio3LeaderSubject, protocol.IssuerPrio3LeaderPublicKeySubject, protocol.IssuerPrio3LeaderCountersBucket, nil
	}
	return protocol.IssuerSubject, protocol.IssuerPublicKeySubject, protocol.IssuerCountersBucket, nil
}

// refuse counts a refusal by reason and makes its response.
func (s *Service) refuse(reason string, err error) *token.IssueResponse {
	s.Refused.Add(1)
	c, _ := s.refusedBy.LoadOrStore(reason, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	return &token.IssueResponse{Refusal: protocol.Refusal{Error: err.Error()}}
}

// RefusedBy is the number of refusals of reason (Reason*).
func (s *Service) RefusedBy(reason string) int64 {
	if c, ok := s.refusedBy.Load(reason); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// ErrEpochNotOpen is wrapped when a request names an epoch whose issuer
// keys an operator never created (`crowdlog issuer --epoch E`,
// keydir.EnsureIssuerKeys; `crowdlog run` creates its own). The issuer never
// creates keys on a request: client-named epochs would otherwise each write
// three key files (the epoch-flooding attack, docs/threat-model.md).
var ErrEpochNotOpen = errors.New("epoch not opened at the issuer")

// ErrKindNotHeld is wrapped when a request names a token kind whose keys
// this issuer's keys directory does not hold: in a role directory
// (keydir.GenerateRole) the aggregator's operator issues report tokens and
// ARC credentials and the randomness operator randomness tokens
// (docs/threat-model.md, "Key custody").
var ErrKindNotHeld = errors.New("token kind not issued by this operator")

// epochKeys loads the token keys of epoch that KeysDir holds
// (keydir.IssuerKindsOf: all three kinds on a single host, the role's
// kinds in a role directory); it never creates them. Errors wrap
// ErrEpochNotOpen when the epoch's key files do not exist.
func (s *Service) epochKeys(epoch string) (*epochKeys, error) {
	if k, ok := s.keys.Load(epoch); ok {
		return k.(*epochKeys), nil
	}
	if _, _, ok := token.ParsePrio3Epoch(epoch); ok {
		return s.prio3Keys(epoch)
	}
	if !keydir.ValidIssuerEpoch(epoch) {
		return nil, fmt.Errorf("epoch %q is not 1..64 of [A-Za-z0-9._-]", epoch)
	}
	if s.EpochCheck != nil {
		if err := s.EpochCheck(epoch); err != nil {
			return nil, err
		}
	}
	held, err := keydir.IssuerKindsOf(s.KeysDir)
	if err != nil {
		return nil, err
	}
	if len(held) == 0 {
		return nil, fmt.Errorf("%w: the keys directory %s holds no issuer keys (run the issuer at the aggregator's or the randomness operator)", ErrKindNotHeld, s.KeysDir)
	}
	notOpen := func(err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %q (the operator opens it with 'crowdlog issuer --epoch %s')", ErrEpochNotOpen, epoch, epoch)
		}
		return err
	}
	k := &epochKeys{}
	if slices.Contains(held, token.KindRandomness.String()) {
		if k.rnd, err = keydir.LoadTokenKey(s.KeysDir, token.KindRandomness, epoch); err != nil {
			return nil, notOpen(err)
		}
	}
	if slices.Contains(held, token.KindReport.String()) {
		if k.rep, err = keydir.LoadTokenKey(s.KeysDir, token.KindReport, epoch); err != nil {
			return nil, notOpen(err)
		}
	}
	if slices.Contains(held, "arc") {
		if k.arc, err = keydir.LoadARCKey(s.KeysDir, epoch); err != nil {
			return nil, notOpen(err)
		}
		if k.arcPub, err = k.arc.Public().MarshalBinary(); err != nil {
			return nil, err
		}
	}
	v, _ := s.keys.LoadOrStore(epoch, k)
	return v.(*epochKeys), nil
}

// prio3Keys returns the KindPrio3Helper (or KindPrio3Leader) key of a
// Prio3 epoch ("campaign/day", token.Prio3Epoch), derived from the token
// seed of the keys directory (keydir.Prio3HelperTokenSeed, or
// Prio3LeaderTokenSeed); only an issuer whose directory holds that kind
// (the prio3-helper, or prio3-leader, operator's) has one. Keys are derived
// per request (one hash-to-scalar), never cached.
func (s *Service) prio3Keys(epoch string) (*epochKeys, error) {
	held, err := keydir.IssuerKindsOf(s.KeysDir)
	if err != nil {
		return nil, err
	}
	kind, seedFile := token.KindPrio3Helper, keydir.Prio3HelperTokenSeed
	if slices.Contains(held, token.KindPrio3Leader.String()) {
		kind, seedFile = token.KindPrio3Leader, keydir.Prio3LeaderTokenSeed
	} else if !slices.Contains(held, token.KindPrio3Helper.String()) {
		return nil, fmt.Errorf("%w: prio3 tokens (each Prio3 aggregator's operator issues its own: crowdlog issuer --role prio3-helper or prio3-leader)", ErrKindNotHeld)
	}
	if s.EpochCheck != nil {
		if err := s.EpochCheck(epoch); err != nil {
			return nil, err
		}
	}
	s.seedOnce.Do(func() {
		s.seed, s.seedErr = keydir.LoadPrio3TokenSeed(filepath.Join(s.KeysDir, seedFile))
	})
	if s.seedErr != nil {
		return nil, s.seedErr
	}
	k, err := token.DeriveKey(kind, epoch, s.seed)
	if err != nil {
		return nil, err
	}
	if kind == token.KindPrio3Leader {
		return &epochKeys{p3l: k}, nil
	}
	// not cached: any client may name any day, and a cache would grow
	// with every name
	return &epochKeys{p3h: k}, nil
}

// HandleKeys answers a KeysRequest: the public keys of the epoch that this
// issuer holds (token.KeysResponse: an empty token key is issued by the
// other operator), or a refusal wrapping ErrEpochNotOpen for an epoch no
// operator opened.
func (s *Service) HandleKeys(data []byte) *token.KeysResponse {
	q, err := token.ParseKeysRequest(data)
	if err != nil {
		return &token.KeysResponse{Refusal: protocol.Refusal{Error: err.Error()}}
	}
	k, err := s.epochKeys(q.Epoch)
	if err != nil {
		s.log().Warn("issuer: keys of epoch", "epoch", q.Epoch, "err", err)
		return &token.KeysResponse{Refusal: protocol.Refusal{Error: err.Error()}}
	}
	// the kinds this issuer holds; the other token key stays empty (the
	// randomness operator's issuer answers for it)
	out := &token.KeysResponse{Epoch: q.Epoch, ARC: k.arcPub}
	if k.rnd != nil {
		out.Randomness = k.rnd.Public()
	}
	if k.rep != nil {
		out.Report = k.rep.Public()
	}
	if k.p3h != nil {
		out.Prio3Helper = k.p3h.Public()
	}
	if k.p3l != nil {
		out.Prio3Leader = k.p3l.Public()
	}
	return out
}

// Handle answers one IssueRequest: parse, signature, freshness, replay,
// attestation, budget reservation, issuance. A request whose ContentID is
// among the identity's recent issuances of the epoch and kind
// (RetryRecords) is a retry: answered again (the same evaluations; the
// same ARC response) without being counted (Reissued).
func (s *Service) Handle(ctx context.Context, data []byte) *token.IssueResponse {
	q, err := token.ParseIssueRequest(data)
	if err != nil {
		return s.refuse(ReasonMalformed, err)
	}
	if err := q.VerifySignature(); err != nil {
		return s.refuse(ReasonSignature, err)
	}
	now := s.now()
	if d := now.Sub(q.Timestamp); d > token.MaxClockSkew || d < -token.MaxClockSkew {
		return s.refuse(ReasonStale, fmt.Errorf("%w: signed at %s, %s from the issuer's clock (allowed ±%s; check the client's clock)",
			token.ErrStale, q.Timestamp.UTC().Format(time.RFC3339), d.Round(time.Second), token.MaxClockSkew))
	}
	identity, err := s.Attester.Attest(ctx, q)
	if err != nil {
		if errors.Is(err, token.ErrNotEnrolled) {
			return s.refuse(ReasonNotEnrolled, err)
		}
		s.log().Error("issuer: attestation failed", "err", err)
		return s.refuse(ReasonInternal, fmt.Errorf("attestation failed: %v", err))
	}
	if err := s.markFresh(ctx, identity, q.Timestamp); err != nil {
		if errors.Is(err, token.ErrReplay) {
			return s.refuse(ReasonReplay, err)
		}
		s.log().Error("issuer: replay marker", "err", err)
		return s.refuse(ReasonInternal, unavailable)
	}
	var out *token.IssueResponse
	if q.Kind == token.KindARC {
		out = s.issueARC(ctx, identity, q)
	} else {
		out = s.issueTokens(ctx, identity, q)
	}
	return out
}

func (s *Service) issueTokens(ctx context.Context, identity [32]byte, q *token.IssueRequest) *token.IssueResponse {
	keys, err := s.epochKeys(q.Epoch)
	if err != nil {
		return s.refuse(ReasonEpoch, err)
	}
	key := keys.rnd
	switch q.Kind {
	case token.KindReport:
		key = keys.rep
	case token.KindPrio3Helper:
		key = keys.p3h
	case token.KindPrio3Leader:
		key = keys.p3l
	}
	if key == nil {
		return s.refuse(ReasonKind, fmt.Errorf("%w: %s tokens (ask the operator that verifies them)", ErrKindNotHeld, q.Kind))
	}
	limit := s.Limits.limit(q.Kind)
	n := len(q.Blinded)
	id := q.ContentID()
	c, err := s.count(ctx, identity, q.Epoch, q.Kind)
	if err != nil {
		return s.internal(err)
	}
	if !c.has(id) && c.used+n > limit { // a retry (c.has) was counted when first issued
		return s.refuse(ReasonBudget, budgetError(q.Epoch, q.Kind, limit, c.used, n))
	}
	// evaluate first (it also checks the elements), reserve second: the
	// answer leaves only once the reservation holds
	ev, proof, err := key.Issue(q.Blinded)
	if err != nil {
		return s.refuse(ReasonBadElements, err)
	}
	used, retry, err := s.reserve(ctx, identity, q.Epoch, q.Kind, n, limit, id)
	if err != nil {
		if errors.Is(err, token.ErrBudget) {
			return s.refuse(ReasonBudget, err)
		}
		return s.internal(err)
	}
	if retry {
		s.Reissued.Add(1)
	} else {
		s.Issued.Add(int64(n))
	}
	s.log().Debug("issuer: issued", "identity", shortID(identity), "epoch", q.Epoch, "kind", q.Kind.String(), "count", n, "used", used, "retry", retry)
	return &token.IssueResponse{Kind: q.Kind, Evaluated: ev, Proof: proof, Used: uint32(used), Limit: uint32(limit)}
}

func (s *Service) issueARC(ctx context.Context, identity [32]byte, q *token.IssueRequest) *token.IssueResponse {
	keys, err := s.epochKeys(q.Epoch)
	if err != nil {
		return s.refuse(ReasonEpoch, err)
	}
	if keys.arc == nil {
		return s.refuse(ReasonKind, fmt.Errorf("%w: ARC credentials (ask the aggregator's operator)", ErrKindNotHeld))
	}
	id := q.ContentID()
	if c, err := s.count(ctx, identity, q.Epoch, token.KindARC); err != nil {
		return s.internal(err)
	} else if !c.has(id) && c.used >= 1 { // a retry (c.has) was counted when first issued
		return s.refuse(ReasonBudget, budgetError(q.Epoch, token.KindARC, 1, c.used, 1))
	}
	creq, err := arc.ParseCredentialRequest(q.ARC)
	if err != nil {
		return s.refuse(ReasonBadElements, err)
	}
	// randomness derived from the key and the request: a retry gets the
	// very same response, never a second credential
	rnd, err := arcRandomness(keys.arc, id)
	if err != nil {
		return s.internal(err)
	}
	cresp, err := keys.arc.Issue(rnd, creq)
	if err != nil {
		return s.refuse(ReasonBadElements, err)
	}
	b, err := cresp.MarshalBinary()
	if err != nil {
		return s.refuse(ReasonBadElements, err)
	}
	_, retry, err := s.reserve(ctx, identity, q.Epoch, token.KindARC, 1, 1, id)
	if err != nil {
		if errors.Is(err, token.ErrBudget) {
			return s.refuse(ReasonBudget, err)
		}
		return s.internal(err)
	}
	if retry {
		s.Reissued.Add(1)
	} else {
		s.Issued.Add(1)
	}
	s.log().Debug("issuer: issued", "identity", shortID(identity), "epoch", q.Epoch, "kind", token.KindARC.String(), "count", 1, "retry", retry)
	return &token.IssueResponse{Kind: token.KindARC, ARC: b, Used: 1, Limit: 1}
}

// ErrCorruptCounter is wrapped when a counter of the counters bucket
// holds something other than a decimal count: only the issuer writes
// there, so another writer reached the bucket. The issuer fails closed:
// the identity's budget counts as exhausted (ReasonCorruptCounter) until
// an operator deletes the key, and each such refusal is logged as an
// error.
var ErrCorruptCounter = errors.New("issuer: counter is not a count")

func (s *Service) internal(err error) *token.IssueResponse {
	if errors.Is(err, ErrCorruptCounter) {
		// no identity, key or value in the log: the key is derived from
		// the identity
		s.log().Error("issuer: a counter in the counters bucket is not a count; the identity's budget counts as exhausted (something besides the issuer wrote to the bucket: check its writers, then delete the key)",
			"err", err)
		return s.refuse(ReasonCorruptCounter, fmt.Errorf("%w: budget exhausted for this epoch", token.ErrBudget))
	}
	s.log().Error("issuer: counter store", "err", err)
	return s.refuse(ReasonInternal, unavailable)
}

// unavailable is the refusal of a request the counter store failed
// (token.ErrUnavailable): nothing was counted, the client sends it again.
var unavailable = fmt.Errorf("%w (counter store); retry", token.ErrUnavailable)

func budgetError(epoch string, kind token.Kind, limit, used, asked int) error {
	err := token.BudgetError(epoch, kind, limit, used)
	if used < limit {
		return fmt.Errorf("%w (asked for %d more)", err, asked)
	}
	return err
}

// CounterKey is the counters-bucket key of (identity, epoch, kind): the hex
// of SHA-256(identity ‖ u8 len epoch ‖ epoch ‖ kind).
func CounterKey(identity [32]byte, epoch string, kind token.Kind) string {
	h := sha256.New()
	h.Write(identity[:])
	h.Write([]byte{byte(len(epoch))})
	h.Write([]byte(epoch))
	h.Write([]byte{byte(kind)})
	return hex.EncodeToString(h.Sum(nil))
}

// count reads the counter of (identity, epoch, kind): the number issued
// so far and the recent issuances (RetryRecords).
func (s *Service) count(ctx context.Context, identity [32]byte, epoch string, kind token.Kind) (counter, error) {
	c, _, err := s.get(ctx, CounterKey(identity, epoch, kind))
	return c, err
}

func (s *Service) get(ctx context.Context, key string) (c counter, rev uint64, err error) {
	e, err := s.Counters.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return counter{}, 0, nil
	}
	if err != nil {
		return counter{}, 0, err
	}
	if c, err = parseCounter(e.Value()); err != nil {
		return counter{}, 0, err
	}
	return c, e.Revision(), nil
}

// reserve adds n to the count of (identity, epoch, kind) unless that
// passes limit, and records id (token.IssueRequest.ContentID) among its
// recent issuances, with compare-and-set so concurrent replicas
// serialize: Create when no count exists, Update at the revision read
// otherwise; a conflict rereads and retries. When id is already recorded
// the request is a retry: nothing changes and retry is true. It returns
// the count after; errors wrap token.ErrBudget when the budget does not
// allow n more.
func (s *Service) reserve(ctx context.Context, identity [32]byte, epoch string, kind token.Kind, n, limit int, id [32]byte) (used int, retry bool, err error) {
	key := CounterKey(identity, epoch, kind)
	for range maxCASAttempts {
		c, rev, err := s.get(ctx, key)
		if err != nil {
			return 0, false, err
		}
		if c.has(id) {
			return c.used, true, nil
		}
		if c.used+n > limit {
			return 0, false, budgetError(epoch, kind, limit, c.used, n)
		}
		val := c.charge(n, id).encode()
		if rev == 0 {
			_, err = s.Counters.Create(ctx, key, val)
		} else {
			_, err = s.Counters.Update(ctx, key, val, rev)
		}
		if err == nil {
			return c.used + n, false, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, false, err
		}
		if err := ctx.Err(); err != nil {
			return 0, false, err
		}
	}
	return 0, false, fmt.Errorf("counter of %s: %d compare-and-set conflicts in a row", shortID(identity), maxCASAttempts)
}

// markFresh records (identity, timestamp) for 2·MaxClockSkew plus a
// margin; a second request of the identity with the same timestamp (a
// replay of a signed request, at any replica) errors with token.ErrReplay.
// Clients give each request a fresh millisecond timestamp.
func (s *Service) markFresh(ctx context.Context, identity [32]byte, ts time.Time) error {
	var b [40]byte
	copy(b[:], identity[:])
	binary.BigEndian.PutUint64(b[32:], uint64(ts.UnixMilli()))
	sum := sha256.Sum256(b[:])
	key := "replay-" + hex.EncodeToString(sum[:])
	_, err := s.Counters.Create(ctx, key, nil, jetstream.KeyTTL(2*token.MaxClockSkew+replayTTLMargin))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: this identity already sent a request signed at %s (sign each request with a fresh timestamp)", token.ErrReplay, ts.UTC().Format(time.RFC3339Nano))
	}
	return err
}

// shortID is what logs show of a hashed identity: its first 8 bytes, hex.
func shortID(identity [32]byte) string { return hex.EncodeToString(identity[:8]) }

// IdentityOf is the identity the enrollment attester counts against:
// SHA-256("crowdlog-v1 issuer identity" ‖ Ed25519 public key).
func IdentityOf(pub ed25519.PublicKey) [32]byte {
	return sha256.Sum256(append([]byte("crowdlog-v1 issuer identity"), pub...))
}
