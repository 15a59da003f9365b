package natsconn

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// ReplyPrefixes are the reply subjects a responder answers: a requester's
// inbox ("_INBOX.", nats.go's default and natsauth.InboxPrefix) and the
// reply subjects nats-server gives requests that arrive through an
// account's service import ("_R_."; the clients' account reaches the
// responders only that way). Any other reply subject, such as a JetStream
// API subject ("$JS.API.STREAM.PURGE.<stream>"), a key-value key
// ("$KV.<bucket>.<key>") or another role's subject, is refused: answering
// it would let the requester publish a message of the responder's
// choosing with the responder's rights.
var ReplyPrefixes = []string{"_INBOX.", "_R_."}

// ErrReplySubject is returned by Respond for a reply subject outside
// ReplyPrefixes.
var ErrReplySubject = errors.New("natsconn: reply subject is not a requester inbox")

// refusedReplies counts the replies Respond refused in this process.
var refusedReplies atomic.Uint64

// RefusedReplies returns how many replies Respond refused in this process
// (also exported as crowdlog_nats_refused_replies_total, RegisterMetrics).
func RefusedReplies() uint64 { return refusedReplies.Load() }

// ReplyAllowed reports whether reply is a subject a responder may answer:
// non-empty, below one of ReplyPrefixes, without wildcards.
func ReplyAllowed(reply string) bool {
	if reply == "" || strings.ContainsAny(reply, "*> \t") {
		return false
	}
	for _, p := range ReplyPrefixes {
		if strings.HasPrefix(reply, p) && len(reply) > len(p) {
			return true
		}
	}
	return false
}

// respondUnchecked, when set (tests only), makes Respond answer every
// reply subject: the pre-check behaviour the attack tests use as their
// control.
var respondUnchecked atomic.Bool

// AnswerAnyReplyForTesting makes Respond answer every reply subject, as
// m.Respond does, until the returned function restores the check. Only
// for tests that compare an attack against the unchecked responders (the
// control of an attack test); never call it in a program.
func AnswerAnyReplyForTesting() (restore func()) {
	respondUnchecked.Store(true)
	return func() { respondUnchecked.Store(false) }
}

// Respond answers request m with data when m.Reply is a requester inbox
// (ReplyAllowed); otherwise it publishes nothing, counts the refusal
// (RefusedReplies), logs it at warn level (the subject kind only, never
// the request) and returns an error wrapping ErrReplySubject. Every
// crowdlog responder answers through it instead of m.Respond.
func Respond(m *nats.Msg, data []byte) error {
	if !ReplyAllowed(m.Reply) && !respondUnchecked.Load() {
		refusedReplies.Add(1)
		slog.Warn("NATS: refused to answer a request whose reply subject is not a requester inbox",
			"subject", m.Subject, "reply_prefix", replyKind(m.Reply))
		return fmt.Errorf("answer %s: %w (replies go only to %v)", m.Subject, ErrReplySubject, ReplyPrefixes)
	}
	return m.Respond(data)
}

// Accept reports, before a responder handles request m, whether it may:
// m.Reply is a requester inbox (ReplyAllowed). Every crowdlog responder
// calls it before it changes any state (spends a token, counts an
// identity's issuance, registers a client, commits a report), so a
// request whose answer could not be sent anyway — delivered by a push
// consumer, a stream's republish, or published naming another subject as
// its reply — has no effect at all. A refusal is counted (RefusedReplies,
// crowdlog_nats_refused_replies_total), logged at warn level (the subject
// kind only) and returned as an error wrapping ErrReplySubject.
// AnswerAnyReplyForTesting turns the check off as it does Respond's.
func Accept(m *nats.Msg) error {
	if ReplyAllowed(m.Reply) || respondUnchecked.Load() {
		return nil
	}
	CountRefusedReply()
	slog.Warn("NATS: refused a request whose reply subject is not a requester inbox, before handling it",
		"subject", m.Subject, "reply_prefix", replyKind(m.Reply))
	return fmt.Errorf("request on %s: %w (replies go only to %v)", m.Subject, ErrReplySubject, ReplyPrefixes)
}

// CountRefusedReply counts one request refused for its reply subject by a
// responder's own check (as Accept and Respond count theirs).
func CountRefusedReply() { refusedReplies.Add(1) }

// replyKind is the first token of reply (e.g. "$JS", "$KV", "crowdlog"),
// enough to see what was tried without logging the whole subject.
func replyKind(reply string) string {
	if reply == "" {
		return "(none)"
	}
	first, _, _ := strings.Cut(reply, ".")
	return first
}

// RegisterMetrics registers crowdlog_nats_refused_replies_total
// (RefusedReplies, a counter) on reg.
func RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "crowdlog_nats_refused_replies_total",
		Help: "Requests this process did not answer because their reply subject was not a requester inbox (_INBOX. or _R_.).",
	}, func() float64 { return float64(refusedReplies.Load()) }))
}
