package onion

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

// wantClasses is the size-class table written out by hand (not computed by
// the code under test): each base class 512, 1024, 4096, 16384, 65536,
// 131072, 262144, 524288, 786432, 1048576 and up to three 512-byte steps
// above it.
var wantClasses = []int{
	512, 1024, 1536, 2048, 2560,
	4096, 4608, 5120, 5632,
	16384, 16896, 17408, 17920,
	65536, 66048, 66560, 67072,
	131072, 131584, 132096, 132608,
	262144, 262656, 263168, 263680,
	524288, 524800, 525312, 525824,
	786432, 786944, 787456, 787968,
	1048576, 1049088, 1049600, 1050112,
}

// wantPrio3Classes are the base classes that carry Prio3 uploads.
var wantPrio3Classes = []int{262144, 524288, 786432, 1048576}

// TestAttackLayerSize: an observer of any hop (relay a's input, relay b's
// input, topic reports) measures layer lengths to tell reports apart: by
// the report's length, or by the length of a hop field inside (a PDD group
// key, a subject). Every layer of the route [relay a, relay b, aggregator]
// must be exactly one of the size classes, for 200 report lengths and hop
// fields of 0 to 255 bytes, and within one base class each hop sees one
// length whatever the report and hop fields: the innermost layer one of
// the six base classes, each layer around it one 512-byte step more.
func TestAttackLayerSize(t *testing.T) {
	ra, _ := GenerateKeyPair(1)
	rb, _ := GenerateKeyPair(2)
	ag, _ := GenerateKeyPair(3)
	rng := rand.New(rand.NewPCG(1, 2))
	var sizes []int
	for n := 0; n < 100; n++ { // dense over the small reports (STAR reports)
		sizes = append(sizes, n*12)
	}
	for _, c := range []int{512, 1024, 4096, 16384, 65536, 131072} {
		for _, d := range []int{-60, -50, -45, -44, -43, -1, 0, 1} { // around each base class
			if c+d >= 0 && c+d <= 131072-56 { // the largest report an innermost layer holds
				sizes = append(sizes, c+d)
			}
		}
	}
	for len(sizes) < 200 {
		sizes = append(sizes, rng.IntN(130000))
	}
	outside, steps := 0, 0
	lengths := map[int][3]int{} // base-class length → the three layer lengths
	perHop := [3]map[int]bool{{}, {}, {}}
	checked := 0
	for _, n := range sizes {
		report := make([]byte, n)
		for i := range report {
			report[i] = byte(rng.IntN(256))
		}
		key := make([]byte, rng.IntN(256))
		subject := "crowdlog.relay." + strings.Repeat("b", rng.IntN(256-len("crowdlog.relay.")))
		l3, err := SealLayer(ag.PublicKey(), Hop{Kind: HopDeliver}, report)
		if err != nil {
			t.Fatalf("report of %d bytes: %v", n, err)
		}
		kind := HopKafka
		if n%2 == 1 {
			kind = HopKafkaVectors
		}
		l2, err := SealLayer(rb.PublicKey(), Hop{Kind: kind, Key: key}, l3)
		if err != nil {
			t.Fatal(err)
		}
		l1, err := SealLayer(ra.PublicKey(), Hop{Kind: HopRelay, Subject: subject}, l2)
		if err != nil {
			t.Fatal(err)
		}
		got := [3]int{len(l1), len(l2), len(l3)}
		for i, l := range got {
			checked++
			perHop[i][l] = true
			if !slices.Contains(wantClasses, l) {
				outside++
				t.Errorf("report of %d bytes, key %d, subject %d bytes: layer %d is %d bytes, not a size class", n, len(key), len(subject), i+1, l)
			}
		}
		if !slices.Contains([]int{512, 1024, 4096, 16384, 65536, 131072}, len(l3)) || len(l2) != len(l3)+512 || len(l1) != len(l2)+512 {
			steps++
			t.Errorf("report of %d bytes: layer lengths %v, want a base class and one 512-byte step per layer", n, got)
		}
		if prev, ok := lengths[len(l3)]; ok && prev != got {
			t.Errorf("report of %d bytes: layer lengths %v, another report of its class gave %v (hop fields leak)", n, got, prev)
		}
		lengths[len(l3)] = got
		// the padding is removed and authenticated
		hop, in, err := Peel([]*KeyPair{ra}, l1)
		if err != nil || hop.Subject != subject || !bytes.Equal(in, l2) {
			t.Fatalf("layer 1 does not peel back: %v", err)
		}
		hop, in, err = Peel([]*KeyPair{rb}, l2)
		if err != nil || hop.Kind != kind || !bytes.Equal(hop.Key, key) || !bytes.Equal(in, l3) {
			t.Fatalf("layer 2 does not peel back: %v", err)
		}
		if _, in, err = Peel([]*KeyPair{ag}, l3); err != nil || !bytes.Equal(in, report) {
			t.Fatalf("layer 3 does not peel back: %v", err)
		}
		last := l3[len(l3)-17] // last padding byte (before the AEAD tag)
		l3[len(l3)-17] ^= 1
		if _, _, err := Peel([]*KeyPair{ag}, l3); !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("tampered padding: %v, want ErrMalformed", err)
		}
		l3[len(l3)-17] = last
	}
	fmt.Printf("ATTACK layer-size: 3 layers x %d payload sizes (hop fields 0-255 bytes): %d of %d layer lengths outside the size classes; %d/%d/%d distinct lengths at relay a/relay b/aggregator for %d base classes\n",
		len(sizes), outside, checked, len(perHop[0]), len(perHop[1]), len(perHop[2]), len(lengths))
	if outside > 0 || steps > 0 || len(perHop[0]) != len(lengths) || len(perHop[1]) != len(lengths) {
		t.Fatalf("attack succeeds: %d layer lengths outside the size classes; %d and %d lengths at relay a and b for %d classes",
			outside, len(perHop[0]), len(perHop[1]), len(lengths))
	}
}

