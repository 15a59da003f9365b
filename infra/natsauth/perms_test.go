package natsauth

import (
	"slices"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

// matches reports whether NATS subject subj matches pattern (tokens split
// at '.', '*' one token, '>' the rest).
func matches(pattern, subj string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subj, ".")
	for i, t := range p {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || (t != "*" && t != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

// who returns the roles whose publish (or subscribe) list matches subj.
func who(subj string, subscribe bool) []Role {
	var out []Role
	for _, r := range Roles {
		p, _ := Table(r)
		list := p.Publish
		if subscribe {
			list = p.Subscribe
		}
		if slices.ContainsFunc(list, func(pat string) bool { return matches(pat, subj) }) {
			out = append(out, r)
		}
	}
	return out
}

// TestTableEverySubject: every request/reply subject of protocol/names.go
// has exactly its responder among the subscribers and its requesters
// among the publishers, and the relay inboxes and key-value buckets have
// exactly the writers the threat model allows.
func TestTableEverySubject(t *testing.T) {
	cases := []struct {
		subj     string
		pub, sub []Role
	}{
		{protocol.RelaySubject("a"), []Role{Client}, nil},
		{protocol.RelaySubject("b"), []Role{RelayA}, nil},
		{protocol.RandomnessSubject, []Role{Client}, []Role{Randomness}},
		{protocol.RandomnessPublicKeySubject, []Role{Client}, []Role{Randomness}},
		{protocol.IssuerSubject, []Role{Client}, []Role{Issuer}},
		{protocol.IssuerPublicKeySubject, []Role{Client}, []Role{Issuer}},
		{protocol.IssuerRandomnessSubject, []Role{Client}, []Role{Randomness}},
		{protocol.IssuerRandomnessPublicKeySubject, []Role{Client}, []Role{Randomness}},
		{"$KV." + protocol.IssuerRandomnessCountersBucket + ".k", []Role{Randomness}, nil},
		{"$JS.API.STREAM.PURGE.KV_" + protocol.IssuerRandomnessCountersBucket, nil, nil},
		{protocol.RelayKeysSubject("a"), []Role{Client}, []Role{RelayA}},
		{protocol.RelayKeysSubject("b"), []Role{Client}, []Role{RelayB}},
		{protocol.PDDRegisterSubject, []Role{Client}, []Role{Coordinator}},
		{protocol.PDDPingSubject, []Role{Client}, []Role{Coordinator}},
		{protocol.PDDDepositSubject, []Role{Client}, []Role{Coordinator}},
		{protocol.PDDBundlesSubject, []Role{Client}, []Role{Coordinator}},
		{protocol.PDDAdvanceSubject, []Role{Operator}, []Role{Coordinator}},
		{protocol.PDDRecoverySubject, []Role{Aggregator}, []Role{Coordinator}},
		{protocol.PDDActiveSubjectPrefix + "pdd.1", []Role{Coordinator}, nil},
		{"$KV." + protocol.IssuerCountersBucket + ".k", []Role{Issuer}, nil},
		{"$JS.API.STREAM.PURGE.KV_" + protocol.IssuerCountersBucket, nil, nil},
		{"$JS.API.STREAM.INFO.KV_" + protocol.IssuerCountersBucket, []Role{Issuer}, nil},
		{"$JS.API.STREAM.UPDATE.KV_" + protocol.IssuerCountersBucket, nil, nil},
		{"$JS.API.STREAM.CREATE." + protocol.RelayStream, nil, nil},
		{"$JS.API.CONSUMER.CREATE.KV_" + protocol.IssuerCountersBucket, nil, nil},
		{"$JS.API.CONSUMER.CREATE.KV_" + protocol.IssuerCountersBucket + ".x", nil, nil},
		{"$JS.API.CONSUMER.CREATE.KV_" + protocol.SpentTokensBucket + ".x", nil, nil},
		{"$JS.API.CONSUMER.CREATE.KV_" + protocol.PDDBucket + ".x", nil, nil},
		{"$JS.API.CONSUMER.CREATE.KV_" + protocol.PDDRoundsBucket + ".x", []Role{Coordinator}, nil},
		{"$JS.API.STREAM.MSG.GET.KV_" + protocol.PDDRoundsBucket, nil, nil},
		{"$JS.API.STREAM.MSG.GET.KV_" + protocol.IssuerCountersBucket, nil, nil},
		{"$JS.CROWDLOG_RELAY_A.API.CONSUMER.INFO." + protocol.RelayStream + ".relay-a", []Role{Operator}, nil},
		{"$JS.API.CONSUMER.CREATE." + protocol.RelayStream + ".relay-a." + protocol.RelaySubject("a"), nil, nil},
		{"$JS.API.CONSUMER.DURABLE.CREATE." + protocol.RelayStream + ".relay-a", nil, nil},
		{"$JS.CROWDLOG_ISSUER.API.STREAM.INFO.KV_" + protocol.IssuerCountersBucket, []Role{Admin}, nil},
		{"$JS.CROWDLOG_ISSUER.API.STREAM.UPDATE.KV_" + protocol.IssuerCountersBucket, []Role{Admin}, nil},
		{"$JS.CROWDLOG_RELAY_A.API.STREAM.CREATE." + protocol.RelayStream, []Role{Admin}, nil},
		{"$JS.CROWDLOG_RELAY_B.API.STREAM.UPDATE." + protocol.RelayStream, []Role{Admin}, nil},
		{"$JS.CROWDLOG_RELAY_A.API.STREAM.INFO." + protocol.RelayStream, []Role{Operator, Admin}, nil},
		{"$JS.CROWDLOG_RELAY_A.API.CONSUMER.CREATE." + protocol.RelayStream + ".relay-a." + protocol.RelaySubject("a"), []Role{Admin}, nil},
		{"$JS.CROWDLOG_RELAY_A.API.CONSUMER.CREATE." + protocol.RelayStream + ".relay-a." + protocol.RelaySubject("b"), nil, nil},
		{"$JS.CROWDLOG_RANDOMNESS.API.STREAM.UPDATE.KV_" + protocol.SpentTokensBucket, []Role{Admin}, nil},
		{"$JS.CROWDLOG_COORDINATOR.API.STREAM.UPDATE.KV_" + protocol.PDDBucket, []Role{Admin}, nil},
		{"$JS.CROWDLOG_COORDINATOR.API.STREAM.CREATE." + protocol.PDDActiveStream, []Role{Admin}, nil},
		{"$JS.CROWDLOG_COORDINATOR.API.STREAM.PURGE." + protocol.PDDActiveStream, nil, nil},
		{"$JS.API.STREAM.CREATE.rewired", nil, nil},
		{"$KV." + protocol.SpentTokensBucket + ".k", []Role{Randomness}, nil},
		{"$JS.API.STREAM.DELETE.KV_" + protocol.SpentTokensBucket, nil, nil},
		{"$KV." + protocol.PDDBucket + ".k", []Role{Coordinator}, nil},
		{"$KV." + protocol.PDDRoundsBucket + ".k", []Role{Coordinator}, nil},
		{"$JS.API.STREAM.PURGE." + protocol.RelayStream, nil, nil},
		{"$JS.API.CONSUMER.CREATE." + protocol.RelayStream + ".relay-a." + protocol.RelaySubject("b"), nil, nil},
		{"$JS.API.CONSUMER.MSG.NEXT." + protocol.RelayStream + ".relay-b", []Role{RelayB}, nil},
		{"_INBOX.issuer.x", nil, []Role{Issuer}},
		{protocol.Prio3HelperSubject, []Role{Prio3Leader}, []Role{Prio3Helper}},
		{"_INBOX.prio3-leader.x", nil, []Role{Prio3Leader}},
		{"_INBOX.prio3-helper.x", []Role{Prio3Helper}, []Role{Prio3Helper}},
		{protocol.Prio3SettingsSubject, []Role{Client}, []Role{Prio3Leader}},
		{"crowdlog.prio3.>", nil, nil},
		{"_INBOX.abc", nil, nil},
	}
	for _, c := range cases {
		if got := who(c.subj, false); !slices.Equal(got, c.pub) {
			t.Errorf("%s: publishers %v, want %v", c.subj, got, c.pub)
		}
		if got := who(c.subj, true); !slices.Equal(got, c.sub) {
			t.Errorf("%s: subscribers %v, want %v", c.subj, got, c.sub)
		}
	}
	for _, r := range Roles {
		inbox := InboxPrefix(r) + ".>"
		if r == Client {
			inbox = InboxPrefix(r) + ".*.>"
		}
		p, _ := Table(r)
		if len(p.Subscribe) == 0 || !slices.Contains(p.Subscribe, inbox) {
			t.Errorf("%s: no subscription to its own inbox", r)
		}
		if len(p.Publish) == 0 { // nats-server: an empty allow list allows everything
			t.Errorf("%s: empty publish list", r)
		}
	}
	if _, ok := Table("mallory"); ok {
		t.Error("unknown role has a row")
	}
}

// TestServicesMatchTable: every service's owner answers it (subscribes)
// or, for a relay inbox, owns the stream that captures it; every importer
// may publish to it; and every subject a role may publish that is not its
// own account's JetStream or inbox subject, nor an admin or operator
// import, is imported from exactly one account.
func TestServicesMatchTable(t *testing.T) {
	for _, s := range Services() {
		p, _ := Table(s.Owner)
		if _, relay := RelayName(s.Owner); !slices.ContainsFunc(p.Subscribe, func(pat string) bool { return matches(pat, s.Subject) }) &&
			!(relay && s.Subject == protocol.RelaySubject(string(s.Owner[len("relay-"):]))) {
			t.Errorf("%s: owner %s does not answer it", s.Subject, s.Owner)
		}
		for _, i := range s.Importers {
			if !slices.Contains(who(s.Subject, false), i) {
				t.Errorf("%s: importer %s may not publish to it", s.Subject, i)
			}
		}
	}
	for _, r := range Roles {
		p, _ := Table(r)
		for _, subj := range p.Publish {
			if strings.HasPrefix(subj, "$") || strings.HasPrefix(subj, "_INBOX.") || strings.HasSuffix(subj, "*") ||
				(r == Coordinator && strings.HasPrefix(subj, protocol.PDDActiveSubjectPrefix)) {
				continue
			}
			n := 0
			for _, im := range importsOf(r) {
				if im.to == subj {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s publishes %s, imported %d times, want once", r, subj, n)
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range Roles {
		if a := AccountOf(r); seen[a] {
			t.Errorf("account %s twice", a)
		} else {
			seen[a] = true
		}
	}
}
