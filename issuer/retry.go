package issuer

import (
	"crypto/sha3"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/crowdlog/crowdlog/protocol/arc"
)

// RetryRecords is how many issuances each counter remembers for retries:
// the token.IssueRequest.ContentID of the last RetryRecords requests
// charged to (identity, epoch, kind), newest last. A request whose
// ContentID is among them is a retry (the client did not get the answer):
// it is answered again — the same evaluated elements (VOPRF evaluation is
// deterministic), the same ARC response (issueARC derives its randomness
// from the key and the ContentID) — and not counted again. Older issuances
// are forgotten: a retry of one of them is counted like a new request (the
// safe side: a client loses budget, nobody gains tokens). A client sends
// its batches one after the other (tokenclient), so 16 covers every
// retry it makes. The records are part of the counter's value, written by
// the same compare-and-set that charges the budget: a replica or a
// restarted issuer sees them exactly when it sees the count, and each
// counter holds at most 11 + 16·65 bytes.
const RetryRecords = 16

// counter is the value of a counters-bucket key: the count of (identity,
// epoch, kind) and the ContentIDs of its last RetryRecords issuances.
type counter struct {
	used   int
	recent [][32]byte // oldest first
}

// encode is the counter's value: the decimal count, then each ContentID
// in hex, oldest first, separated by single spaces ("12 ab…ef 01…23").
// A value without IDs (the only form before retries) is a plain count.
func (c counter) encode() []byte {
	b := strconv.AppendInt(nil, int64(c.used), 10)
	for _, id := range c.recent {
		b = append(b, ' ')
		b = hex.AppendEncode(b, id[:])
	}
	return b
}

// parseCounter decodes counter.encode; errors wrap ErrCorruptCounter
// (naming only the length, never the value).
func parseCounter(v []byte) (counter, error) {
	fields := strings.Split(string(v), " ")
	used, err := strconv.Atoi(fields[0])
	if err != nil || used < 0 || len(fields)-1 > RetryRecords {
		return counter{}, fmt.Errorf("%w (%d bytes)", ErrCorruptCounter, len(v))
	}
	c := counter{used: used, recent: make([][32]byte, 0, len(fields)-1)}
	for _, f := range fields[1:] {
		var id [32]byte
		if n, err := hex.Decode(id[:], []byte(f)); err != nil || n != len(id) || len(f) != 2*len(id) {
			return counter{}, fmt.Errorf("%w (%d bytes)", ErrCorruptCounter, len(v))
		}
		c.recent = append(c.recent, id)
	}
	return c, nil
}

// has reports whether id is among the counter's recent issuances.
func (c counter) has(id [32]byte) bool { return slices.Contains(c.recent, id) }

// charge is c with n more issued under id, the oldest record dropped past
// RetryRecords.
func (c counter) charge(n int, id [32]byte) counter {
	recent := append(slices.Clone(c.recent), id)
	if len(recent) > RetryRecords {
		recent = recent[len(recent)-RetryRecords:]
	}
	return counter{used: c.used + n, recent: recent}
}

// arcRandomness is the randomness of the ARC response to the request with
// ContentID id: SHAKE256("crowdlog-v1 arc issuance\0" ‖ private key ‖ id),
// so a retried request gets the same response (one credential per request,
// however often it is answered), and different requests get independent
// randomness (the private key is secret; the deterministic-nonce argument
// of RFC 6979 §3 and RFC 8032 §5.1.6). The response proof's nonces come
// from the same stream, never reused across different statements.
func arcRandomness(sk *arc.PrivateKey, id [32]byte) (io.Reader, error) {
	kb, err := sk.MarshalBinary()
	if err != nil {
		return nil, err
	}
	h := sha3.NewSHAKE256()
	h.Write([]byte("crowdlog-v1 arc issuance\x00"))
	h.Write(kb)
	h.Write(id[:])
	return h, nil
}
