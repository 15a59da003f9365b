package star

import (
	"crypto/rand"
	"testing"
)

// BenchmarkDeriveSealing: per-artifact client cost incl. the k = 5
// commitment.
func BenchmarkDeriveSealing(b *testing.B) {
	omega := make([]byte, 64)
	rand.Read(omega)
	for b.Loop() {
		DeriveSealing(omega, "query", "e", FTu, 5)
	}
}
