package prio3

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/tlstest"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// startDeleting is startLeader with DeleteApplied on, a round every 50 ms.
func (e *svcEnv) startDeleting(maxBatch int) (*LeaderService, *running) {
	l := &LeaderService{Config: e.w.cfgL, Brokers: []string{e.br.Addr}, NATS: e.conn(), StateDir: e.lDir, Now: e.now, SignKey: e.signKey,
		MaxBatch: maxBatch, MaxWait: 50 * time.Millisecond, RequestTimeout: 5 * time.Second, CollectRetry: 200 * time.Millisecond,
		DeleteApplied: true, DeleteEvery: 50 * time.Millisecond, DeleteTimeout: 30 * time.Second}
	return l, e.start(l.Run)
}

// mine is the uploads partition the campaign's key hashes to (4
// partitions, kafka-go's Hash balancer, as relay b writes).
func mine() int {
	return (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(campaign)}, 0, 1, 2, 3)
}

// offsets returns partition p's log start and end offsets, read from the
// broker (ListOffsets).
func (e *svcEnv) offsets(p int) (first, last int64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", e.br.Addr, protocol.Prio3UploadsTopic, p)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if first, err = conn.ReadFirstOffset(); err != nil {
		e.t.Fatal(err)
	}
	if last, err = conn.ReadLastOffset(); err != nil {
		e.t.Fatal(err)
	}
	return first, last
}

// produceTo writes msgs straight into partition p.
func (e *svcEnv) produceTo(p int, msgs ...kafka.Message) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", e.br.Addr, protocol.Prio3UploadsTopic, p)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.WriteMessages(msgs...); err != nil {
		e.t.Fatal(err)
	}
}

// readAt reads the record at offset off of partition p.
func (e *svcEnv) readAt(p int, off int64) kafka.Message {
	e.t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.br.Addr}, Topic: protocol.Prio3UploadsTopic, Partition: p, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(off); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	m, err := r.FetchMessage(ctx)
	if err != nil {
		e.t.Fatalf("read partition %d offset %d: %v", p, off, err)
	}
	return m
}

// waitRounds waits for k more deletion rounds of l.
func waitRounds(t *testing.T, l *LeaderService, k int64) {
	t.Helper()
	r := l.deleteRounds.Load()
	waitFor(t, "more deletion rounds", 60*time.Second, func() bool { return l.deleteRounds.Load() >= r+k })
}

// TestDeleteApplied: with DeleteApplied a leader that has prepared every
// upload of a day (30 clients, L = 50, b = 4, one partition: the
// campaign's) deletes them from the broker: the partition's log start
// offset (ListOffsets earliest, read from the broker) reaches Applied,
// which is the partition's end, UploadsDeleted and
// crowdlog_prio3_uploads_deleted_total are 30; the
// day's unsharded totals still equal the clients' clipped sums computed
// here.
func TestDeleteApplied(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 50, Bits: 4}
	e := newSvcEnv(t, m, 5, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 30
	cs, want := clients(rng, n, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)
	_, hr := e.startHelper()
	l, lr := e.startDeleting(8)
	e.write(ups...)
	p := mine()
	waitFor(t, "every report prepared", 60*time.Second, func() bool { return l.Stats().Prepared == n })
	waitFor(t, "the log start to reach Applied", 60*time.Second, func() bool {
		first, _ := e.offsets(p)
		return first == n && l.Applied()[p] == n
	})
	first, last := e.offsets(p)
	t.Logf("partition %d: log start %d, end %d, Applied %v, deleted %d, failures %d", p, first, last, l.Applied(), l.UploadsDeleted.Load(), l.DeleteFailures.Load())
	if last != n || l.UploadsDeleted.Load() != n {
		t.Errorf("end %d, deleted %d; want %d, %d", last, l.UploadsDeleted.Load(), n, n)
	}
	reg := prometheus.NewRegistry()
	l.Register(reg)
	if v := gathered(t, reg, "crowdlog_prio3_uploads_deleted_total", nil); v != n {
		t.Errorf("crowdlog_prio3_uploads_deleted_total = %v, want %d", v, n)
	}
	// (a request may time out on a loaded machine: counted, not fatal)
	if v := gathered(t, reg, "crowdlog_prio3_uploads_delete_failures_total", nil); v != float64(l.DeleteFailures.Load()) {
		t.Errorf("crowdlog_prio3_uploads_delete_failures_total = %v, want %d", v, l.DeleteFailures.Load())
	}
	e.setNow(day.Start().Add(24*time.Hour + 48*time.Hour + time.Minute))
	waitFor(t, "the batch collected", 30*time.Second, func() bool { return l.Shares.Load() == 1 })
	checkTotals(t, day.String(), e.unshardDay(e.shares(2)[campaign+"/"+day.String()]), want, n)
	lr.stop(t, "leader")
	hr.stop(t, "helper")
}

