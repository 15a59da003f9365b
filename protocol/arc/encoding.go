package arc

import (
	"fmt"

	"github.com/crowdlog/crowdlog/protocol"
)

// Encoded sizes (draft-ietf-privacypass-arc-crypto, "ARC(P-256)").
const (
	PrivateKeySize         = 4 * ScalarSize                            // x0 ‖ x1 ‖ x2 ‖ x0Blinding
	PublicKeySize          = 3 * ElementSize                           // NserverPublicKey
	CredentialRequestSize  = 2*ElementSize + 5*ScalarSize              // Nrequest
	CredentialResponseSize = 6*ElementSize + 8*ScalarSize              // Nresponse
	CredentialSize         = ScalarSize + 3*ElementSize                // m1 ‖ U ‖ U' ‖ X1 (crowdlog's client-side storage)
	presentationFixed      = 5*ElementSize + 6*ScalarSize              // k = 0
	presentationPerBit     = ElementSize + 3*ScalarSize                // one D and three responses
	MaxPresentationSize    = presentationFixed + 16*presentationPerBit // limit ≤ MaxLimit = 2^16
)

// PresentationSize is Npresentation for limit: 5·Ne + k·Ne + (6+3k)·Ns,
// k = NumBits(limit) (357 bytes for limit 1).
func PresentationSize(limit int) int { return presentationFixed + NumBits(limit)*presentationPerBit }

func appendElements(b []byte, es ...element) ([]byte, error) {
	for _, e := range es {
		if e == nil {
			return nil, fmt.Errorf("arc: missing element")
		}
		eb, err := encodeElement(e)
		if err != nil {
			return nil, err
		}
		b = append(b, eb...)
	}
	return b, nil
}

func decodeElements(b []byte, names ...string) ([]element, error) {
	out := make([]element, len(names))
	for i, n := range names {
		e, err := decodeElement(b[i*ElementSize:(i+1)*ElementSize], n)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

func checkLen(b []byte, n int, what string) error {
	if len(b) != n {
		return protocol.Malformed("arc: %s of %d bytes, want %d", what, len(b), n)
	}
	return nil
}

// checkProofScalars checks that every 32-byte scalar of a proof is below
// the group order (DeserializeScalar; a zero response is allowed here, the
// proof check decides).
func checkProofScalars(b []byte, what string) error {
	for i := 0; i+ScalarSize <= len(b); i += ScalarSize {
		if _, ok := parseScalar(b[i : i+ScalarSize]); !ok {
			return protocol.Malformed("arc: %s scalar %d is not below the P-256 order", what, i/ScalarSize)
		}
	}
	return nil
}

// MarshalBinary encodes x0 ‖ x1 ‖ x2 ‖ x0Blinding (PrivateKeySize bytes).
// Secret: store with file mode 0600.
func (sk *PrivateKey) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, PrivateKeySize)
	for _, s := range []scalar{sk.x0, sk.x1, sk.x2, sk.xb} {
		b = append(b, encodeScalar(s)...)
	}
	return b, nil
}

// ParsePrivateKey decodes MarshalBinary's output and recomputes the public
// key. Errors wrap protocol.ErrMalformed (wrong length, a scalar zero or not
// below the order).
func ParsePrivateKey(b []byte) (*PrivateKey, error) {
	if err := checkLen(b, PrivateKeySize, "private key"); err != nil {
		return nil, err
	}
	var s [4]scalar
	for i, n := range []string{"x0", "x1", "x2", "x0Blinding"} {
		v, err := decodeScalar(b[i*ScalarSize:(i+1)*ScalarSize], n)
		if err != nil {
			return nil, err
		}
		s[i] = v
	}
	return newPrivateKey(s[0], s[1], s[2], s[3]), nil
}

// MarshalBinary encodes ServerPublicKey: X0 ‖ X1 ‖ X2 (PublicKeySize bytes).
func (pk *PublicKey) MarshalBinary() ([]byte, error) {
	return appendElements(make([]byte, 0, PublicKeySize), pk.X0, pk.X1, pk.X2)
}

// ParsePublicKey decodes ServerPublicKey. Errors wrap protocol.ErrMalformed
// (wrong length, a point not on P-256 or not canonically compressed).
func ParsePublicKey(b []byte) (*PublicKey, error) {
	if err := checkLen(b, PublicKeySize, "public key"); err != nil {
		return nil, err
	}
	e, err := decodeElements(b, "X0", "X1", "X2")
	if err != nil {
		return nil, err
	}
	return &PublicKey{X0: e[0], X1: e[1], X2: e[2]}, nil
}

// MarshalBinary encodes CredentialRequest: m1Enc ‖ m2Enc ‖ requestProof
// (CredentialRequestSize bytes).
func (r *CredentialRequest) MarshalBinary() ([]byte, error) {
	if len(r.Proof) != 5*ScalarSize {
		return nil, fmt.Errorf("arc: request proof of %d bytes, want %d", len(r.Proof), 5*ScalarSize)
	}
	b, err := appendElements(make([]byte, 0, CredentialRequestSize), r.M1Enc, r.M2Enc)
	return append(b, r.Proof...), err
}

