package prio3

import (
	"context"
	"math/rand/v2"
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
