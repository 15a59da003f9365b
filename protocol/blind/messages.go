package blind

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// ErrMalformed is wrapped by every decoding error of coordinator messages.
var ErrMalformedCoordination = errors.New("coordinator: malformed message")

var clientID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// RegisterRequest registers a client's long-term X25519 public key (PDD §3.2
// Initialization).
type RegisterRequest struct {
	PublicKey []byte `json:"public_key"`
}

// RegisterReply carries the client id the coordinator assigned.
type RegisterReply struct {
	ClientID string `json:"client_id,omitempty"`
	Error    string `json:"error,omitempty"`
}

// PingRequest is a client's daily contact (PDD §3.4): it marks the client
// active today and asks for its instructions.
type PingRequest struct {
	ClientID string `json:"client_id"`
	Campaign string `json:"campaign"`
}

// Task is one submission a client owes: its counts of day Round for group
// Group, as member Member of a roster of public keys Members.
type Task struct {
	Round    int32    `json:"round"`
	Group    uint32   `json:"group"`
	Member   int      `json:"member"`
	Members  [][]byte `json:"members"`
	T        int      `json:"t"`
	Deadline int32    `json:"deadline"`
}

// Instance is the task's protocol instance.
func (t *Task) Instance(campaign string) Instance {
	return Instance{Campaign: campaign, Round: t.Round, Group: t.Group}
}

// RecoveryTask asks a survivor for its recovery answer: the group's task,
// the members that never submitted, and the sealed bundles addressed to
// this member.
type RecoveryTask struct {
	Task
	Dropped []uint16       `json:"dropped"`
	Bundles []SealedBundle `json:"bundles"`
}

// Instructions is the ping reply: today's day, the campaign's keyword list
// (name, L and hash, which the client checks against its own copy), owed
// submissions and recovery tasks.
type Instructions struct {
	Day        int32          `json:"day"`
	Campaign   string         `json:"campaign"`
	Keywords   string         `json:"keywords"`
	L          int            `json:"l"`
	ListHash   []byte         `json:"list_hash"`
	Tasks      []Task         `json:"tasks,omitempty"`
	Recoveries []RecoveryTask `json:"recoveries,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// DepositRequest stores member From's sealed bundles for one instance.
type DepositRequest struct {
	Campaign string         `json:"campaign"`
	Round    int32          `json:"round"`
	Group    uint32         `json:"group"`
	From     uint16         `json:"from"`
	Bundles  []SealedBundle `json:"bundles"`
}

// AdvanceRequest starts day Day (the operator's or a log replay's clock;
// with a wall clock the coordinator advances by itself).
type AdvanceRequest struct {
	Day int32 `json:"day"`
}

// AdvanceReply reports the groups formed for round Day−1.
type AdvanceReply struct {
	Day     int32  `json:"day"`
	Groups  int    `json:"groups"`
	Active  int    `json:"active"`
	Grouped int    `json:"grouped"`
	Error   string `json:"error,omitempty"`
}

// Reply is the generic acknowledgement.
type Reply struct {
	Error string `json:"error,omitempty"`
}

func decode(b []byte, v any) error {
	if len(b) > 64<<20 {
		return fmt.Errorf("%w: %d bytes", ErrMalformedCoordination, len(b))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedCoordination, err)
	}
	return nil
}

// ParsePing decodes and validates a ping. Errors wrap ErrMalformed.
func ParsePing(b []byte) (*PingRequest, error) {
	var p PingRequest
	if err := decode(b, &p); err != nil {
		return nil, err
	}
	if !clientID.MatchString(p.ClientID) || !ValidCampaign(p.Campaign) {
		return nil, fmt.Errorf("%w: bad client id or campaign", ErrMalformedCoordination)
	}
	return &p, nil
}

// ParseRegister decodes and validates a registration.
func ParseRegister(b []byte) (*RegisterRequest, error) {
	var r RegisterRequest
	if err := decode(b, &r); err != nil {
		return nil, err
	}
	if len(r.PublicKey) != 32 {
		return nil, fmt.Errorf("%w: public key of %d bytes, want 32 (X25519)", ErrMalformedCoordination, len(r.PublicKey))
	}
	return &r, nil
}

// ParseDeposit decodes and validates a deposit.
func ParseDeposit(b []byte) (*DepositRequest, error) {
	var d DepositRequest
	if err := decode(b, &d); err != nil {
		return nil, err
	}
	if !ValidCampaign(d.Campaign) {
		return nil, fmt.Errorf("%w: campaign", ErrMalformedCoordination)
	}
	for _, sb := range d.Bundles {
		if sb.From != d.From || sb.To == d.From || len(sb.Ciphertext) < 48 || len(sb.Ciphertext) > 1<<20 {
			return nil, fmt.Errorf("%w: bundle %d→%d", ErrMalformedCoordination, sb.From, sb.To)
		}
	}
	return &d, nil
}

// ParseRecovery decodes a recovery request from the aggregator.
func ParseRecovery(b []byte) (*Request, error) {
	var r Request
	if err := decode(b, &r); err != nil {
		return nil, err
	}
	if !ValidCampaign(r.Instance.Campaign) {
		return nil, fmt.Errorf("%w: campaign", ErrMalformedCoordination)
	}
	if _, err := NewRecovery(r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedCoordination, err)
	}
	return &r, nil
}

// ParseAdvance decodes an advance request.
func ParseAdvance(b []byte) (*AdvanceRequest, error) {
	var a AdvanceRequest
	if err := decode(b, &a); err != nil {
		return nil, err
	}
	return &a, nil
}
