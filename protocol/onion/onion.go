package onion

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/cloudflare/circl/hpke"
	"github.com/cloudflare/circl/kem"
	"github.com/crowdlog/crowdlog/protocol"
)

// Suite is the HPKE suite of every onion layer (RFC 9180 §7):
// DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305.
var Suite = hpke.NewSuite(hpke.KEM_X25519_HKDF_SHA256, hpke.KDF_HKDF_SHA256, hpke.AEAD_ChaCha20Poly1305)

var kemScheme = hpke.KEM_X25519_HKDF_SHA256.Scheme()

var onionInfo = []byte("crowdlog-v1 onion")

// encSize is the size of an X25519 encapsulated key.
const encSize = 32

// MaxLayer is the largest onion layer a relay accepts, in bytes: the
// largest size class, 1 MiB plus three LayerSteps (1,050,112 bytes).
const MaxLayer = 1<<20 + maxSteps*LayerStep

// ErrUnknownKey is returned by Peel when the layer names a key id the
// receiver does not hold (rotated out, or a message for another hop).
var ErrUnknownKey = errors.New("protocol: onion layer for an unknown key id")

// KeyPair is an HPKE key pair of a relay or aggregator with the one-byte key
// id carried in each layer header.
type KeyPair struct {
	ID      byte
	Public  kem.PublicKey
	Private kem.PrivateKey
	// Role is the hop the key belongs to ("relay-a", "relay-b",
	// "aggregator"; the name field of its key file), bound into the HPKE
	// info of every layer sealed for it (layerInfo): a layer sealed for one
	// role does not open at another, even when an operator installed the
	// same key for both. "" (generated keys in tests) binds no role.
	Role string
}

// PublicKey is the public half of a KeyPair, what clients need to wrap.
type PublicKey struct {
	ID   byte
	Key  kem.PublicKey
	Role string // the hop's role, as KeyPair.Role
}

// GenerateKeyPair draws a fresh X25519 key pair with the given key id.
func GenerateKeyPair(id byte) (*KeyPair, error) {
	pk, sk, err := kemScheme.GenerateKeyPair()
	if err != nil {
		return nil, err
	}
	return &KeyPair{ID: id, Public: pk, Private: sk}, nil
}

// PublicKey returns the public half.
func (k *KeyPair) PublicKey() PublicKey { return PublicKey{ID: k.ID, Key: k.Public, Role: k.Role} }

// layerInfo is the HPKE info of a layer for a hop of role (RFC 9180 §5.1):
// "crowdlog-v1 onion" without a role, "crowdlog-v2 onion " ‖ role with one.
func layerInfo(role string) []byte {
	if role == "" {
		return onionInfo
	}
	return []byte("crowdlog-v2 onion " + role)
}

type keyFile struct {
	Name    string `json:"name"`
	ID      byte   `json:"id"`
	Public  string `json:"public"`
	Private string `json:"private,omitempty"`
}

// MarshalKeyPair returns the key files of k named name: private, the JSON
// object {"name", "id", "public", "private"} (hex keys, newline-ended)
// for path, and public, the same without "private", for path+".pub"
// (LoadKeyPair and LoadPublicKey read them).
func MarshalKeyPair(name string, k *KeyPair) (private, public []byte, err error) {
	pub, err := k.Public.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	priv, err := k.Private.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	b, _ := json.MarshalIndent(keyFile{Name: name, ID: k.ID, Public: hex.EncodeToString(pub), Private: hex.EncodeToString(priv)}, "", "  ")
	p, _ := json.MarshalIndent(keyFile{Name: name, ID: k.ID, Public: hex.EncodeToString(pub)}, "", "  ")
	return append(b, '\n'), append(p, '\n'), nil
}

// SaveKeyPair writes the key pair to path as JSON with mode 0600 (private) and
// its public half to path+".pub" with mode 0644 (MarshalKeyPair), with
// os.WriteFile: for tests and tools. Roles write their keys through
// infra/keydir.SaveKeyPair (atomic: no reader sees a partial key).
func SaveKeyPair(path, name string, k *KeyPair) error {
	b, p, err := MarshalKeyPair(name, k)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return os.WriteFile(path+".pub", p, 0o644)
}

