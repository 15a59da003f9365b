package protocol

import (
	"fmt"

	"github.com/cloudflare/circl/oprf"
)

// OPRFSuite is RFC 9497's ristretto255-SHA512 suite used for randomness.
var OPRFSuite = oprf.SuiteRistretto255

// MaxBatch is the largest number of OPRF elements in one randomness request.
const MaxBatch = 4096

// elementSize is the encoded size of a ristretto255 element.
const elementSize = 32

// OPRFInput is the OPRF input for one artifact of an application in an epoch:
// "crowdlog-v1" ‖ 0 ‖ app ‖ 0 ‖ epoch ‖ 0 ‖ artifact. The randomness
// service never sees it (it evaluates blinded elements, RFC 9497 §3.3.1).
func OPRFInput(app, epoch, artifact string) []byte {
	b := make([]byte, 0, 16+len(app)+len(epoch)+len(artifact))
	b = append(b, "crowdlog-v1"...)
	b = append(append(b, 0), app...)
	b = append(append(b, 0), epoch...)
	b = append(append(b, 0), artifact...)
	return b
}

// RandomnessRequest asks the randomness service to evaluate blinded
// elements under the key of Epoch (RFC 9497 §3.3.1 BlindEvaluate, batched).
type RandomnessRequest struct {
	Epoch    string
	Elements [][]byte // each a 32-byte encoded ristretto255 element
}

// MarshalBinary encodes: version ‖ u8 len epoch ‖ u16 count ‖ count×32 bytes.
func (q *RandomnessRequest) MarshalBinary() ([]byte, error) {
	if len(q.Elements) > MaxBatch || len(q.Epoch) > 255 {
		return nil, fmt.Errorf("protocol: randomness batch of %d exceeds %d (or epoch name too long)", len(q.Elements), MaxBatch)
	}
	w := writer{b: make([]byte, 0, 4+len(q.Epoch)+elementSize*len(q.Elements))}
	w.u8(Version)
	w.bytes8([]byte(q.Epoch))
	w.u16(uint16(len(q.Elements)))
	for _, e := range q.Elements {
		if len(e) != elementSize {
			return nil, fmt.Errorf("protocol: element of %d bytes, want %d", len(e), elementSize)
		}
		w.raw(e)
	}
	return w.b, nil
}

// ParseRandomnessRequest decodes a request; errors wrap ErrMalformed.
func ParseRandomnessRequest(b []byte) (*RandomnessRequest, error) {
	r := reader{b: b}
	r.version("randomness request")
	q := &RandomnessRequest{Epoch: string(r.bytes8("epoch"))}
	n := int(r.u16("count"))
	if n > MaxBatch {
		return nil, malformed("batch of %d exceeds %d", n, MaxBatch)
	}
	for i := 0; i < n && r.err == nil; i++ {
		q.Elements = append(q.Elements, r.take(elementSize, "element"))
	}
	if err := r.done("randomness request"); err != nil {
		return nil, err
	}
	return q, nil
}

// RandomnessResponse carries the evaluated elements in request order, or an
// error message (e.g. an unknown or closed epoch).
type RandomnessResponse struct {
	Error    string
	Elements [][]byte
}

// MarshalBinary encodes: version ‖ status (0 ok, 1 error) ‖ (u16 count ‖
// elements | u16 len message).
func (p *RandomnessResponse) MarshalBinary() ([]byte, error) {
	w := writer{}
	w.u8(Version)
	if p.Error != "" {
		w.u8(1)
		msg := p.Error
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		w.bytes16([]byte(msg))
		return w.b, nil
	}
	w.u8(0)
	w.u16(uint16(len(p.Elements)))
	for _, e := range p.Elements {
		if len(e) != elementSize {
			return nil, fmt.Errorf("protocol: element of %d bytes, want %d", len(e), elementSize)
		}
		w.raw(e)
	}
	return w.b, nil
}

// ParseRandomnessResponse decodes a response; errors wrap ErrMalformed.
func ParseRandomnessResponse(b []byte) (*RandomnessResponse, error) {
	r := reader{b: b}
	r.version("randomness response")
	p := &RandomnessResponse{}
	switch r.u8("status") {
	case 0:
		n := int(r.u16("count"))
		if n > MaxBatch {
			return nil, malformed("batch of %d exceeds %d", n, MaxBatch)
		}
		for i := 0; i < n && r.err == nil; i++ {
			p.Elements = append(p.Elements, r.take(elementSize, "element"))
		}
	case 1:
		p.Error = string(r.bytes16("error"))
		if r.err == nil && p.Error == "" {
			return nil, malformed("empty error message")
		}
	default:
		if r.err == nil {
			return nil, malformed("unknown status")
		}
	}
	if err := r.done("randomness response"); err != nil {
		return nil, err
	}
	return p, nil
}

// Blind blinds OPRF inputs for one request (RFC 9497 §3.3.1 Blind). It
// returns the client's finalize state and the request to send.
func Blind(epoch string, inputs [][]byte) (*oprf.FinalizeData, *RandomnessRequest, error) {
	c := oprf.NewClient(OPRFSuite)
	fin, req, err := c.Blind(inputs)
	if err != nil {
		return nil, nil, fmt.Errorf("oprf blind: %w", err)
	}
	q := &RandomnessRequest{Epoch: epoch, Elements: make([][]byte, len(req.Elements))}
	for i, e := range req.Elements {
		if q.Elements[i], err = e.MarshalBinaryCompress(); err != nil {
			return nil, nil, err
		}
	}
	return fin, q, nil
}

// Finalize unblinds a response into one 64-byte ω per input (RFC 9497
// §3.3.1 Finalize). Errors when the response has the wrong count, carries an
// error, or holds invalid elements.
func Finalize(fin *oprf.FinalizeData, resp *RandomnessResponse) ([][]byte, error) {
	if resp.Error != "" {
		return nil, fmt.Errorf("randomness service: %s", resp.Error)
	}
	ev := &oprf.Evaluation{Elements: make([]oprf.Evaluated, len(resp.Elements))}
	for i, b := range resp.Elements {
		e := G.NewElement()
		if err := e.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("randomness service returned an invalid element: %w", err)
		}
		ev.Elements[i] = e
	}
	c := oprf.NewClient(OPRFSuite)
	out, err := c.Finalize(fin, ev)
	if err != nil {
		return nil, fmt.Errorf("oprf finalize: %w", err)
	}
	return out, nil
}

// Evaluate evaluates a request under key (RFC 9497 §3.3.1 BlindEvaluate).
// Errors when an element is not a valid ristretto255 encoding.
func Evaluate(key *oprf.PrivateKey, q *RandomnessRequest) (*RandomnessResponse, error) {
	req := &oprf.EvaluationRequest{Elements: make([]oprf.Blinded, len(q.Elements))}
	for i, b := range q.Elements {
		e := G.NewElement()
		if err := e.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("%w: element %d is not a ristretto255 encoding", ErrMalformed, i)
		}
		req.Elements[i] = e
	}
	ev, err := oprf.NewServer(OPRFSuite, key).Evaluate(req)
	if err != nil {
		return nil, err
	}
	resp := &RandomnessResponse{Elements: make([][]byte, len(ev.Elements))}
	for i, e := range ev.Elements {
		if resp.Elements[i], err = e.MarshalBinaryCompress(); err != nil {
			return nil, err
		}
	}
	return resp, nil
}
