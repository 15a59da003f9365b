package ingest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

// Errors of the pinned operator keys (New; errors.Is works on what it
// returns).
var (
	// ErrKeyFingerprint: a public key file's SHA-256 differs from its
	// fingerprint in Config.Fingerprints.
	ErrKeyFingerprint = errors.New("an operator's public key does not match its published fingerprint")
	// ErrAggregatorKeyChanged: the aggregator-sign.key.pub in
	// Config.KeysDir differs from the copy the device pinned in
	// StateDir/keys on first use, and Config.Fingerprints does not vouch
	// for the new one.
	ErrAggregatorKeyChanged = errors.New("the aggregator operator's signing key changed since this device pinned it")
	// ErrAnnouncementSignature: answers came on protocol.PipelineSubject,
	// but none was signed by the pinned aggregator signing key (an
	// aggregator without its signing key, or someone else answering).
	ErrAnnouncementSignature = errors.New("no pipeline announcement signed by the pinned aggregator key")
	// ErrAnnouncementStale: answers signed by the pinned aggregator key
	// came on protocol.PipelineSubject, but none for this request: each
	// echoed another request's nonce or context, or had only the
	// announcement signed once at its process's start (a recorded answer
	// replayed, or an aggregator older than the client).
	ErrAnnouncementStale = errors.New("no pipeline announcement signed for this request (replayed or from an older aggregator)")
)

// AggregatorSignKeyFile is the file of the aggregator operator's public
// signing key (Ed25519, PKIX PEM; `crowdlog keys generate --role
// aggregator` writes it) that a device with Config.App reads from
// Config.KeysDir and pins in StateDir/keys.
const AggregatorSignKeyFile = keydir.AggregatorSignKey + ".pub"

// fingerprintFiles are the file names Config.Fingerprints may name.
var fingerprintFiles = []string{keydir.RelayAKey + ".pub", keydir.RelayBKey + ".pub", keydir.AggregatorKey + ".pub", AggregatorSignKeyFile}

func checkFingerprintNames(fps map[string]string) error {
	for name, fp := range fps {
		if !slices.Contains(fingerprintFiles, name) {
			return fmt.Errorf("ingest: Config.Fingerprints names %q: use the key file names %v", name, fingerprintFiles)
		}
		if b, err := hex.DecodeString(fp); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("ingest: Config.Fingerprints[%q]: want 64 lowercase hex digits (sha256sum of the file)", name)
		}
	}
	return nil
}

// checkFingerprint compares b, the bytes of key file name, with
// fps[name]; vouched is true when fps names it and it agrees.
func checkFingerprint(fps map[string]string, name string, b []byte) (vouched bool, err error) {
	fp, ok := fps[name]
	if !ok {
		return false, nil
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != fp {
		return false, fmt.Errorf("ingest: %w: %s has SHA-256 %s, Config.Fingerprints[%q] says %s: get the key file from its operator again and compare out of band",
			ErrKeyFingerprint, name, got, name, fp)
	}
	return true, nil
}

// checkRouteFingerprints checks the route key files in dir against
// Config.Fingerprints.
func checkRouteFingerprints(dir string, fps map[string]string) error {
	for _, name := range fingerprintFiles[:3] {
		if _, ok := fps[name]; !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("ingest: route keys: %w", err)
		}
		if _, err := checkFingerprint(fps, name, b); err != nil {
			return err
		}
	}
	return nil
}

// pinSignKey returns the aggregator operator's public signing key the
// device verifies announcements with: the copy pinned in StateDir/keys,
// or on first use (or a rotation Config.Fingerprints vouches for) the
// file in Config.KeysDir, which it then pins. A KeysDir file that differs
// from the pinned copy without a vouching fingerprint is refused
// (ErrAggregatorKeyChanged).
func pinSignKey(cfg Config, log *slog.Logger) (ed25519.PublicKey, error) {
	var pinPath string
	var pinned []byte
	if !cfg.Memory {
		pinPath = filepath.Join(cfg.StateDir, stateKeys, AggregatorSignKeyFile)
		b, err := os.ReadFile(pinPath)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("ingest: pinned %s: %w", AggregatorSignKeyFile, err)
		}
		pinned = b
	}
	b := pinned
	if cfg.KeysDir != "" {
		src, err := os.ReadFile(filepath.Join(cfg.KeysDir, AggregatorSignKeyFile))
		switch {
		case err == nil:
			b = src
		case !errors.Is(err, os.ErrNotExist) || pinned == nil:
			return nil, fmt.Errorf("ingest: Config.App is set, so the device verifies the aggregators' signed pipeline announcement, but %w: give the aggregator operator's public signing key %s in Config.KeysDir (`crowdlog keys export-public --role aggregator`; check it against Config.Fingerprints)",
				err, AggregatorSignKeyFile)
		}
	} else if pinned == nil {
		return nil, fmt.Errorf("ingest: Config.App is set but neither the device state nor Config.KeysDir holds %s: give Config.KeysDir with the aggregator operator's public signing key once", AggregatorSignKeyFile)
	}
	vouched, err := checkFingerprint(cfg.Fingerprints, AggregatorSignKeyFile, b)
	if err != nil {
		return nil, err
	}
	if pinned != nil && !bytes.Equal(pinned, b) {
		if !vouched {
			old, now := sha256.Sum256(pinned), sha256.Sum256(b)
			return nil, fmt.Errorf("ingest: %w: %s in Config.KeysDir has SHA-256 %x, the pinned copy %x: if the operator rotated it, verify the new fingerprint out of band and set Config.Fingerprints[%q]",
				ErrAggregatorKeyChanged, AggregatorSignKeyFile, now[:], old[:], AggregatorSignKeyFile)
		}
		log.Info("device: aggregator signing key rotated (fingerprint vouched); pinning the new one", "key", AggregatorSignKeyFile)
	}
	pub, err := parseSignPub(b)
	if err != nil {
		return nil, fmt.Errorf("ingest: %s: %w (Config.KeysDir: the aggregator operator's public bundle)", AggregatorSignKeyFile, err)
	}
	if pinPath != "" && !bytes.Equal(pinned, b) {
		if err := writeFileSync(pinPath, b); err != nil {
			return nil, fmt.Errorf("ingest: pin %s in the device state: %w", AggregatorSignKeyFile, err)
		}
	}
	return pub, nil
}

// parseSignPub decodes an Ed25519 public key in PKIX PEM
// (keydir.EnsureSigningKey's .pub).
func parseSignPub(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM public key")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	return ek, nil
}
