package kafka

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/natsserver"
)

// heapWatch samples the Go heap every 20 ms until stop and returns the
// largest HeapAlloc and Sys growth over base, in bytes. With limit > 0 it
// ends the process once HeapAlloc grew past limit (the unguarded "before"
// run, CROWDLOG_KAFKA_GUARD_OFF=1), printing the growth and the time.
func heapWatch(t *testing.T, limit uint64) (stop func() (heap, sys uint64)) {
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	t0 := time.Now()
	done := make(chan struct{})
	var mu sync.Mutex
	var maxHeap, maxSys uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			mu.Lock()
			if m.HeapAlloc > base.HeapAlloc && m.HeapAlloc-base.HeapAlloc > maxHeap {
				maxHeap = m.HeapAlloc - base.HeapAlloc
			}
			if m.Sys > base.Sys && m.Sys-base.Sys > maxSys {
				maxSys = m.Sys - base.Sys
			}
			h := maxHeap
			mu.Unlock()
			if limit > 0 && h > limit {
				os.Stdout.WriteString("unguarded: heap grew " + itoa(h>>20) + " MiB in " + time.Since(t0).Round(time.Millisecond).String() + "; stopping the process\n")
				os.Exit(3)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		close(done)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return maxHeap, maxSys
	}
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// TestNotKafkaPeerFailsClearly points a Writer, a Client and a Dialer of
// this package at an embedded NATS server and at an HTTP server: each
// fails with ErrNotKafka and the heap stays small. Before the guard, the
// NATS greeting "INFO" read as a response size made kafka-go allocate
// gigabytes (run with CROWDLOG_KAFKA_GUARD_OFF=1 to see it; the process
// stops itself at 2 GiB).
func TestNotKafkaPeerFailsClearly(t *testing.T) {
	off := os.Getenv("CROWDLOG_KAFKA_GUARD_OFF") == "1"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ns, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	hs := httptest.NewServer(http.NotFoundHandler())
	defer hs.Close()
	nu, err := url.Parse(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	hu, err := url.Parse(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	var limit uint64
	if off {
		limit = 2 << 30
	}
	for _, peer := range []struct{ name, addr string }{{"nats", nu.Host}, {"http", hu.Host}} {
		t.Run(peer.name, func(t *testing.T) {
			check := func(what string, err error, d time.Duration) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s at %s peer %s: no error", what, peer.name, peer.addr)
				}
				if !strings.Contains(err.Error(), "not a Kafka broker") || !strings.Contains(err.Error(), "--kafka") {
					t.Fatalf("%s at %s peer: error does not say the peer is not Kafka: %v", what, peer.name, err)
				}
				t.Logf("%s at %s peer: failed in %v: %v", what, peer.name, d.Round(time.Millisecond), err)
			}
			stop := heapWatch(t, limit)

			// each operation is bounded by its own 40 s context; the
			// test waits for the outcome, never for a fixed time
			opCtx, opCancel := context.WithTimeout(ctx, 40*time.Second)
			w := NewWriter(peer.addr, "reports")
			if off {
				w.Transport.(*kafkago.Transport).Dial = nil
			}
			t0 := time.Now()
			err := w.WriteMessages(opCtx, kafkago.Message{Value: []byte("x")})
			check("Writer.WriteMessages", err, time.Since(t0))
			CloseWriter(w)
			opCancel()

			opCtx, opCancel = context.WithTimeout(ctx, 40*time.Second)
			cl := clientCtx(opCtx, peer.addr)
			if off {
				cl.Transport.(*kafkago.Transport).Dial = nil
			}
			t0 = time.Now()
			_, err = cl.Metadata(opCtx, &kafkago.MetadataRequest{Topics: []string{}})
			check("Client.Metadata", err, time.Since(t0))
			closeTransport(cl)
			opCancel()

			heap, sys := stop()
			t.Logf("heap growth %d MiB, Sys growth %d MiB", heap>>20, sys>>20)
			if heap > 200<<20 {
				t.Fatalf("heap grew %d MiB talking to a %s peer: want < 200 MiB", heap>>20, peer.name)
			}
			if peer.name != "nats" {
				// kafka-go's Conn (Dialer) sends a request without a
				// line end: an HTTP server waits for the rest of its
				// request line and never answers; Conn has no deadline
				// of its own. Only a peer that speaks first (NATS) is
				// reached through a bare Conn.
				return
			}
			stop = heapWatch(t, limit)
			opCtx, opCancel = context.WithTimeout(ctx, 40*time.Second)
			d := Dialer(opCtx)
			if off {
				d.DialFunc = nil
			}
			t0 = time.Now()
			conn, err := d.DialContext(opCtx, "tcp", peer.addr)
			if err == nil {
				conn.SetDeadline(time.Now().Add(40 * time.Second))
				_, err = conn.ReadPartitions("reports")
				conn.Close()
			}
			check("Dialer.DialContext+ReadPartitions", err, time.Since(t0))
			opCancel()

			heap, sys = stop()
			t.Logf("heap growth %d MiB, Sys growth %d MiB", heap>>20, sys>>20)
			if heap > 200<<20 {
				t.Fatalf("heap grew %d MiB talking to a %s peer: want < 200 MiB", heap>>20, peer.name)
			}
		})
	}
}

// TestGuardedRoundTripBigRecord produces and fetches a 10 MiB record
// through the guarded Transport and Dialer on a kfake broker: a
// legitimate big response passes the guard whole.
func TestGuardedRoundTripBigRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := Start(ctx, t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const topic = "big"
	if err := EnsureTopics(ctx, b.Addr, 1, topic); err != nil {
		t.Fatal(err)
	}
	if err := EnsureMaxMessageBytes(ctx, b.Addr, 32<<20, topic); err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 10<<20)
	for i := range val {
		val[i] = byte(i*7 + i>>13)
	}
	want := sha256.Sum256(val)
	w := NewWriter(b.Addr, topic)
	if w.Transport.(*kafkago.Transport).Dial == nil {
		t.Fatal("the Writer's Transport has no guarded Dial")
	}
	if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("k"), Value: val}); err != nil {
		t.Fatal(err)
	}
	CloseWriter(w)
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{b.Addr}, Topic: topic, Partition: 0,
		MinBytes: 1, MaxBytes: 64 << 20, MaxWait: 200 * time.Millisecond, Dialer: Dialer(ctx)})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(m.Value); got != want || len(m.Value) != len(val) {
		t.Fatalf("fetched %d bytes (sha256 %x); want %d (%x)", len(m.Value), got[:8], len(val), want[:8])
	}
}

