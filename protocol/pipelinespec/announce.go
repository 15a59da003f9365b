package pipelinespec

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// MaxAnnouncement bounds an Announcement's JSON, in bytes.
const MaxAnnouncement = 1 << 20

// Request is a client's request on protocol.PipelineSubject (JSON, at
// most MaxRequest bytes; an empty or unparsable request is the zero
// Request): Context, when set, is the Context.Key whose counts the
// answer carries. Every aggregator process answers, so a client collects
// the answers for a short while and sums them.
type Request struct {
	Context string `json:"context,omitempty"`
	// Nonce (base64 in the JSON, NonceSize random bytes) is echoed in
	// each answer's SignedAnswer, so that a client knows the answer is
	// to this request and not a recorded one. Absent, or longer than
	// NonceSize (dropped by ParseRequest): the answers echo none.
	Nonce []byte `json:"nonce,omitempty"`
}

// MaxRequest bounds a Request's JSON, in bytes.
const MaxRequest = 1024

// ParseRequest decodes a Request; anything else (too long, not JSON) is
// the zero Request, which asks for the pipelines only.
func ParseRequest(b []byte) Request {
	var r Request
	if len(b) > MaxRequest || json.Unmarshal(b, &r) != nil {
		return Request{}
	}
	if len(r.Nonce) > NonceSize {
		r.Nonce = nil
	}
	return r
}

// Announcement is an aggregator process's answer on
// protocol.PipelineSubject: the pipeline definitions it serves and what it
// did with the reports it read of the requested context.
//
// Nothing in it is secret: the definitions are public, and the counts are
// totals over every client of a (pipeline, app, epoch). Counts are since
// the process started, over the partitions it owned; a partition rebuilt
// by replaying the reports topic counts its replayed reports again.
type Announcement struct {
	// Process is a random id of the answering process, so that a client
	// that hears two answers from one process (a retry) counts it once.
	Process string `json:"process"`
	// Pipelines are the canonical texts (Spec.Canonical) of the
	// definitions served; none: the process serves every definition
	// (started without --pipeline).
	Pipelines []string `json:"pipelines,omitempty"`
	// Reports counts the reports read of the requested Context.Key (at
	// most that one key; none when the process read none): how many were
	// admitted (their pipeline served, epoch open, token valid) and how
	// many refused, by the aggregator's drop reason (pipeline-mismatch,
	// unknown-epoch, late, no-token, …).
	Reports map[string]Counts `json:"reports,omitempty"`
	// Withheld is true when the process does not disclose the requested
	// context's counts: its pipeline is a DP definition (an exact report
	// count is outside the release's (ε, δ)) or one it does not serve.
	Withheld bool `json:"withheld,omitempty"`
	// Signed is the process's SignedPipelines encoding (base64 in the
	// JSON): its Process and Pipelines signed by the aggregator operator's
	// key. A client that pins that key uses the definitions of Signed
	// only and ignores an answer whose Signed is missing or does not
	// verify; Pipelines stays for clients that do not verify. Signed
	// once per process, it verifies forever: a recorded answer replayed
	// after the operator changed the definitions verifies too, so a
	// client of this revision uses SignedAnswer and Signed stays for
	// older clients. The counts (Reports, Withheld) are not in it.
	Signed []byte `json:"signed,omitempty"`
	// SignedAnswer is the process's SignedAnswer encoding (base64 in the
	// JSON): its Process, Pipelines and the requested context's counts
	// (Reports, Withheld), with the request's Nonce and Context, signed
	// by the aggregator operator's key for this request. A client that
	// pins the key and sent a nonce uses this field only, and ignores an
	// answer whose SignedAnswer is missing, does not verify or echoes
	// another nonce or context.
	SignedAnswer []byte `json:"signed_answer,omitempty"`
}

// Counts are one report context's counts in an Announcement.
type Counts struct {
	Admitted int64            `json:"admitted"`
	Refused  map[string]int64 `json:"refused,omitempty"`
}

// Context is what a report claims that an Announcement counts by: the
// pipeline digest it was sealed for (zero: none), its application and
// its epoch.
type Context struct {
	Pipeline   [32]byte
	App, Epoch string
}

// Key is c as an Announcement's Reports key: "DIGEST/APP/EPOCH", DIGEST as
// DigestString writes it.
func (c Context) Key() string { return DigestString(c.Pipeline) + "/" + c.App + "/" + c.Epoch }

// ParseContextKey inverts Context.Key for an app without "/" (every
// application's name); ok is false for a key not of that form.
func ParseContextKey(key string) (c Context, ok bool) {
	d, rest, ok1 := strings.Cut(key, "/")
	app, epoch, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 {
		return Context{}, false
	}
	if d != "none" {
		b, err := hex.DecodeString(d)
		if err != nil || len(b) != 32 || [32]byte(b) == ([32]byte{}) || hex.EncodeToString(b) != d {
			return Context{}, false
		}
		c.Pipeline = [32]byte(b)
	}
	c.App, c.Epoch = app, epoch
	return c, true
}

// ParseAnnouncement decodes an Announcement (at most MaxAnnouncement
// bytes) and parses every canonical text in it. Errors wrap ErrMalformed.
func ParseAnnouncement(b []byte) (Announcement, []Spec, error) {
	if len(b) > MaxAnnouncement {
		return Announcement{}, nil, fmt.Errorf("%w: announcement of %d bytes, at most %d", ErrMalformed, len(b), MaxAnnouncement)
	}
	var a Announcement
	if err := json.Unmarshal(b, &a); err != nil {
		return Announcement{}, nil, fmt.Errorf("%w: announcement: %v", ErrMalformed, err)
	}
	specs := make([]Spec, len(a.Pipelines))
	for i, c := range a.Pipelines {
		s, err := Parse(c)
		if err != nil {
			return Announcement{}, nil, fmt.Errorf("announcement pipeline %d: %w", i, err)
		}
		specs[i] = s
	}
	return a, specs, nil
}
