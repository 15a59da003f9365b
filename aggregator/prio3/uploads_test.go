package prio3

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestLeaderSkipsOtherCampaigns: on the kfake broker (topic prio3-uploads
// with 4 partitions) a running leader gets 10 uploads keyed by its campaign
// and 6 genuine uploads of its campaign keyed for another campaign, written
// into the partition the leader reads (its campaign's key hash: what relay b
// does when two campaigns' keys hash alike). The leader hands exactly the 10
// to its state machine (Stats.Uploads = 10, prepared 10) and skips the 6
// unopened (OtherCampaign = 6, crowdlog_prio3_uploads_skipped_total = 6;
// nothing rejected as "campaign"). New partitions are TestLeaderPartitions'.
// Ground truth: the counts written here.
func TestLeaderSkipsOtherCampaigns(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 20, Bits: 4}
	e := newSvcEnv(t, m, 1, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	rng := rand.New(rand.NewPCG(3, 4))
	const own, other = 10, 6
	cs, _ := clients(rng, own+other, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)

	_, hr := e.startHelper()
	defer hr.stop(t, "helper")
	l := &LeaderService{Config: e.w.cfgL, Brokers: []string{e.br.Addr}, NATS: e.conn(), StateDir: e.lDir, Now: e.now, SignKey: e.signKey,
		MaxWait: 50 * time.Millisecond, RequestTimeout: 5 * time.Second, CollectRetry: 200 * time.Millisecond,
		PartitionRefresh: 200 * time.Millisecond}
	lr := e.start(l.Run)
	defer lr.stop(t, "leader")

	e.write(ups[:own]...)
	mine := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(campaign)}, 0, 1, 2, 3)
	for _, u := range ups[own : own+other] {
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		conn, err := kafka.DialLeader(ctx, "tcp", e.br.Addr, protocol.Prio3UploadsTopic, mine)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteMessages(kafka.Message{Key: []byte("another-campaign"), Value: u}); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	waitFor(t, "the leader to prepare its campaign's uploads and skip the others", 60*time.Second, func() bool {
		return l.Stats().Prepared == own && l.OtherCampaign.Load() == other
	})
	st := l.Stats()
	t.Logf("keyed: uploads %d, prepared %d, skipped unopened %d, rejected %v", st.Uploads, st.Prepared, l.OtherCampaign.Load(), st.Rejected)
	if st.Uploads != own || st.Rejected["campaign"] != 0 {
		t.Errorf("the leader opened %d uploads (want %d), rejected %d as campaign (want 0)", st.Uploads, own, st.Rejected["campaign"])
	}
	reg := prometheus.NewRegistry()
	l.Register(reg)
	if v := gathered(t, reg, "crowdlog_prio3_uploads_skipped_total", nil); v != other {
		t.Errorf("crowdlog_prio3_uploads_skipped_total = %v, want %d", v, other)
	}
}

// TestLeaderSkippedRestart: records of another campaign skipped by the
// leader advance its saved offsets like its own uploads. On the kfake
// broker a leader prepares 4 uploads of its campaign, then skips 6 records
// keyed for another campaign written after them into the partition it
// reads (nothing of its own follows them); its snapshot's next offset of
// that partition reaches the partition's end. Restarted on the same state
// directory, it does not read the 6 again: crowdlog_prio3_uploads_skipped_total
// is 6 before the restart and 0 after it, measured once the restarted
// leader prepared a fifth upload written after the skipped records (the
// partition is read in order). Ground truth: the records written here and
// the partition's end offset from the broker.
func TestLeaderSkippedRestart(t *testing.T) {
	m := p3.Config{Kind: p3.KindSumVec, Length: 20, Bits: 4}
	e := newSvcEnv(t, m, 1, 48*time.Hour)
	day := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	e.setNow(day.Start().Add(12 * time.Hour))
	const own, other = 4, 6
	cs, _ := clients(rand.New(rand.NewPCG(5, 6)), own+1, m.Length, 15)
	ups := e.w.shardAll(t, day, cs)

	_, hr := e.startHelper()
	defer hr.stop(t, "helper")
	leader := func() *LeaderService {
		return &LeaderService{Config: e.w.cfgL, Brokers: []string{e.br.Addr}, NATS: e.conn(), StateDir: e.lDir, Now: e.now, SignKey: e.signKey,
			MaxWait: 50 * time.Millisecond, RequestTimeout: 5 * time.Second, CollectRetry: 200 * time.Millisecond,
			PartitionRefresh: 200 * time.Millisecond}
	}
	skipped := func(l *LeaderService) float64 {
		reg := prometheus.NewRegistry()
		l.Register(reg)
		return gathered(t, reg, "crowdlog_prio3_uploads_skipped_total", nil)
	}
	l := leader()
	lr := e.start(l.Run)
	e.write(ups[:own]...)
	mine := (&kafka.Hash{}).Balance(kafka.Message{Key: []byte(campaign)}, 0, 1, 2, 3)
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	conn, err := kafka.DialLeader(ctx, "tcp", e.br.Addr, protocol.Prio3UploadsTopic, mine)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for range other {
		if _, err := conn.WriteMessages(kafka.Message{Key: []byte("another-campaign"), Value: []byte("another campaign's upload")}); err != nil {
			t.Fatal(err)
		}
	}
	end, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leader to prepare its uploads and skip the others", 60*time.Second, func() bool {
		return l.Stats().Prepared == own && l.OtherCampaign.Load() == other
	})
	// the snapshot passes the skipped records (polled: the step after the
	// reader skips them saves it); with skipped records left out of the
	// offsets it stays at the last upload of the campaign
	saved := func() int64 {
		b, err := os.ReadFile(filepath.Join(e.lDir, LeaderStateFile))
		if err != nil {
			return -1
		}
		_, f, err := decodeLeaderFile(e.w.cfgL, b)
		if err != nil {
			return -1
		}
		return f.next[mine]
	}
	for deadline := time.Now().Add(30 * time.Second); saved() < end && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	before, next := skipped(l), saved()
	lr.stop(t, "leader")

	l2 := leader()
	lr2 := e.start(l2.Run)
	defer lr2.stop(t, "leader")
	e.write(ups[own])
	waitFor(t, "the restarted leader to prepare the upload after the skipped records", 60*time.Second, func() bool {
		return l2.Stats().Prepared == own+1
	})
	after := skipped(l2)
	t.Logf("partition %d ends at %d; saved next offset %d; crowdlog_prio3_uploads_skipped_total before the restart %v, after it %v (records read again)", mine, end, next, before, after)
	if before != other || after != 0 || next != end {
		t.Errorf("skipped %v before the restart and %v after it, saved offset %d; want %d, 0 and %d", before, after, next, other, end)
	}
}
