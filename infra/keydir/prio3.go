package keydir

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Key files of PDD's Prio3 mode (one custody role each, Custody): the
// leader's report key pair (clients seal their uploads to it), the
// helper's input-share key pair (clients seal the helper's input share to
// it, inside the upload) and the collector's key pair (the release stage's:
// both aggregate shares are sealed to it). X25519 HPKE key pairs (RFC 9180,
// onion.KeyPair files), key id 1 when generated.
const (
	Prio3LeaderKey    = "prio3-leader.key"
	Prio3HelperKey    = "prio3-helper.key"
	Prio3CollectorKey = "prio3-collector.key"
)

// Prio3LeaderSignKey is the leader operator's Ed25519 signing key (RFC
// 8032; PKCS #8 PEM, EnsureSigningKey): it signs every request the leader
// sends the helper (prio3.SignedReq). The helper verifies with its public
// half, Prio3LeaderSignKey+".pub", imported from the leader's public
// bundle (aggregate-prio3 --role helper --leader-pub).
const Prio3LeaderSignKey = "prio3-leader-sign.key"

// Custody roles of Prio3 mode: the leader and the helper aggregator (two
// operators that must not collude) and the collector (the release stage).
const (
	RolePrio3Leader    = "prio3-leader"
	RolePrio3Helper    = "prio3-helper"
	RolePrio3Collector = "prio3-collector"
)

// VerifyKeySize is the length of a Prio3 verify key (VDAF-14 §7:
// draft-irtf-cfrg-vdaf-14, Prio3 with TurboSHAKE128: 32 bytes).
const VerifyKeySize = 32

// MaxVerifyKeyEpochs bounds the lines of a verify key file.
const MaxVerifyKeyEpochs = 1024

// ErrVerifyKeyFile is wrapped by every error about a verify key file's
// content.
var ErrVerifyKeyFile = errors.New("prio3 verify key file")

// VerifyKeys are the Prio3 verify keys of one campaign by epoch: the secret
// that the leader and the helper operator share, and nobody else
// (VDAF-14 §7.2.2 verify_key; a client or the collector holding it could
// bias the proof check). The leader prepares under one epoch
// (aggregate-prio3 --key-epoch, the newest by default); the helper accepts
// every epoch of its file, which is how a rotation works.
type VerifyKeys map[uint32][VerifyKeySize]byte

// Newest returns the highest epoch of k (0, false when k is empty).
func (k VerifyKeys) Newest() (uint32, bool) {
	var e uint32
	ok := false
	for x := range k {
		if !ok || x > e {
			e, ok = x, true
		}
	}
	return e, ok
}

// ParseVerifyKeys parses a verify key file. Format: one line per epoch,
// "EPOCH HEX\n", EPOCH a decimal uint32 of 1..4294967295 without leading
// zeros or sign, one space, HEX the 32-byte key as 64 lowercase hex
// digits; epochs strictly increasing; every line ends in "\n"; nothing
// else (no blank lines, comments, carriage returns or trailing spaces); at
// least one and at most MaxVerifyKeyEpochs lines; an all-zero key is
// refused. Errors wrap ErrVerifyKeyFile and name the line (never the key).
func ParseVerifyKeys(b []byte) (VerifyKeys, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty (write one with `crowdlog keys prio3-verify --out FILE`)", ErrVerifyKeyFile)
	}
	if b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("%w: the last line does not end in a newline", ErrVerifyKeyFile)
	}
	keys := VerifyKeys{}
	var prev uint32
	lines := bytes.Split(b[:len(b)-1], []byte("\n"))
	if len(lines) > MaxVerifyKeyEpochs {
		return nil, fmt.Errorf("%w: %d lines, at most %d (remove retired epochs)", ErrVerifyKeyFile, len(lines), MaxVerifyKeyEpochs)
	}
	for i, line := range lines {
		n := i + 1
		ep, hx, ok := bytes.Cut(line, []byte(" "))
		if !ok || len(hx) != 2*VerifyKeySize {
			return nil, fmt.Errorf("%w: line %d: want \"EPOCH HEX\" with 64 hex digits", ErrVerifyKeyFile, n)
		}
		if len(ep) == 0 || len(ep) > 10 || ep[0] == '0' {
			return nil, fmt.Errorf("%w: line %d: epoch must be a decimal number 1..4294967295 without leading zeros", ErrVerifyKeyFile, n)
		}
		for _, c := range ep {
			if c < '0' || c > '9' {
				return nil, fmt.Errorf("%w: line %d: epoch must be a decimal number", ErrVerifyKeyFile, n)
			}
		}
		e64, err := strconv.ParseUint(string(ep), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: epoch out of range", ErrVerifyKeyFile, n)
		}
		e := uint32(e64)
		if i > 0 && e <= prev {
			return nil, fmt.Errorf("%w: line %d: epoch %d after %d (epochs must increase)", ErrVerifyKeyFile, n, e, prev)
		}
		for _, c := range hx {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return nil, fmt.Errorf("%w: line %d: key must be 64 lowercase hex digits", ErrVerifyKeyFile, n)
			}
		}
		var k [VerifyKeySize]byte
		if _, err := hex.Decode(k[:], hx); err != nil {
			return nil, fmt.Errorf("%w: line %d: key must be 64 lowercase hex digits", ErrVerifyKeyFile, n)
		}
		if k == [VerifyKeySize]byte{} {
			return nil, fmt.Errorf("%w: line %d: all-zero key (generate keys with `crowdlog keys prio3-verify`)", ErrVerifyKeyFile, n)
		}
		keys[e] = k
		prev = e
	}
	return keys, nil
}

