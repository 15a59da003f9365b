package issuer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// EnrollmentAttester is the default Attester: a request's identity key must
// be on the enrollment list of Dir (keydir.EnrollmentFile, `crowdlog keys
// enroll`). A key not on the list in memory makes the attester check the
// file (one stat) and reread it when it changed (size or modification
// time), so enrolling needs no issuer restart. The identity counted is
// IdentityOf(the public key).
type EnrollmentAttester struct {
	Dir string

	mu   sync.Mutex
	list map[[32]byte]bool
	size int64
	mod  time.Time
}

// Attest implements Attester. Errors wrap token.ErrNotEnrolled for keys not
// on the list (and when there is no list).
func (a *EnrollmentAttester) Attest(_ context.Context, req *token.IssueRequest) ([32]byte, error) {
	if len(req.Identity) != 32 {
		return [32]byte{}, fmt.Errorf("%w: identity key of %d bytes", token.ErrNotEnrolled, len(req.Identity))
	}
	ok, err := a.enrolled([32]byte(req.Identity))
	if err != nil {
		return [32]byte{}, err
	}
	if !ok {
		return [32]byte{}, fmt.Errorf("%w: this identity key is not on the issuer's enrollment list (crowdlog keys enroll)", token.ErrNotEnrolled)
	}
	return IdentityOf(req.Identity), nil
}

func (a *EnrollmentAttester) enrolled(k [32]byte) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.list[k] {
		return true, nil
	}
	st, err := os.Stat(keydir.EnrollmentPath(a.Dir))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enrollment list: %w", err)
	}
	if a.list != nil && st.Size() == a.size && st.ModTime().Equal(a.mod) {
		return false, nil
	}
	list, err := keydir.LoadEnrollment(a.Dir)
	if err != nil {
		return false, err
	}
	a.list, a.size, a.mod = list, st.Size(), st.ModTime()
	return list[k], nil
}