// refVerdict walks b as whole frames at once: the first bad size prefix
// and true, or false.
func refVerdict(b []byte, max int32) (int32, bool) {
	for len(b) >= 4 {
		size := int32(binary.BigEndian.Uint32(b))
		if size < 0 || size > max {
			return size, true
		}
		b = b[4:]
		if int64(len(b)) < int64(size) {
			return 0, false
		}
		b = b[size:]
	}
	return 0, false
}

// chunkConn is a net.Conn whose reads return the chunks of data.
type chunkConn struct {
	net.Conn
	data  []byte
	chunk int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, errors.New("eof")
	}
	n := c.chunk
	if n > len(p) {
		n = len(p)
	}
	if n > len(c.data) {
		n = len(c.data)
	}
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkConn) Close() error { return nil }

// guardVerdict reads data through a frameGuard in chunks of chunk bytes.
func guardVerdict(t testing.TB, data []byte, chunk int, max int32) (read []byte, bad bool) {
	g := &frameGuard{Conn: &chunkConn{data: data, chunk: chunk}, addr: "peer:1", max: max}
	buf := make([]byte, 7)
	for {
		n, err := g.Read(buf)
		read = append(read, buf[:n]...)
		if err != nil {
			if errors.Is(err, ErrNotKafka) {
				if n != 0 {
					t.Fatalf("a refused read returned %d bytes", n)
				}
				if _, err2 := g.Read(buf); !errors.Is(err2, ErrNotKafka) {
					t.Fatalf("read after the refusal: %v, want ErrNotKafka again", err2)
				}
				return read, true
			}
			return read, false
		}
	}
}