// LoadKeyPair reads a key written by SaveKeyPair. Errors say which file is
// bad; key bytes are never included in errors.
func LoadKeyPair(path string) (*KeyPair, error) {
	var f keyFile
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w (generate one with `crowdlog keys generate`)", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("key file %s: not a crowdlog key: %w", path, err)
	}
	pk, err := decodePublic(f.Public)
	if err != nil {
		return nil, fmt.Errorf("key file %s: bad public key", path)
	}
	raw, err := hex.DecodeString(f.Private)
	if err != nil {
		return nil, fmt.Errorf("key file %s: bad private key", path)
	}
	sk, err := kemScheme.UnmarshalBinaryPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("key file %s: bad private key", path)
	}
	kp := &KeyPair{ID: f.ID, Public: pk, Private: sk, Role: f.Name}
	if err := kp.Prepare(); err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return kp, nil
}

// PrepareKeys calls Prepare on each key; the first error names the key id.
func PrepareKeys(keys []*KeyPair) error {
	for _, k := range keys {
		if err := k.Prepare(); err != nil {
			if k != nil {
				return fmt.Errorf("key %d: %w", k.ID, err)
			}
			return err
		}
	}
	return nil
}

// ErrKeyMismatch is returned by KeyPair.Prepare when the public key is not
// the one the private key derives.
var ErrKeyMismatch = errors.New("protocol: public key does not match the private key (regenerate the key with `crowdlog keys generate`)")

// Prepare makes k safe for concurrent Peel calls and checks it: it derives
// the public key from the private key once, here, and errors with
// ErrKeyMismatch when that differs from k.Public.
//
// Why: circl's X25519 HPKE private key (hpke xKEMPrivKey, v1.6.5) computes
// its public key lazily on the first Decapsulate and publishes the cache
// pointer before filling its bytes, so goroutines peeling concurrently with
// a freshly unmarshalled key can read an all-zero public key, derive the
// wrong HPKE context (RFC 9180 §4.1 kem_context = enc ‖ pkRm) and fail to
// open a genuine layer. Measured before this fix: 499 of 16,000 first peels
// from 8 goroutines failed, which relays counted as "malformed" and
// terminated — a lost report after every relay restart. LoadKeyPair calls
// Prepare; call it yourself (before sharing k between goroutines) on a
// KeyPair built by hand. Safe to call more than once.
func (k *KeyPair) Prepare() error {
	if k == nil || k.Private == nil {
		return errors.New("protocol: key pair has no private key")
	}
	derived := k.Private.Public() // fills circl's cache, single goroutine
	if k.Public == nil {
		k.Public = derived
		return nil
	}
	if !derived.Equal(k.Public) {
		return ErrKeyMismatch
	}
	return nil
}

// LoadPublicKey reads a public key file (the ".pub" of SaveKeyPair, or the
// private file itself, whose private half is ignored).
func LoadPublicKey(path string) (PublicKey, error) {
	var f keyFile
	b, err := os.ReadFile(path)
	if err != nil {
		return PublicKey{}, fmt.Errorf("read public key: %w (generate keys with `crowdlog keys generate`)", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return PublicKey{}, fmt.Errorf("key file %s: not a crowdlog key: %w", path, err)
	}
	pk, err := decodePublic(f.Public)
	if err != nil {
		return PublicKey{}, fmt.Errorf("key file %s: bad public key", path)
	}
	return PublicKey{ID: f.ID, Key: pk, Role: f.Name}, nil
}

// ErrKeyRole is wrapped by LoadPublicKeyFor when a public key file belongs
// to another hop than the one it is used for (e.g. relay-b.key.pub given as
// relay a's key): the relay would drop every layer as "unknown_key" or
// "malformed" without the client ever hearing of it.
var ErrKeyRole = errors.New("protocol: public key file is for another hop")

// LoadPublicKeyFor is LoadPublicKey for the hop named role ("relay-a",
// "relay-b", "aggregator"): it also checks the file's name field and that
// the key id is not 0 (ids start at 1; `crowdlog keys rotate` increments
// them). Errors wrap ErrKeyRole and say which file to use.
func LoadPublicKeyFor(path, role string) (PublicKey, error) {
	var f keyFile
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		return PublicKey{}, fmt.Errorf("key file %s: %w (want the hop's public key file, %s.key.pub, as its operator hands it out)", path, err, role)
	}
	if f.Name != role {
		return PublicKey{}, fmt.Errorf("%w: %s holds the key of %q, not %q (use %s.key.pub)", ErrKeyRole, path, f.Name, role, role)
	}
	if f.ID == 0 {
		return PublicKey{}, fmt.Errorf("%w: %s has key id 0 (ids start at 1: not a key file its operator's key directory wrote)", ErrKeyRole, path)
	}
	return LoadPublicKey(path)
}

