package star

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
)

// FT_u with Anonymous Rate-Limited Credentials (draft-ietf-privacypass-arc-crypto;
// CMZ14 keyed-verification credentials, protocol/arc). Under plain FT_u a
// share's x comes from a self-chosen user secret, so one client with k−1
// secrets is k−1 "users". With ARC, x and the unit id come from the tag of
// an ARC presentation for the context ARCContext() with limit 1: one
// credential (one enrolled identity per epoch) has exactly one valid tag
// per (release context, artifact tag), so however many secrets a client
// uses it adds one share, and the aggregator — which verifies the
// presentation and checks x = ARCShareX(tag) — counts credentials.

const (
	arcContextLabel = "crowdlog-v1 arc"
	arcXDST         = "crowdlog-v1 arc x"
	arcUnitLabel    = "crowdlog-v1 arc unit"
)

// arcContext is "crowdlog-v1 arc" ‖ u8 len(app) ‖ app ‖ u8 len(epoch) ‖
// epoch ‖ u8 policy ‖ u16 k ‖ tag[32]. The application's Meaning is not
// repeated: it is bound into tag already.
func arcContext(app, epoch string, policy Policy, k int, tag [32]byte) []byte {
	b := append([]byte(arcContextLabel), contextBytes(clip(app), clip(epoch), policy, k)...)
	return append(b, tag[:]...)
}

// ARCContext returns the ARC presentation context of this sealing's
// reports: "crowdlog-v1 arc" ‖ release context (docs/wire.md's ctx without
// Meaning) ‖ tag. Present with limit 1.
func (s *Sealing) ARCContext() []byte { return arcContext(s.App, s.Epoch, s.Policy, s.K, s.Tag) }

// ARCContext returns the presentation context a report's Presentation must
// verify under, computed from the report's own fields; equal to the
// sealing's ARCContext for reports it sealed.
func (r *Report) ARCContext() []byte {
	return arcContext(r.App, r.Epoch, r.Policy, int(r.K), r.Tag)
}

// ARCShareX returns the share x-coordinate bound to an ARC presentation
// tag: HashToScalar(arcTag, DST "crowdlog-v1 arc x") on ristretto255
// (RFC 9380 hash_to_field via circl), never zero in practice (2^−252).
func ARCShareX(arcTag []byte) group.Scalar {
	return protocol.G.HashToScalar(arcTag, []byte(arcXDST))
}

// ARCUnitID returns the unit id bound to an ARC presentation tag:
// SHA-256("crowdlog-v1 arc unit" ‖ arcTag)[:16], the first 16 bytes of
// ARCTagDigest(arcTag).
func ARCUnitID(arcTag []byte) [16]byte {
	h := ARCTagDigest(arcTag)
	var u [16]byte
	copy(u[:], h[:16])
	return u
}

// ARCTagDigest returns SHA-256("crowdlog-v1 arc unit" ‖ arcTag): 32 bytes
// that stand for a verified ARC presentation tag in the aggregator's state
// (equal digests ⇔ equal tags) and whose first 16 bytes are the tag's unit
// id (ARCUnitID), so the aggregator can check a decrypted payload's Unit
// against the credential behind its share without keeping the tag.
func ARCTagDigest(arcTag []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(arcUnitLabel))
	h.Write(arcTag)
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// ShareXFromARC is ARCShareX: the x-coordinate of the share sealed for
// the ARC presentation tag arcTag (the same for every sealing; the tag is
// already specific to ARCContext).
func (s *Sealing) ShareXFromARC(arcTag []byte) group.Scalar { return ARCShareX(arcTag) }

// UnitIDFromARC is ARCUnitID: the unit id sealed in the payload for arcTag.
func (s *Sealing) UnitIDFromARC(arcTag []byte) [16]byte { return ARCUnitID(arcTag) }

// CheckARCShare reports whether r's share sits at the x-coordinate bound to
// arcTag (the tag of r's verified Presentation). Errors name both when not.
func (r *Report) CheckARCShare(arcTag []byte) error {
	if !r.Share.X.IsEqual(ARCShareX(arcTag)) {
		return fmt.Errorf("protocol: share x of report %x is not bound to its ARC presentation tag", r.ID[:4])
	}
	return nil
}

// SealARC is Seal for FT_u with a credential: the share's x is
// ARCShareX(arcTag) and the payload's Unit is ARCUnitID(arcTag), where
// arcTag is the Tag() of the client's ARC presentation for ARCContext()
// with limit 1. The caller sets the report's Presentation to that
// presentation's encoding. Errors when the sealing is not FT_u or arcTag
// is empty.
func (s *Sealing) SealARC(arcTag []byte, primary, secondary string) (*Report, error) {
	return s.sealARC(rand.Reader, arcTag, primary, secondary)
}

// SealAt builds a report of this sealing whose share sits at x and whose
// payload carries unit as its unit id: what any client that holds ω can
// build, so neither x nor the unit id is trusted by the aggregator (x is
// checked against the ARC presentation tag, CheckARCShare; the unit id
// against star.ARCUnitID of that tag once the group opens). Clients never
// need it; attack tests and tools use it to forge reports. Errors come
// from the payload's encoding (oversized fields).
func (s *Sealing) SealAt(x group.Scalar, unit [16]byte, primary, secondary string) (*Report, error) {
	r := &Report{App: s.App, Epoch: s.Epoch, Policy: s.Policy, K: uint16(s.K), Pipeline: s.Pipeline, Tag: s.Tag, Commitment: s.commit}
	if _, err := io.ReadFull(rand.Reader, r.ID[:]); err != nil {
		return nil, err
	}
	r.Share = s.poly.Eval(x)
	pt, err := (&Payload{Primary: primary, Secondary: secondary, Unit: unit}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	r.Ciphertext, err = sealAEAD(rand.Reader, s.key, r.associatedData(), pt)
	return r, err
}

func (s *Sealing) sealARC(rnd io.Reader, arcTag []byte, primary, secondary string) (*Report, error) {
	if s.Policy != FTu {
		return nil, fmt.Errorf("protocol: SealARC needs an FT_u sealing, this one is %v", s.Policy)
	}
	if len(arcTag) == 0 {
		return nil, fmt.Errorf("protocol: SealARC needs the ARC presentation tag")
	}
	r := &Report{App: s.App, Epoch: s.Epoch, Policy: s.Policy, K: uint16(s.K), Pipeline: s.Pipeline, Tag: s.Tag, Commitment: s.commit}
	if _, err := io.ReadFull(rnd, r.ID[:]); err != nil {
		return nil, err
	}
	r.Share = s.poly.Eval(ARCShareX(arcTag))
	p := Payload{Primary: primary, Secondary: secondary, Unit: ARCUnitID(arcTag)}
	pt, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	r.Ciphertext, err = sealAEAD(rnd, s.key, r.associatedData(), pt)
	return r, err
}
