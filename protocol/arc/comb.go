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
// the 64 four-bit windows i of a 32-byte scalar, the multiples j·16^i·P for
// j = 0…15. k·P is then 64 additions of table entries, one per window, each
// entry picked by a constant-time scan of its 16 candidates (nistec's
// Select) and added with nistec's complete addition, so the sequence of
// operations and memory accesses is the same for every k: constant time in
// the scalar, which may be secret. Against nistec's ScalarMult (≈ 255
// doublings and 52 additions) this saves the doublings: ≈ 28 µs against
// ≈ 45 µs per multiplication on the project's machine
// (BenchmarkCombMult, BenchmarkScalarMult).

// combWindows is the number of four-bit windows of a 256-bit scalar.
const combWindows = 64

// combTable holds j·16^i·P for window i < 64 and j < 16 (j = 0 the
// identity): 64·16 projective points, 96 KiB.
type combTable [combWindows][16]nistec.P256Point

// newCombTable builds P's table with 960 complete additions (≈ 0.35 ms).
// P need not be public: the additions are constant time.
func newCombTable(p element) *combTable {
	t := new(combTable)
	base := copyElement(p)
	id := identity()
	for i := range t {
		t[i][0].Set(id)
		t[i][1].Set(base)
		for j := 2; j < 16; j++ {
			t[i][j].Add(&t[i][j-1], base)
		}
		base.Add(&t[i][15], base) // 16^(i+1)·P
	}
	return t
}

// mulAdd sets acc = acc + k·P for the 32-byte big-endian k (reduced mod
// the order) in constant time: 64 table scans and 64 additions whatever k
// is.
func (t *combTable) mulAdd(acc element, k []byte) {
	var sel nistec.P256Point
	for i := 0; i < combWindows; i++ {
		d := int32(k[len(k)-1-i/2]>>(4*(i&1))) & 0xf
		sel.Set(&t[i][0])
		for j := int32(1); j < 16; j++ {
			sel.Select(&t[i][j], &sel, subtle.ConstantTimeEq(j, d))
		}
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