func frame(body []byte) []byte {
	f := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(f, body...)
}

func TestFrameGuard(t *testing.T) {
	ok := append(append(frame(bytes.Repeat([]byte{1}, 100)), frame(nil)...), frame([]byte("abc"))...)
	for chunk := 1; chunk < 12; chunk++ {
		read, bad := guardVerdict(t, ok, chunk, 100)
		if bad || !bytes.Equal(read, ok) {
			t.Fatalf("chunk %d: good frames refused (%v) or altered", chunk, bad)
		}
		if _, bad := guardVerdict(t, append(ok, frame(bytes.Repeat([]byte{1}, 101))...), chunk, 100); !bad {
			t.Fatalf("chunk %d: a 101-byte frame passed a 100-byte bound", chunk)
		}
		if _, bad := guardVerdict(t, append(ok, 0xff, 0xff, 0xff, 0xff), chunk, 100); !bad {
			t.Fatalf("chunk %d: a negative size passed", chunk)
		}
		if _, bad := guardVerdict(t, []byte("INFO {\"server_id\":1}\r\n"), chunk, MaxResponseBytes); !bad {
			t.Fatalf("chunk %d: a NATS greeting passed", chunk)
		}
	}
}

// FuzzFrameGuard checks the guard's verdict on bytes read in arbitrary
// chunks against a walk over the whole frames.
func FuzzFrameGuard(f *testing.F) {
	f.Add(frame([]byte("abc")), uint8(1), uint16(100))
	f.Add([]byte("INFO {\"server_id\":\"x\"}\r\n"), uint8(3), uint16(1000))
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"), uint8(5), uint16(1000))
	f.Add(append(frame(make([]byte, 10)), 0xff, 0xff, 0xff, 0xfe), uint8(2), uint16(10))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, max uint16) {
		c := int(chunk%16) + 1
		wantSize, wantBad := refVerdict(data, int32(max))
		read, bad := guardVerdict(t, data, c, int32(max))
		if bad != wantBad {
			t.Fatalf("guard bad=%v, walk bad=%v (size %d)", bad, wantBad, wantSize)
		}
		if !bad && !bytes.Equal(read, data) {
			t.Fatal("guard altered the bytes it passed")
		}
	})
}

// BenchmarkFrameGuardRead measures the guard's cost per read of 64 KiB of
// frames of 16 KiB (reported in bytes/s; 0 allocations).
func BenchmarkFrameGuardRead(b *testing.B) {
	g := &frameGuard{addr: "peer:1", max: MaxResponseBytes}
	buf := bytes.Repeat(frame(make([]byte, 16<<10-4)), 4)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, bad := g.scan(buf); bad {
			b.Fatal("refused")
		}
	}
}

// TestNotKafkaPeerTLS checks the claim that TLS needs no guard: a TLS
// Writer pointed at an embedded NATS server fails the TLS handshake (the
// greeting is no TLS record) without a large allocation.
func TestNotKafkaPeerTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nu, err := url.Parse(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	stop := heapWatch(t, 0)
	a := &Auth{TLS: &tls.Config{MinVersion: tls.VersionTLS12}}
	w := NewWriterAuth(a, nu.Host, "reports")
	if w.Transport.(*kafkago.Transport).Dial != nil {
		t.Fatal("a TLS Transport got the plaintext guard")
	}
	err = w.WriteMessages(ctx, kafkago.Message{Value: []byte("x")})
	CloseWriter(w)
	heap, _ := stop()
	if err == nil || heap > 200<<20 {
		t.Fatalf("TLS Writer at a NATS server: err %v, heap growth %d MiB; want an error and < 200 MiB", err, heap>>20)
	}
	t.Logf("TLS Writer at a NATS server: %v (heap growth %d MiB)", err, heap>>20)
}