// TestDeleteAppliedOtherCampaign: the campaign's partition holds 4 uploads
// of the campaign, a record keyed for another campaign at offset 4, an
// unkeyed record at offset 8 and more uploads of the campaign. A leader
// with DeleteApplied prepares its uploads and Applied passes every record,
// but the partition's log start reaches 4 and stays there through further
// rounds and through a restart of the leader (which learns of the record
// by scanning from the log start: no snapshot field): the other
// campaign's record is still readable at offset 4.
func TestDeleteAppliedOtherCampaign(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 20, Bits: 4}
	e := newSvcEnv(t, m, 1, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(9, 10))
	const own = 10
	cs, _ := clients(rng, own, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)
	p := mine()
	msgs := func(us [][]byte) []kafka.Message {
		out := make([]kafka.Message, len(us))
		for i, u := range us {
			out[i] = kafka.Message{Key: []byte(campaign), Value: u}
		}
		return out
	}
	const foreignAt = 4
	e.produceTo(p, msgs(ups[:4])...)
	e.produceTo(p, kafka.Message{Key: []byte("another-campaign"), Value: []byte("another campaign's sealed upload")})
	e.produceTo(p, msgs(ups[4:7])...)
	e.produceTo(p, kafka.Message{Value: []byte("an unkeyed record")})
	e.produceTo(p, msgs(ups[7:])...)
	const total = own + 2

	_, hr := e.startHelper()
	l, lr := e.startDeleting(4)
	waitFor(t, "every report prepared and Applied past every record", 60*time.Second, func() bool {
		return l.Stats().Prepared == own && l.Applied()[p] == total
	})
	waitFor(t, "the log start to reach the other campaign's record", 60*time.Second, func() bool {
		first, _ := e.offsets(p)
		return first == foreignAt
	})
	waitRounds(t, l, 5)
	first, _ := e.offsets(p)
	t.Logf("partition %d: Applied %d, log start %d after 5 more rounds, deleted %d", p, l.Applied()[p], first, l.UploadsDeleted.Load())
	if first != foreignAt || l.UploadsDeleted.Load() != foreignAt {
		t.Fatalf("log start %d, deleted %d; want %d (the other campaign's record)", first, l.UploadsDeleted.Load(), foreignAt)
	}
	lr.stop(t, "leader")
	// restarted: the record is below the leader's saved offsets; it scans
	// from the log start and finds it
	l2, lr2 := e.startDeleting(4)
	waitRounds(t, l2, 5)
	first, _ = e.offsets(p)
	if first != foreignAt || l2.UploadsDeleted.Load() != 0 {
		t.Fatalf("after a restart: log start %d, deleted %d (failures %d); want %d, 0", first, l2.UploadsDeleted.Load(), l2.DeleteFailures.Load(), foreignAt)
	}
	if r := e.readAt(p, foreignAt); string(r.Key) != "another-campaign" {
		t.Fatalf("record at offset %d has key %q, want the other campaign's", foreignAt, r.Key)
	}
	lr2.stop(t, "leader")
	hr.stop(t, "helper")
}

// TestServicesRestartDeleteApplied: TestServicesRestart with
// DeleteApplied. 40 clients' uploads of one day; the first 12 are prepared
// and deleted; the helper stops, the leader reads uploads it cannot
// prepare (pending: Applied stays at the first of them) and keeps
// deleting, then stops; an upload is replayed while both are down. After
// both restart from their state directories every upload is counted once
// at both (leader and helper prepared exactly 40, the replay counted), the
// unsharded totals equal the clients' clipped sums, and the log start
// reaches the partition's end.
func TestServicesRestartDeleteApplied(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 50, Bits: 4}
	e := newSvcEnv(t, m, 5, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(11, 12))
	const n, first = 40, 12
	cs, want := clients(rng, n, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)
	p := mine()

	_, hr := e.startHelper()
	l, lr := e.startDeleting(4)
	e.write(ups[:first]...)
	waitFor(t, "the first 12 prepared and deleted", 60*time.Second, func() bool {
		lo, _ := e.offsets(p)
		return l.Stats().Prepared == first && lo == first
	})
	hr.stop(t, "helper")
	e.write(ups[first:]...)
	waitFor(t, "the leader to read uploads while the helper is down", 60*time.Second, func() bool { return l.Stats().Uploads > first })
	waitRounds(t, l, 5)
	lo, _ := e.offsets(p)
	applied := l.Applied()[p]
	t.Logf("helper down: read %d, prepared %d, Applied %d, log start %d", l.Stats().Uploads, l.Stats().Prepared, applied, lo)
	if applied != first || lo != first {
		t.Fatalf("with reports pending: Applied %d, log start %d; want both %d (the first pending upload)", applied, lo, first)
	}
	lr.stop(t, "leader")
	e.write(ups[0]) // a replay while both are down

	h2, hr2 := e.startHelper()
	l2, lr2 := e.startDeleting(4)
	waitFor(t, "every upload read after the restart", 60*time.Second, func() bool { return l2.Stats().Uploads == n+1 })
	waitFor(t, "every report prepared", 60*time.Second, func() bool { return l2.Stats().Prepared == n })
	st := l2.Stats()
	if st.Rejected["replay"] != 1 || len(st.Rejected) != 1 {
		t.Errorf("leader rejected %v, want only 1 replay", st.Rejected)
	}
	if hs := h2.Stats(); hs.Prepared != n || len(hs.Rejected) != 0 {
		t.Errorf("helper prepared %d (rejected %v), want %d and none", hs.Prepared, hs.Rejected, n)
	}
	waitFor(t, "the log start to reach the partition's end", 60*time.Second, func() bool {
		lo, end := e.offsets(p)
		return lo == n+1 && end == n+1
	})
	e.setNow(day.Start().Add(24*time.Hour + 48*time.Hour + time.Minute))
	waitFor(t, "the batch collected", 30*time.Second, func() bool { return l2.Shares.Load() == 1 })
	checkTotals(t, day.String(), e.unshardDay(e.shares(2)[campaign+"/"+day.String()]), want, n)
	t.Logf("deletion requests failed: %d before the restart, %d after (timeouts on a loaded machine; retried)", l.DeleteFailures.Load(), l2.DeleteFailures.Load())
	lr2.stop(t, "leader")
	hr2.stop(t, "helper")
}

