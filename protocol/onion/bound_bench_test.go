package onion

import (
	"crypto/rand"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far (getrusage(2)).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBoundHPKE is the crypto bound of `make bench-bounds`
// (scripts/bench-bounds.sh): one HPKE single-shot open and one seal
// (RFC 9180 §6.1 Base mode, circl, DHKEM(X25519, HKDF-SHA256) /
// HKDF-SHA256 / ChaCha20-Poly1305: Suite) of a whole layer of each size a
// report's route has: 512 B (the aggregator's layer), 1024 B (relay b's),
// 1536 B (relay a's). Only the HPKE calls run in the loop (no framing,
// padding or parsing), on one goroutine; the metric cpu-ns/op is the
// process's CPU time (getrusage) per call, so opens/s per core =
// 1e9 / cpu-ns/op.
func BenchmarkBoundHPKE(b *testing.B) {
	kp, err := GenerateKeyPair(1)
	if err != nil {
		b.Fatal(err)
	}
	if err := kp.Prepare(); err != nil {
		b.Fatal(err)
	}
	info := layerInfo("aggregator")
	hdr := []byte{1, kp.ID}
	for _, size := range []int{512, 1024, 1536} {
		pt := make([]byte, size-2-encSize-16) // the layer is hdr ‖ enc ‖ ct(pt) ‖ tag
		rand.Read(pt)
		b.Run(fmt.Sprintf("op=open/layer=%d", size), func(b *testing.B) {
			snd, err := Suite.NewSender(kp.Public, info)
			if err != nil {
				b.Fatal(err)
			}
			enc, sealer, err := snd.Setup(rand.Reader)
			if err != nil {
				b.Fatal(err)
			}
			ct, err := sealer.Seal(pt, hdr)
			if err != nil {
				b.Fatal(err)
			}
			if n := 2 + len(enc) + len(ct); n != size {
				b.Fatalf("layer of %d bytes, want %d", n, size)
			}
			c0 := cpuTime()
			for b.Loop() {
				rcv, err := Suite.NewReceiver(kp.Private, info)
				if err != nil {
					b.Fatal(err)
				}
				opener, err := rcv.Setup(enc)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := opener.Open(ct, hdr); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprintf("op=seal/layer=%d", size), func(b *testing.B) {
			c0 := cpuTime()
			for b.Loop() {
				snd, err := Suite.NewSender(kp.Public, info)
				if err != nil {
					b.Fatal(err)
				}
				_, sealer, err := snd.Setup(rand.Reader)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sealer.Seal(pt, hdr); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}