func decodePublic(s string) (kem.PublicKey, error) {
	raw, err := hex.DecodeString(s)
	if err != nil {
		return nil, err
	}
	return kemScheme.UnmarshalBinaryPublicKey(raw)
}

// HopKind says what a relay does with the inner bytes after peeling.
type HopKind byte

const (
	// HopRelay forwards the inner layer to the relay listening on Subject.
	HopRelay HopKind = 1
	// HopKafka produces the inner layer to the aggregator's Kafka topic
	// with message key Key (a coarse bucket of the tag, see ReportKey;
	// relays pass on at most ReportKeyLen bytes of it).
	HopKafka HopKind = 2
	// HopDeliver marks the innermost layer: the inner bytes are the report.
	HopDeliver HopKind = 3
	// HopKafkaVectors produces the inner bytes (a blinded vector or a
	// recovery answer, protocol/blind) to Kafka topic "vectors" with message
	// key Key (the group, in the clear: PDD's server learns group membership
	// anyway; the relays hide the client's address and timing).
	HopKafkaVectors HopKind = 4
	// HopKafkaPrio3 produces the inner bytes as they are (a Prio3 upload,
	// protocol/prio3, already HPKE-sealed to the leader aggregator, so no
	// further onion layer) to Kafka topic "prio3-uploads"
	// (protocol.Prio3UploadsTopic) with message key Key (the campaign
	// name, in the clear: the leader learns the campaign of every upload
	// anyway). Like HopDeliver it is the innermost onion layer of its
	// route and is padded to a base class (see baseClasses).
	HopKafkaPrio3 HopKind = 5
)

// Hop is the routing instruction inside one onion layer.
type Hop struct {
	Kind    HopKind
	Subject string // HopRelay: NATS subject of the next relay
	Key     []byte // HopKafka, HopKafkaVectors, HopKafkaPrio3: Kafka message key
}

// Size classes. Every onion layer, as sent (version ‖ key id ‖ enc ‖ HPKE
// ciphertext), is exactly one of SizeClasses() bytes long: SealLayer pads
// the plaintext inside the AEAD with zeros, so the padding is authenticated
// and Peel removes it (and refuses non-zero padding). A layer's length thus
// reveals only its class, never the length of the report, of a hop's
// subject or Kafka key, or of anything else inside it.
//
// The classes are baseClasses plus 0–3 steps of LayerStep. The innermost
// layer (HopDeliver, and HopKafkaPrio3, whose inner bytes are sealed to
// the leader already) is padded to the smallest base class that holds it,
// so its length reveals one of ten payload-length classes, as before every
// layer was padded; any other layer is padded to the smallest class that
// holds it: it adds at most layerOverhead+255 < LayerStep bytes to the
// layer it wraps and so lands exactly one step above it, whatever its hop
// fields. Every report of one base class and route therefore has one length
// at each hop (512, 1024, 1536 bytes for a report of up to 456 bytes on the
// route [relay a, relay b, aggregator]).
//
// The four base classes from 262144 bytes up carry Prio3 uploads (a leader
// share is about 16·L·b bytes: an upload of L = 10,000 keywords of b = 4
// bits, 655,204 bytes with both tokens, lands in 786432, the relay a layer around it in 786944).
// Threshold reports and PDD vectors are far smaller, so a layer of these
// classes tells whoever sees its length (relay a, the relay stream, the
// network between them) that it is a Prio3 upload of that length class,
// no more: relay b learns the hop kind when it peels the layer anyway, all
// uploads of one campaign (one measurement: L, b, chunk length) have one
// length and so one class, and the class says nothing about the
// measurement's values.
var baseClasses = []int{512, 1024, 4096, 16384, 65536, 131072, 262144, 524288, 786432, 1048576}

