package pipelinespec

import (
	"encoding/json"
	"fmt"
)

// MaxAnnouncement bounds an Announcement's JSON, in bytes.
const MaxAnnouncement = 1 << 20

// Announcement is an aggregator process's answer on
// protocol.PipelineSubject (request: any bytes, ignored; every process
// answers, so a client collects the answers for a short while and sums
// them): the pipeline definitions it serves and what it did with the
// reports it read, per report context.
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
	// Reports counts the reports read, by Context.Key: how many were
	// admitted (their pipeline served, epoch open, token valid) and how
	// many refused, by the aggregator's drop reason (pipeline-mismatch,
	// unknown-epoch, late, no-token, …).
	Reports map[string]Counts `json:"reports,omitempty"`
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
