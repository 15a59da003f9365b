package arc

import (
	"crypto/subtle"
	"sync"

	"filippo.io/nistec"
)

// ---- constant-time fixed-base multiplication (secret scalars) ----
//
// A point that is multiplied many times (H always; the credential's U, U'
// and the issuer's X1 at every presentation) gets a comb table: for each of
// the 52 five-bit windows i of a 32-byte scalar, the multiples j·32^i·P for
// j = 0…16. The scalar is recoded into signed digits in −16…16 (Booth
// recoding, as nistec's own ScalarMult does), so k·P is 52 additions of
// table entries, one per window, each entry picked by a constant-time scan
// of its 17 candidates (nistec's Select), conditionally negated (Negate and
// Select) and added with nistec's complete addition: the sequence of
// operations and memory accesses is the same for every k, constant time in
// the scalar, which may be secret. Against nistec's ScalarMult (≈ 255
// doublings and 52 additions) this saves the doublings: ≈ 20 µs against
// ≈ 45 µs per multiplication on the project's machine
// (BenchmarkCombMult, BenchmarkScalarMult).

const (
	// combWindows is the number of five-bit windows of a 256-bit scalar
	// (its Booth digits reach bit 259).
	combWindows = 52
	// combEntries are the multiples 0…16 of each window's base.
	combEntries = 17
)

// combTable holds j·32^i·P for window i < 52 and j ≤ 16 (j = 0 the
// identity): 52·17 projective points, 83 KiB.
type combTable [combWindows][combEntries]nistec.P256Point

// newCombTable builds P's table with 832 complete additions and 52
// doublings (≈ 0.35 ms). P need not be public: they are constant time.
func newCombTable(p element) *combTable {
	t := new(combTable)
	base := copyElement(p)
	id := identity()
	for i := range t {
		t[i][0].Set(id)
		t[i][1].Set(base)
		for j := 2; j < combEntries; j++ {
			t[i][j].Add(&t[i][j-1], base)
		}
		base.Double(&t[i][16]) // 32^(i+1)·P
	}
	return t
}

// booth is the signed digit of a six-bit window (bits 5i−1 … 5i+4 of the
// scalar): its absolute value in 0…16 and 1 when negative; branch-free
// (nistec's boothW5).
func booth(in uint64) (d uint64, neg int) {
	s := ^((in >> 5) - 1)
	d = (1 << 6) - in - 1
	d = (d & s) | (in & ^s)
	d = (d >> 1) + (d & 1)
	return d, int(s & 1)
}

// mulAdd sets acc = acc + k·P for the 32-byte big-endian k (reduced mod
// the order) in constant time: 52 table scans and 52 additions whatever k
// is.
func (t *combTable) mulAdd(acc element, k []byte) {
	var l [5]uint64 // little-endian limbs and a zero one for the top window
	for i := 0; i < 4; i++ {
		for j := 0; j < 8; j++ {
			l[i] |= uint64(k[len(k)-1-8*i-j]) << (8 * j)
		}
	}
	var sel, neg nistec.P256Point
	for i := 0; i < combWindows; i++ {
		var w uint64
		if i == 0 {
			w = l[0] << 1 // bit −1 is 0
		} else {
			off := 5*i - 1
			w = l[off/64] >> (off % 64)
			if off%64 > 58 {
				w |= l[off/64+1] << (64 - off%64)
			}
		}
		d, s := booth(w & 0x3f)
		sel.Set(&t[i][0])
		for j := uint64(1); j < combEntries; j++ {
			sel.Select(&t[i][j], &sel, subtle.ConstantTimeEq(int32(j), int32(d)))
		}
		neg.Negate(&sel)
		sel.Select(&neg, &sel, s)
		acc.Add(acc, &sel)
	}
}

// combH is H's table, built on first use.
var combH = sync.OnceValue(func() *combTable { return newCombTable(genH) })

// maxKeyTables bounds keyTables: issuer keys are per epoch, so a client
// meets a handful; past the bound X1 is multiplied without a table.
const maxKeyTables = 8

var keyTables struct {
	mu sync.Mutex
	m  map[[ElementSize]byte]*combTable
}

// keyTable returns the table of an issuer public key element (X1), shared
// by every credential under that key; nil when maxKeyTables keys already
// have one.
func keyTable(x element) *combTable {
	var k [ElementSize]byte
	copy(k[:], mustEncode(x))
	keyTables.mu.Lock()
	defer keyTables.mu.Unlock()
	if t, ok := keyTables.m[k]; ok {
		return t
	}
	if len(keyTables.m) >= maxKeyTables {
		return nil
	}
	if keyTables.m == nil {
		keyTables.m = make(map[[ElementSize]byte]*combTable)
	}
	t := newCombTable(x)
	keyTables.m[k] = t
	return t
}

// fixedBase is a point with its comb table, or without one (t nil: nistec's
// ScalarMult, or its fixed-base table for G).
type fixedBase struct {
	e element
	t *combTable
}

// mulAdd sets acc = acc + s·b in constant time.
func (b fixedBase) mulAdd(acc element, s scalar) {
	if b.t == nil {
		acc.Add(acc, mul(b.e, s))
		return
	}
	b.t.mulAdd(acc, encodeScalar(s))
}

// mul returns s·b as a new element in constant time.
func (b fixedBase) mul(s scalar) element {
	acc := identity()
	b.mulAdd(acc, s)
	return acc
}

// credTables are a credential's comb tables: U, U' (its own, built after
// presentTablesAfter presentations) and X1 (its issuer key's, shared).
type credTables struct {
	u, uPrime, x1 *combTable
}

// presentTablesAfter is the number of presentations a credential makes
// without tables: building U's and U”s (≈ 0.7 ms) pays off after about
// ten presentations, and FT_u clients present once per distinct artifact.
const presentTablesAfter = 4
