package oprf

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/crowdlog/crowdlog/protocol"
)

// Refusals of a randomness service that requires Privacy Pass tokens (issue
// 17; RFC 9576 §3.5). On the wire each is a plain refusal (status 1) whose
// message starts with the error's text; TokenRefusal turns it back into an
// error wrapping the sentinel, so errors.Is works on both sides.
var (
	// ErrTokensMissing: the request did not carry exactly one token per
	// element. Get randomness tokens from the issuer (ingest/tokenclient).
	ErrTokensMissing = errors.New("randomness requires one token per element")
	// ErrTokenInvalid: a token does not parse or does not verify under the
	// service's randomness-token key of the request's epoch (another kind,
	// epoch or issuer key, or forged), or one token appears twice.
	ErrTokenInvalid = errors.New("randomness token invalid")
	// ErrTokenSpent: a token was spent before with another request (a
	// double spend, refused by every replica: protocol.SpentTokensBucket).
	ErrTokenSpent = errors.New("randomness token already spent")
	// ErrTokensUnavailable: the service could not check tokens (no token
	// key for the epoch yet, or the spent-token store did not answer);
	// retry later.
	ErrTokensUnavailable = errors.New("randomness tokens cannot be checked now")
)

var tokenSentinels = []error{ErrTokensMissing, ErrTokenInvalid, ErrTokenSpent, ErrTokensUnavailable}

// TokenRefusal returns the refusal f as an error wrapping ErrTokensMissing,
// ErrTokenInvalid, ErrTokenSpent or ErrTokensUnavailable when its message
// starts with that error's text, and nil for any other refusal (use
// f.Err()).
func TokenRefusal(f protocol.Refusal) error {
	if f.Closed || f.Expired || f.Future {
		return nil
	}
	for _, s := range tokenSentinels {
		if strings.HasPrefix(f.Error, s.Error()) {
			return fmt.Errorf("randomness service: %w%s", s, strings.TrimPrefix(f.Error, s.Error()))
		}
	}
	return nil
}

// SpendBinding is what a randomness token pays for, stored with its spend
// id (infra/spent): SHA-256("crowdlog-v1 randomness spend" ‖ u8 len epoch
// ‖ epoch ‖ element). A retried request (same element, same token) binds
// the same and is answered again — the VOPRF evaluation of the same
// element is the same, so nothing new is revealed; the same token with
// another element is a double spend.
func SpendBinding(epoch string, element []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 randomness spend"))
	h.Write([]byte{byte(len(epoch))})
	h.Write([]byte(epoch))
	h.Write(element)
	var b [32]byte
	h.Sum(b[:0])
	return b
}