// LayerStep is the growth of a layer's size class per onion layer around
// it. It exceeds the largest overhead of one layer (layerOverhead plus a
// 255-byte subject or key).
const LayerStep = 512

// layerOverhead is a layer's size beyond its inner bytes and hop fields:
// version, key id, enc, AEAD tag, and in the plaintext version, kind, the
// hop field's length byte and the u32 inner length.
const layerOverhead = 2 + encSize + 16 + 1 + 1 + 1 + 4

// maxSteps is how many LayerSteps above a base class there are classes.
const maxSteps = 3

var sizeClasses = func() []int {
	seen := map[int]bool{}
	var cs []int
	for _, b := range baseClasses {
		for i := 0; i <= maxSteps; i++ {
			if c := b + i*LayerStep; !seen[c] {
				seen[c] = true
				cs = append(cs, c)
			}
		}
	}
	slices.Sort(cs)
	return cs
}()

// SizeClasses returns the lengths an onion layer can have, ascending.
func SizeClasses() []int { return slices.Clone(sizeClasses) }

// IsSizeClass reports whether n is the length of a well-formed layer.
func IsSizeClass(n int) bool {
	_, ok := slices.BinarySearch(sizeClasses, n)
	return ok
}

// padTo returns the smallest of classes that holds a layer of n bytes.
func padTo(classes []int, n int) (int, error) {
	for _, c := range classes {
		if n <= c {
			return c, nil
		}
	}
	return 0, fmt.Errorf("protocol: layer of %d bytes exceeds the largest size class %d", n, classes[len(classes)-1])
}

// SealLayer wraps inner for the hop holding pk (RFC 9180 §6.1 single-shot
// Base mode). Layer: version ‖ key id ‖ enc[32] ‖ HPKE ciphertext of
// (version ‖ kind ‖ hop fields ‖ u32 len inner ‖ inner ‖ zero padding),
// where the padding makes the whole layer one of SizeClasses() bytes long
// (every layer, not only the innermost): all layers of one route and report
// class have one length at each hop.
func SealLayer(pk PublicKey, hop Hop, inner []byte) ([]byte, error) {
	return sealLayer(rand.Reader, pk, hop, inner)
}

// sealLayer is SealLayer with the HPKE ephemeral key drawn from rnd (golden
// test vectors pass a fixed reader: RFC 9180 DeriveKeyPair(ikmE)).
func sealLayer(rnd io.Reader, pk PublicKey, hop Hop, inner []byte) ([]byte, error) {
	w := protocol.Writer{B: make([]byte, 0, len(inner)+LayerStep)}
	w.U8(protocol.Version)
	w.U8(byte(hop.Kind))
	switch hop.Kind {
	case HopRelay:
		if len(hop.Subject) > 255 {
			return nil, errors.New("protocol: relay subject longer than 255 bytes")
		}
		w.Bytes8([]byte(hop.Subject))
	case HopKafka, HopKafkaVectors, HopKafkaPrio3:
		if len(hop.Key) > 255 {
			return nil, errors.New("protocol: kafka key longer than 255 bytes")
		}
		w.Bytes8(hop.Key)
	case HopDeliver:
	default:
		return nil, fmt.Errorf("protocol: unknown hop kind %d", hop.Kind)
	}
	w.Bytes32(inner)
	// the layer is 2 + enc + plaintext + AEAD tag bytes; pad the plaintext
	// so that the layer is a size class
	const frame = 2 + encSize + 16
	classes := sizeClasses
	if hop.Kind == HopDeliver || hop.Kind == HopKafkaPrio3 {
		classes = baseClasses
	}
	n, err := padTo(classes, frame+len(w.B))
	if err != nil {
		return nil, err
	}
	w.B = append(w.B, make([]byte, n-frame-len(w.B))...)
	snd, err := Suite.NewSender(pk.Key, layerInfo(pk.Role))
	if err != nil {
		return nil, err
	}
	enc, sealer, err := snd.Setup(rnd)
	if err != nil {
		return nil, err
	}
	hdr := []byte{protocol.Version, pk.ID}
	ct, err := sealer.Seal(w.B, hdr)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 2+len(enc)+len(ct))
	out = append(append(append(out, hdr...), enc...), ct...)
	return out, nil
}