// TestSizeClassesTable: the computed table is the hand-written one, and a
// layer that is not a size class does not peel.
func TestSizeClassesTable(t *testing.T) {
	if !slices.Equal(SizeClasses(), wantClasses) {
		t.Fatalf("SizeClasses() = %v, want %v", SizeClasses(), wantClasses)
	}
	k, _ := GenerateKeyPair(1)
	l, _ := SealLayer(k.PublicKey(), Hop{Kind: HopDeliver}, []byte("x"))
	if _, _, err := Peel([]*KeyPair{k}, append(l, 0)); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("layer one byte longer than its class: %v", err)
	}
}

// TestAttackLayerSizePrio3: the Prio3 route [relay a, relay b] carries an
// upload already sealed to the leader in a HopKafkaPrio3 layer (key: the
// campaign name) inside a HopRelay layer. An observer of relay a's input or
// of relay b's input measures layer lengths to tell uploads (and so
// campaigns or measurements) apart within a class, or by the campaign
// name's length. For upload lengths around each large base class, the
// L = 10,000, b = 4 upload length with both tokens (655,204 bytes) and the largest upload
// that fits, with keys of 0–255 bytes, the relay b layer must be exactly
// the smallest of the base classes that holds the upload and the relay a
// layer one 512-byte step more, both no longer than MaxLayer; every layer
// peels back to its exact inner bytes and hop.
func TestAttackLayerSizePrio3(t *testing.T) {
	ra, _ := GenerateKeyPair(1)
	rb, _ := GenerateKeyPair(2)
	rng := rand.New(rand.NewPCG(3, 4))
	// the innermost frame: version, key id, enc, tag, plaintext version,
	// kind, key length byte, u32 inner length (written out, not
	// layerOverhead)
	const frame = 2 + 32 + 16 + 1 + 1 + 1 + 4
	sizes := []int{655204, 1048576 - frame - 255}
	for _, c := range []int{131072, 262144, 524288, 786432} {
		for _, d := range []int{-frame - 255, -frame, -frame + 1, 0, 1000} {
			sizes = append(sizes, c+d)
		}
	}
	wrong := 0
	for i, n := range sizes {
		upload := make([]byte, n)
		for j := range upload {
			upload[j] = byte(rng.Uint32())
		}
		key := []byte(strings.Repeat("c", []int{0, 1, 12, 255}[i%4]))
		// the smallest Prio3 base class (or below) that holds it, by hand
		want := 0
		for _, c := range []int{512, 1024, 4096, 16384, 65536, 131072, 262144, 524288, 786432, 1048576} {
			if n+frame+len(key) <= c {
				want = c
				break
			}
		}
		l2, err := SealLayer(rb.PublicKey(), Hop{Kind: HopKafkaPrio3, Key: key}, upload)
		if err != nil {
			t.Fatalf("upload of %d bytes: %v", n, err)
		}
		l1, err := SealLayer(ra.PublicKey(), Hop{Kind: HopRelay, Subject: "crowdlog.relay.b"}, l2)
		if err != nil {
			t.Fatalf("upload of %d bytes, relay a layer: %v", n, err)
		}
		if len(l2) != want || len(l1) != want+512 || len(l1) > MaxLayer {
			wrong++
			t.Errorf("upload of %d bytes, key %d bytes: layers %d and %d, want %d and %d (MaxLayer %d)", n, len(key), len(l1), len(l2), want+512, want, MaxLayer)
		}
		if n > 131072 && !slices.Contains(wantPrio3Classes, len(l2)) {
			wrong++
			t.Errorf("upload of %d bytes: relay b layer %d bytes is no Prio3 class", n, len(l2))
		}
		hop, in, err := Peel([]*KeyPair{ra}, l1)
		if err != nil || hop.Kind != HopRelay || !bytes.Equal(in, l2) {
			t.Fatalf("relay a layer does not peel back: %v", err)
		}
		hop, in, err = Peel([]*KeyPair{rb}, l2)
		if err != nil || hop.Kind != HopKafkaPrio3 || !bytes.Equal(hop.Key, key) || !bytes.Equal(in, upload) {
			t.Fatalf("relay b layer of %d bytes does not peel back: %v", n, err)
		}
	}
	// one byte more than the largest class holds is refused, not truncated
	if _, err := SealLayer(rb.PublicKey(), Hop{Kind: HopKafkaPrio3}, make([]byte, 1048576-frame+1)); err == nil {
		t.Errorf("an upload one byte over the largest class was sealed")
	}
	fmt.Printf("ATTACK layer-size-prio3: %d upload sizes (keys 0-255 bytes): %d layer lengths off the class table\n", len(sizes), wrong)
}
