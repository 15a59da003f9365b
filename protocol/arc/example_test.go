package arc_test

import (
	"crypto/rand"
	"fmt"

	"github.com/crowdlog/crowdlog/protocol/arc"
)

// ExampleCredential issues a credential and presents it once in a context
// with limit 1; the verifier keeps the tags it accepted and refuses a
// second presentation of the same credential in that context.
func ExampleCredential() {
	// Issuer (once per epoch): the key; the public key goes to clients.
	sk, _ := arc.GenerateKey(rand.Reader)
	pk := sk.Public()

	// Client ↔ issuer: blind issuance.
	secrets, req, _ := arc.NewCredentialRequest(rand.Reader)
	resp, err := sk.Issue(rand.Reader, req)
	if err != nil {
		panic(err)
	}
	cred, err := secrets.Finalize(pk, req, resp)
	if err != nil {
		panic(err)
	}

	// Client → verifier: one presentation per context (limit 1).
	ctx := []byte("made-up release context ‖ artifact tag")
	seen := map[string]bool{}
	accept := func(p *arc.Presentation) string {
		if err := sk.VerifyPresentation(p, ctx, 1); err != nil {
			return "invalid"
		}
		if seen[string(p.Tag())] {
			return "refused: tag already seen"
		}
		seen[string(p.Tag())] = true
		return "accepted"
	}
	p1, _ := cred.Present(rand.Reader, ctx, 0, 1)
	b, _ := p1.MarshalBinary()
	fmt.Println("presentation bytes:", len(b))
	fmt.Println("first:", accept(p1))
	p2, _ := cred.Present(rand.Reader, ctx, 0, 1) // unlinkable, but the same tag
	fmt.Println("second:", accept(p2))
	_, err = cred.Present(rand.Reader, ctx, 1, 1)
	fmt.Println("nonce 1 with limit 1:", err != nil)
	// Output:
	// presentation bytes: 357
	// first: accepted
	// second: refused: tag already seen
	// nonce 1 with limit 1: true
}