// TestDeleteAppliedRefused: on a kfake broker with TLS, SCRAM and the ACL
// table, a leader whose Kafka user holds the prio3-leader rows only runs
// with DeleteApplied: its DeleteRecords are refused (topic authorization),
// counted in DeleteFailures and logged, and it still prepares every upload
// (10) while the log start stays 0. Once the admin grants the user
// infra/kafka.RolePrio3Delete (ApplyACLs, as `crowdlog topics --acl
// prio3-delete=USER` does) the next rounds delete: the log start reaches 10.
func TestDeleteAppliedRefused(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 20, Bits: 4}
	e := newSvcEnv(t, m, 1, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	dir := t.TempDir()
	srvTLS, caFile := tlstest.TLS(t, dir)
	admin := ikafka.Credential{Mechanism: ikafka.MechanismSCRAMSHA512, User: "admin", Password: "admin-secret"}
	user := ikafka.Credential{Mechanism: ikafka.MechanismSCRAMSHA512, User: "prio3-leader", Password: "leader-secret"}
	br, err := ikafka.Config{Dir: filepath.Join(dir, "kafka"), Partitions: 4, TLS: srvTLS, Admin: &admin, ACLs: true,
		Users: []ikafka.User{{Role: ikafka.RolePrio3Leader, Credential: user}}}.Start(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)
	auth := func(c ikafka.Credential) *ikafka.Auth {
		a, err := c.AuthConfig(caFile).Load()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	adminAuth, leaderAuth := auth(admin), auth(user)
	actx := ikafka.WithAuth(e.ctx, adminAuth)
	if err := ikafka.EnsureTopics(actx, br.Addr, 4, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		t.Fatal(err)
	}
	const n = 10
	cs, _ := clients(rand.New(rand.NewPCG(13, 14)), n, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)
	wr := ikafka.NewWriterAuth(adminAuth, br.Addr, protocol.Prio3UploadsTopic)
	msgs := make([]kafka.Message, n)
	for i, u := range ups {
		msgs[i] = kafka.Message{Key: []byte(campaign), Value: u}
	}
	if err := wr.WriteMessages(e.ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	logStart := func() int64 {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		conn, err := ikafka.Dialer(actx).DialLeader(ctx, "tcp", br.Addr, protocol.Prio3UploadsTopic, mine())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		first, err := conn.ReadFirstOffset()
		if err != nil {
			t.Fatal(err)
		}
		return first
	}

	_, hr := e.startHelper()
	l := &LeaderService{Config: e.w.cfgL, Brokers: []string{br.Addr}, NATS: e.conn(), StateDir: e.lDir, Now: e.now, SignKey: e.signKey,
		MaxWait: 50 * time.Millisecond, RequestTimeout: 5 * time.Second, DeleteApplied: true, DeleteEvery: 50 * time.Millisecond, DeleteTimeout: 30 * time.Second}
	lr := e.start(func(ctx context.Context) error { return l.Run(ikafka.WithAuth(ctx, leaderAuth)) })
	waitFor(t, "every report prepared and 3 refused deletions", 60*time.Second, func() bool {
		return l.Stats().Prepared == n && l.DeleteFailures.Load() >= 3
	})
	if lo := logStart(); lo != 0 || l.UploadsDeleted.Load() != 0 {
		t.Fatalf("without Delete on the topic: log start %d, deleted %d; want 0, 0", lo, l.UploadsDeleted.Load())
	}
	t.Logf("without %s: %d refused deletion requests, %d reports prepared", ikafka.RolePrio3Delete, l.DeleteFailures.Load(), l.Stats().Prepared)
	if err := ikafka.ApplyACLs(actx, br.Addr, map[ikafka.Role]string{ikafka.RolePrio3Delete: user.User}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the log start to reach Applied once Delete is granted", 60*time.Second, func() bool { return logStart() == n })
	lr.stop(t, "leader")
	hr.stop(t, "helper")
}