// Peel opens one onion layer with whichever of keys matches the layer's key
// id (two keys are valid during a rotation) and returns the hop instruction
// and the inner bytes. Errors: wrapping ErrMalformed for bad framing, sizes
// or failed decryption; ErrUnknownKey for an unknown key id.
func Peel(keys []*KeyPair, layer []byte) (Hop, []byte, error) {
	if len(layer) > MaxLayer {
		return Hop{}, nil, protocol.Malformed("layer of %d bytes exceeds %d", len(layer), MaxLayer)
	}
	if len(layer) < 2+encSize+16 {
		return Hop{}, nil, protocol.Malformed("layer of %d bytes is too short", len(layer))
	}
	if !IsSizeClass(len(layer)) {
		return Hop{}, nil, protocol.Malformed("layer of %d bytes is not a size class", len(layer))
	}
	if layer[0] != protocol.Version {
		return Hop{}, nil, protocol.Malformed("layer version %d, want %d", layer[0], protocol.Version)
	}
	var kp *KeyPair
	for _, k := range keys {
		if k.ID == layer[1] {
			kp = k
			break
		}
	}
	if kp == nil {
		return Hop{}, nil, fmt.Errorf("%w %d", ErrUnknownKey, layer[1])
	}
	rcv, err := Suite.NewReceiver(kp.Private, layerInfo(kp.Role))
	if err != nil {
		return Hop{}, nil, err
	}
	opener, err := rcv.Setup(layer[2 : 2+encSize])
	if err != nil {
		return Hop{}, nil, protocol.Malformed("bad encapsulated key: %v", err)
	}
	pt, err := opener.Open(layer[2+encSize:], layer[:2])
	if err != nil {
		return Hop{}, nil, protocol.Malformed("layer does not open with key %d (wrong key or tampered): %v", kp.ID, err)
	}
	r := protocol.Reader{B: pt}
	r.ReadVersion("layer")
	hop := Hop{Kind: HopKind(r.U8("hop kind"))}
	switch hop.Kind {
	case HopRelay:
		hop.Subject = string(r.Bytes8("subject"))
	case HopKafka, HopKafkaVectors, HopKafkaPrio3:
		hop.Key = r.Bytes8("kafka key")
	case HopDeliver:
	default:
		if r.Err == nil {
			return Hop{}, nil, protocol.Malformed("unknown hop kind %d", hop.Kind)
		}
	}
	inner := r.Bytes32("inner")
	if r.Err != nil {
		return Hop{}, nil, r.Err
	}
	// the rest is padding: zeros, authenticated by the AEAD like the rest
	for _, b := range r.B {
		if b != 0 {
			return Hop{}, nil, protocol.Malformed("non-zero padding")
		}
	}
	return hop, inner, nil
}

// ReportBuckets is how many Kafka message keys topic "reports" can carry:
// ReportKey puts each report in one of 256 tag buckets, enough to spread
// reports over up to 256 partitions, while a bucket holds many tags (about
// 330 of the bundled log's ~85k), so the key does not single out a tag.
const ReportBuckets = 256

// ReportKeyLen is the length of ReportKey, and the most key bytes relay b
// passes on to Kafka for a HopKafka layer (relays truncate longer keys).
const ReportKeyLen = 1

// ReportKey is the Kafka message key a client puts in relay b's layer
// (HopKafka) for a report: the tag's first byte, one of ReportBuckets. All
// shares of one artifact have one tag, hence one key and one partition
// (Kafka's hash balancer), which the aggregator needs; relay b and readers
// of topic "reports" learn one of 256 buckets, not the tag (no relay reads
// the tag).
func ReportKey(tag [32]byte) []byte { return []byte{tag[0]} }

// TagBucket is the former report key: the first two bytes of the tag, one
// of 65,536 buckets, which with ~85k tags names about one tag per bucket
// (released counts then match bucket counts). Its first byte is ReportKey,
// so relays truncating a TagBucket key to ReportKeyLen bytes put the
// report in ReportKey's partition.
//
// Deprecated: clients use ReportKey; TagBucket stays for golden vectors and
// tools that write topic "reports" directly.
func TagBucket(tag [32]byte) []byte { return []byte{tag[0], tag[1]} }