// ParseCredentialRequest decodes CredentialRequest. Errors wrap
// protocol.ErrMalformed. The proof is checked by Issue.
func ParseCredentialRequest(b []byte) (*CredentialRequest, error) {
	if err := checkLen(b, CredentialRequestSize, "credential request"); err != nil {
		return nil, err
	}
	e, err := decodeElements(b, "m1Enc", "m2Enc")
	if err != nil {
		return nil, err
	}
	proof := b[2*ElementSize:]
	if err := checkProofScalars(proof, "request proof"); err != nil {
		return nil, err
	}
	return &CredentialRequest{M1Enc: e[0], M2Enc: e[1], Proof: append([]byte(nil), proof...)}, nil
}

// MarshalBinary encodes CredentialResponse: U ‖ encUPrime ‖ X0Aux ‖ X1Aux ‖
// X2Aux ‖ HAux ‖ responseProof (CredentialResponseSize bytes).
func (r *CredentialResponse) MarshalBinary() ([]byte, error) {
	if len(r.Proof) != 8*ScalarSize {
		return nil, fmt.Errorf("arc: response proof of %d bytes, want %d", len(r.Proof), 8*ScalarSize)
	}
	b, err := appendElements(make([]byte, 0, CredentialResponseSize), r.U, r.EncUPrime, r.X0Aux, r.X1Aux, r.X2Aux, r.HAux)
	return append(b, r.Proof...), err
}

// ParseCredentialResponse decodes CredentialResponse. Errors wrap
// protocol.ErrMalformed. The proof is checked by Finalize.
func ParseCredentialResponse(b []byte) (*CredentialResponse, error) {
	if err := checkLen(b, CredentialResponseSize, "credential response"); err != nil {
		return nil, err
	}
	e, err := decodeElements(b, "U", "encUPrime", "X0Aux", "X1Aux", "X2Aux", "HAux")
	if err != nil {
		return nil, err
	}
	proof := b[6*ElementSize:]
	if err := checkProofScalars(proof, "response proof"); err != nil {
		return nil, err
	}
	return &CredentialResponse{U: e[0], EncUPrime: e[1], X0Aux: e[2], X1Aux: e[3], X2Aux: e[4], HAux: e[5],
		Proof: append([]byte(nil), proof...)}, nil
}

// MarshalBinary encodes a credential for the client's own storage: m1 ‖ U ‖
// U' ‖ X1 (CredentialSize bytes). Secret: m1 links every presentation.
func (c *Credential) MarshalBinary() ([]byte, error) {
	return appendElements(append(make([]byte, 0, CredentialSize), encodeScalar(c.m1)...), c.U, c.UPrime, c.X1)
}

// ParseCredential decodes Credential.MarshalBinary's output. Errors wrap
// protocol.ErrMalformed.
func ParseCredential(b []byte) (*Credential, error) {
	if err := checkLen(b, CredentialSize, "credential"); err != nil {
		return nil, err
	}
	m1, err := decodeScalar(b[:ScalarSize], "m1")
	if err != nil {
		return nil, err
	}
	e, err := decodeElements(b[ScalarSize:], "U", "UPrime", "X1")
	if err != nil {
		return nil, err
	}
	return &Credential{m1: m1, U: e[0], UPrime: e[1], X1: e[2]}, nil
}

// MarshalBinary encodes Presentation: U ‖ UPrimeCommit ‖ m1Commit ‖ tag ‖
// nonceCommit ‖ D[0..k) ‖ challenge ‖ responses (PresentationSize(limit)
// bytes).
func (p *Presentation) MarshalBinary() ([]byte, error) {
	k := len(p.D)
	if len(p.Proof) != (6+3*k)*ScalarSize {
		return nil, fmt.Errorf("arc: presentation proof of %d bytes for %d bit commitments, want %d", len(p.Proof), k, (6+3*k)*ScalarSize)
	}
	var b []byte
	if e := p.encodings(); e != nil {
		b = make([]byte, 0, presentationFixed+k*presentationPerBit)
		for _, eb := range e {
			b = append(b, eb...)
		}
	} else {
		var err error
		b, err = appendElements(make([]byte, 0, presentationFixed+k*presentationPerBit), p.U, p.UPrimeCommit, p.M1Commit, p.TagElement, p.NonceCommit)
		if err != nil {
			return nil, err
		}
	}
	b, err := appendElements(b, p.D...)
	return append(b, p.Proof...), err
}

// ParsePresentation decodes Presentation; k is inferred from the length
// (357 + 129·k bytes, k ≤ 16). Errors wrap protocol.ErrMalformed.
// VerifyPresentation checks that k matches the limit.
func ParsePresentation(b []byte) (*Presentation, error) {
	if len(b) < presentationFixed || len(b) > MaxPresentationSize || (len(b)-presentationFixed)%presentationPerBit != 0 {
		return nil, protocol.Malformed("arc: presentation of %d bytes is not 357 + 129·k bytes with k ≤ 16", len(b))
	}
	k := (len(b) - presentationFixed) / presentationPerBit
	names := []string{"U", "UPrimeCommit", "m1Commit", "tag", "nonceCommit"}
	for i := 0; i < k; i++ {
		names = append(names, fmt.Sprintf("D[%d]", i))
	}
	e, err := decodeElements(b, names...)
	if err != nil {
		return nil, err
	}
	proof := b[(5+k)*ElementSize:]
	if err := checkProofScalars(proof, "presentation proof"); err != nil {
		return nil, err
	}
	return &Presentation{U: e[0], UPrimeCommit: e[1], M1Commit: e[2], TagElement: e[3], NonceCommit: e[4],
		D: e[5:], Proof: append([]byte(nil), proof...)}, nil
}
