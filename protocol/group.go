package protocol

import (
	"github.com/cloudflare/circl/group"
)

// G is the prime-order group of the suite: ristretto255 (RFC 9496). Shares,
// polynomial coefficients and the sealed secret are its scalars (32 bytes).
var G = group.Ristretto255

// ScalarSize is the encoded size of a ristretto255 scalar in bytes.
const ScalarSize = 32

// ElementSize is the encoded size of a ristretto255 element.
const ElementSize = 32

// MaxReport is the largest encoded report in bytes.
const MaxReport = 64 << 10
