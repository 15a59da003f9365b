package arc

import (
	"crypto/rand"
	"testing"
)

// Benchmarks of one operation each (go test -run XXX -bench . ./protocol/arc).
// Present and VerifyPresentation use limit 1, crowdlog's FT_u setting.

func BenchmarkIssue(b *testing.B) {
	sk, _ := GenerateKey(rand.Reader)
	_, req, _ := NewCredentialRequest(rand.Reader)
	for b.Loop() {
		if _, err := sk.Issue(rand.Reader, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNewCredentialRequest(b *testing.B) {
	for b.Loop() {
		if _, _, err := NewCredentialRequest(rand.Reader); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFinalize(b *testing.B) {
	sk, _ := GenerateKey(rand.Reader)
	secrets, req, _ := NewCredentialRequest(rand.Reader)
	resp, _ := sk.Issue(rand.Reader, req)
	pk := sk.Public()
	for b.Loop() {
		if _, err := secrets.Finalize(pk, req, resp); err != nil {
			b.Fatal(err)
		}
	}
}

func benchCred(b *testing.B) (*PrivateKey, *Credential) {
	sk, _ := GenerateKey(rand.Reader)
	secrets, req, _ := NewCredentialRequest(rand.Reader)
	resp, _ := sk.Issue(rand.Reader, req)
	cred, err := secrets.Finalize(sk.Public(), req, resp)
	if err != nil {
		b.Fatal(err)
	}
	return sk, cred
}

func BenchmarkPresent(b *testing.B) {
	_, cred := benchCred(b)
	ctx := []byte("crowdlog-v1 arc benchmark context")
	for b.Loop() {
		if _, err := cred.Present(rand.Reader, ctx, 0, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyPresentation(b *testing.B) {
	sk, cred := benchCred(b)
	ctx := []byte("crowdlog-v1 arc benchmark context")
	p, _ := cred.Present(rand.Reader, ctx, 0, 1)
	for b.Loop() {
		if err := sk.VerifyPresentation(p, ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyPresentationLimit16 is the report-budget setting (context
// = epoch, limit d = 16: four bit commitments).
func BenchmarkVerifyPresentationLimit16(b *testing.B) {
	sk, cred := benchCred(b)
	ctx := []byte("epoch")
	p, _ := cred.Present(rand.Reader, ctx, 7, 16)
	for b.Loop() {
		if err := sk.VerifyPresentation(p, ctx, 16); err != nil {
			b.Fatal(err)
		}
	}
}