// MarshalVerifyKeys encodes k in the format of ParseVerifyKeys (epochs
// ascending).
func MarshalVerifyKeys(k VerifyKeys) []byte {
	var b []byte
	for _, e := range sortedEpochs(k) {
		key := k[e]
		b = strconv.AppendUint(b, uint64(e), 10)
		b = append(b, ' ')
		b = hex.AppendEncode(b, key[:])
		b = append(b, '\n')
	}
	return b
}

func sortedEpochs(k VerifyKeys) []uint32 {
	es := slices.Collect(maps.Keys(k))
	slices.Sort(es)
	return es
}

// LoadVerifyKeys reads and parses the verify key file at path
// (ParseVerifyKeys). Errors name the file.
func LoadVerifyKeys(path string) (VerifyKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--verify-key %s: %w (write one with `crowdlog keys prio3-verify --out FILE` and give both aggregators a copy)", path, err)
	}
	k, err := ParseVerifyKeys(b)
	if err != nil {
		return nil, fmt.Errorf("--verify-key %s: %w", path, err)
	}
	return k, nil
}

// AddVerifyKeyEpoch adds a fresh random verify key (crypto/rand) to the
// file at path under the epoch after its newest (1 for a new file), keeping
// the others, and returns that epoch. The file is replaced atomically
// (mode 0600). A file that does not parse is left alone (error).
func AddVerifyKeyEpoch(path string) (uint32, error) {
	keys := VerifyKeys{}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if keys, err = ParseVerifyKeys(b); err != nil {
			return 0, fmt.Errorf("%s: %w (fix or move it; nothing was written)", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return 0, fmt.Errorf("verify key file: %w", err)
	}
	e, _ := keys.Newest()
	if e == ^uint32(0) {
		return 0, fmt.Errorf("%s: %w: epoch %d is the last one", path, ErrVerifyKeyFile, e)
	}
	if len(keys) >= MaxVerifyKeyEpochs {
		return 0, fmt.Errorf("%s: %w: %d epochs already (remove retired lines first)", path, ErrVerifyKeyFile, len(keys))
	}
	var k [VerifyKeySize]byte
	if _, err := rand.Read(k[:]); err != nil {
		return 0, err
	}
	keys[e+1] = k
	if err := atomicfile.WriteFile(path, MarshalVerifyKeys(keys), 0o600); err != nil {
		return 0, fmt.Errorf("verify key file: %w", err)
	}
	return e + 1, nil
}

// Prio3VerifyHelp is the long help of `crowdlog keys prio3-verify`.
const Prio3VerifyHelp = `prio3-verify writes the verify key of a Prio3 campaign (the 32-byte secret
that the leader and the helper aggregator share, VDAF-14 §7.2.2) to FILE:
a new file gets epoch 1; an existing one gains the next epoch with a fresh
random key and keeps the others (mode 0600, replaced atomically).

Format, one line per epoch: "EPOCH HEX" (decimal epoch, 64 lowercase hex
digits), epochs increasing, nothing else.

Give a copy to both aggregator operators over a channel only they share
(never the collector, relays or clients), and start both with
--verify-key FILE. Rotation: add an epoch, install the file at the helper and
restart it (it accepts every epoch of the file), then at the leader (it
prepares under the newest epoch unless --key-epoch says otherwise); once
the old epoch's batches are collected, delete its line at both.`

// Prio3HelperTokenSeed is the helper operator's 32-byte token seed (raw
// bytes, 0600): the helper derives from it the key of each campaign-day's
// helper tokens (token.DeriveKey(token.KindPrio3Helper,
// token.Prio3Epoch(campaign, day), seed)), with which its issuer issues
// them (`crowdlog issuer --role prio3-helper`) and its aggregator verifies
// them (aggregate-prio3 --role helper --token-seed). The leader never holds
// it, so it can mint no report the helper prepares.
const Prio3HelperTokenSeed = "prio3-helper-token.key"

// Prio3LeaderTokenSeed is the leader operator's 32-byte token seed, the
// counterpart of Prio3HelperTokenSeed: key of each campaign-day's leader
// tokens token.DeriveKey(token.KindPrio3Leader, token.Prio3Epoch(campaign,
// day), seed), issued by `crowdlog issuer --role prio3-leader` and
// verified by aggregate-prio3 --role leader --token-seed. The helper never
// holds it, so its operator can mint no report the leader prepares.
const Prio3LeaderTokenSeed = "prio3-leader-token.key"

// EnsurePrio3TokenSeed returns the token seed at path, creating a random
// one (mode 0600, written once: atomicfile.CreateOnce) when it is missing.
// Errors: a seed file of the wrong size, ErrNotCustodian in a role
// directory that is not the prio3-helper's.
func EnsurePrio3TokenSeed(path string) ([]byte, error) {
	if err := CheckPrivate(path); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		seed := make([]byte, token.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := atomicfile.CreateOnce(path, seed, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("prio3 token seed %s: %w", path, err)
		}
	}
	return LoadPrio3TokenSeed(path)
}

// LoadPrio3TokenSeed reads the token seed at path. Errors wrap
// os.ErrNotExist when it is missing (crowdlog keys generate --role
// prio3-helper creates it), ErrNotCustodian in another role's directory,
// and name a seed of the wrong size.
func LoadPrio3TokenSeed(path string) ([]byte, error) {
	if err := CheckPrivate(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("prio3 token seed %s: %w", path, err)
	}
	if len(b) != token.SeedSize {
		return nil, fmt.Errorf("prio3 token seed %s: %d bytes, want %d", path, len(b), token.SeedSize)
	}
	return b, nil
}
