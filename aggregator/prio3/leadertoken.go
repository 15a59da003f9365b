package prio3

import (
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Leader token refusal reasons (labels of crowdlog_prio3_rejected_total at
// the leader), besides the helper's ReasonTokenMissing, ReasonTokenInvalid
// and ReasonTokenBinding, which the leader counts alike for its own token:
// a valid token whose report id the leader already holds (pending or
// committed) was spent.
const ReasonTokenSpent = "token_spent"

// refuseLeaderToken verifies and spends r's leader token when
// Config.LeaderTokenSeed is set, and reports whether r is refused (the
// reason counted in Stats.Rejected). The token (protocol/token
// KindPrio3Leader, key token.DeriveKey(KindPrio3Leader,
// token.Prio3Epoch(campaign, day), seed)) must bind r by its nonce
// (r.HelperNonce: campaign, day, report id, public share, sealed helper
// share). It is spent with the report id it binds: the pending and
// committed ids, kept in the leader's state, refuse its second use. The
// check runs before the leader prepares r, so a report no leader credential
// stands for costs the leader nothing.
func (l *Leader) refuseLeaderToken(r *p3.Report) bool {
	if l.cfg.LeaderTokenSeed == nil {
		return false
	}
	reason := l.leaderTokenReason(r)
	if reason != "" {
		l.Stats.reject(reason)
	}
	return reason != ""
}

func (l *Leader) leaderTokenReason(r *p3.Report) string {
	if len(r.LeaderToken) == 0 {
		return ReasonTokenMissing
	}
	t, err := token.ParseToken(r.LeaderToken)
	if err != nil {
		return ReasonTokenInvalid
	}
	if t.Nonce != r.HelperNonce() {
		return ReasonTokenBinding
	}
	// derived once per day, like the helper's
	k := l.tokenKeys[r.Day]
	if k == nil {
		if k, err = token.DeriveKey(token.KindPrio3Leader, token.Prio3Epoch(l.cfg.Campaign, uint32(r.Day)), l.cfg.LeaderTokenSeed); err != nil {
			return ReasonTokenInvalid
		}
		if l.tokenKeys == nil {
			l.tokenKeys = map[p3.Day]*token.PrivateKey{}
		}
		l.tokenKeys[r.Day] = k
	}
	if k.Verify(t) != nil {
		return ReasonTokenInvalid
	}
	if len(l.pending[r.ID]) > 0 || l.committed(r.Day, r.ID) {
		return ReasonTokenSpent
	}
	return ""
}
